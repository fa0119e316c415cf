"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017.

Down: the global model (``w.<name>``: parameters and float buffers). Up: the locally
trained model plus ``num_samples``. The server averages the models, weighted by
sample count (the paper) or unweighted (``weighted: false``, as the FedMPS code
aggregates its FedAvg/FedProx baselines; docs/fedmps.md). Inference: the global
model's head, evaluated on each client's local test set.

Every client starts round 1 from the server's initial model (McMahan et al.); the
FedMPS code instead lets each client start round 1 from its own random init and
averages those, which only changes the first round.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import (Algorithm, load_model_message, mean_params, model_message, sample_weights,
                                   sgd_epochs, weights)
from fedlib.validation import BOOL


@register
@dataclasses.dataclass(frozen=True)
class FedAvg(Algorithm):
    """FedAvg, and the base of the methods that train and average one global model: they
    override :meth:`local_loss`, :meth:`teacher` or the server (module docstrings)."""

    weighted: bool = True  # McMahan et al. Alg. 1: n_k / n weights
    name = "fedavg"
    CONSTRAINTS = {"weighted": BOOL}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int"}
    BROADCAST = {"w.*": "float[...]"}

    def init_server(self, ctx):
        return {"weights": model_message(ctx.new_model(None))}

    def broadcast(self, ctx, server, cid, rnd):
        return dict(server["weights"])

    def global_model(self, ctx, cid, client, msg, fresh=False):
        """The client's working model holding the received global model."""
        model = self.module(ctx, cid, client["model"], fresh=fresh)
        load_model_message(model, msg)
        return model

    def teacher(self, model, msg):
        """A frozen model the local loss distils from, made once per local update (FedNTD,
        FedGKD); ``None`` (default) for none."""
        return None

    def local_loss(self, model, msg, xb, yb, teacher):
        """Batch loss; FedProx, FedUV, FedNTD and FedGKD add their terms here."""
        return F.cross_entropy(model(xb)[0], yb)

    def local_update(self, ctx, cid, client, msg, data, rnd):
        model = self.global_model(ctx, cid, client, msg)
        teacher = self.teacher(model, msg)
        loss = sgd_epochs(ctx, model, data, rnd.generator(cid),
                          lambda xb, yb, epoch: self.local_loss(model, msg, xb, yb, teacher))
        return {"model": weights(model)}, self.upload(model, data), {"train_loss": loss}

    @staticmethod
    def upload(model, data) -> dict:
        """The model and the sample count (for weighting)."""
        up = model_message(model)
        up["num_samples"] = len(data)
        return up

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = list(uploads.values())
        if not msgs:
            return server, {}
        return {**server, "weights": mean_params(msgs, server["weights"], sample_weights(msgs, self.weighted))}, {}

    def predict_model(self, ctx, cid, client, msg, fresh=False):
        model = self.global_model(ctx, cid, client, msg, fresh)
        model.eval()
        return model
