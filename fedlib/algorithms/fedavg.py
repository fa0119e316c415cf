"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017.

Down: the global model (``w.<name>``: parameters and float buffers). Up: the locally
trained model plus ``num_samples``. The server averages the models, weighted by
sample count (the paper) or unweighted (``weighted: false``, as the FedMPS code
aggregates its FedAvg/FedProx baselines; notes fedmps.md §5). Inference: the global
model's head, evaluated on each client's local test set.

Every client starts round 1 from the server's initial model (McMahan et al.); the
FedMPS code instead lets each client start round 1 from its own random init and
averages those, which only changes the first round.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, load_model_message, model_message, sgd_epochs, weighted_mean
from fedlib.validation import BOOL


@dataclasses.dataclass
class FedAvgClient:
    model: object  # working copy, overwritten by the global model each round


@dataclasses.dataclass
class FedAvgServer:
    weights: dict  # {"w.<name>": Tensor}


@register
@dataclasses.dataclass(frozen=True)
class FedAvg(Algorithm):
    weighted: bool = True  # McMahan et al. Alg. 1: n_k / n weights
    name = "fedavg"
    CONSTRAINTS = {"weighted": BOOL}

    def init_client(self, ctx, cid):
        return FedAvgClient(ctx.new_model(cid))

    def init_server(self, ctx):
        return FedAvgServer(model_message(ctx.new_model(None)))

    def broadcast(self, ctx, server, cid):
        return dict(server.weights)

    def local_loss(self, model, msg, xb, yb):
        """Batch loss; FedProx adds its proximal term here."""
        return F.cross_entropy(model(xb)[0], yb)

    def local_update(self, ctx, client, msg, data, gen):
        model = client.model
        load_model_message(model, msg)
        loss = sgd_epochs(ctx, model, data, gen, lambda xb, yb, epoch: self.local_loss(model, msg, xb, yb))
        return client, self.upload(model, data, loss)

    @staticmethod
    def upload(model, data, loss) -> dict:
        """The model, the sample count (for weighting) and the mean training loss."""
        up = model_message(model)
        up["num_samples"] = len(data)
        up["train_loss"] = loss
        return up

    def aggregate(self, ctx, server, uploads):
        msgs = list(uploads.values())
        if not msgs:
            return server
        return FedAvgServer(weighted_mean(msgs, server.weights, self.weighted))

    def predict(self, ctx, client, msg, x):
        load_model_message(client.model, msg)
        client.model.eval()
        return {"head": client.model(x)[0]}
