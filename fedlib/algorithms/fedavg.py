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

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, mean_params, model_message, sample_weights, weights
from fedlib.validation import BOOL


@register
@dataclasses.dataclass(frozen=True)
class FedAvg(Algorithm):
    """FedAvg, and the base of the methods that train and average one global model: they
    override :meth:`local_loss`, :meth:`extras`, :meth:`teachers` or the server (module docstrings)."""

    weighted: bool = True  # McMahan et al. Alg. 1: n_k / n weights
    name = "fedavg"
    CONSTRAINTS = {"weighted": BOOL}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int"}
    BROADCAST = {"w.*": "float[...]"}

    def init_server(self, ctx):
        return {"weights": model_message(ctx.new_model(None))}

    def broadcast(self, ctx, server, cid, rnd):
        return dict(server["weights"])

    def task(self, ctx, cid, client, msg, data, rnd):
        start = {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}  # the global model
        return LocalTask(start, extras=self.extras(msg), teachers=self.teachers(start, msg))

    def extras(self, msg) -> dict:
        """Tensors the local loss reads besides the batch (FedProx: the global weights)."""
        return {}

    def teachers(self, start: dict, msg) -> dict:
        """Frozen models the local loss distils from (FedNTD, FedGKD): ``{name: state_dict}``."""
        return {}

    def local_loss(self, out, y, extras, teachers, params):
        """Batch loss; FedProx, FedUV, FedNTD and FedGKD add their terms here."""
        return F.cross_entropy(out[0], y)

    def batch_loss(self, out, y, epoch, extras, teachers, params):
        return self.local_loss(out, y, extras, teachers, params), {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        return {"model": weights(model)}, self.upload(model, data), metrics

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

    def predict_weights(self, ctx, cid, client, msg):
        return {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}
