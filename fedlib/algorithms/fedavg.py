"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017.

Down: the global model (``w.<name>``: parameters and float buffers). Up: the locally
trained model plus ``num_samples``. The server averages the models, weighted by
sample count (the paper) or unweighted (``weighted: false``, as the FedMPS code
aggregates its FedAvg/FedProx baselines; docs/fedmps.md). Inference: the head, on each
client's local test set, of the global model (``eval_model: global``, the default: McMahan
et al., and the FedAvg baselines of the FedMPS and FedPCL code) or of the client's own model
after its last local update (``eval_model: local``: the model a personalised evaluation
scores; docs/mpfedcl.md, decisions 14 and 33). A subclass that scores with a model of its own
(IFCA's cluster model) accepts only its default.

Every client starts round 1 from the server's initial model (McMahan et al.); the
FedMPS code instead lets each client start round 1 from its own random init and
averages those, which only changes the first round.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, mean_params, model_message, sample_weights, weights
from fedlib.validation import BOOL, ConfigError, Options


@register
@dataclasses.dataclass(frozen=True)
class FedAvg(Algorithm):
    """FedAvg, and the base of the methods that train and average one global model: they
    override :meth:`local_loss`, :meth:`extras`, :meth:`teachers` or the server (module docstrings)."""

    weighted: bool = True  # McMahan et al. Alg. 1: n_k / n weights
    eval_model: str = "global"  # the model a client is scored with: "global" (aggregated) or "local" (its own)
    name = "fedavg"
    CONSTRAINTS = {"weighted": BOOL, "eval_model": Options(("global", "local"))}
    NEUTRAL = {"eval_model": "global"}  # added after runs existed: they scored the global model
    UPLOAD = {"w.*": "float[...]", "num_samples": "int"}
    BROADCAST = {"w.*": "float[...]"}
    UPLOAD_READS_STATE = True  # upload(model, data) works on a state_dict too (finish_group)

    def __post_init__(self):
        super().__post_init__()
        default = type(self).NEUTRAL["eval_model"]
        if self.eval_model != default and type(self).predict_weights is not FedAvg.predict_weights:
            raise ConfigError(f"algorithm ({self.name}).eval_model", self.eval_model,
                              f"{default!r} ({self.name} scores with a model of its own)")

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

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        return self.local_loss(out, y, extras, teachers, params), {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        return {"model": weights(model)}, self.upload(model, data), metrics

    def finish_group(self, ctx, rnd, group):
        """A batched group without a module per client, where :meth:`finish` is this one and :meth:`upload`
        reads only the weights (``UPLOAD_READS_STATE``): each state the trained weights as they are, each
        upload from them."""
        if type(self).finish is not FedAvg.finish or not self.UPLOAD_READS_STATE:
            return super().finish_group(ctx, rnd, group)
        return {cid: ({"model": group.states[cid]}, self.upload(group.states[cid], group.jobs[cid][2]),
                      group.metrics[cid]) for cid in group.cids}

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
        if self.eval_model == "local":
            return client["model"]  # after its last local update (a personalised evaluation)
        return {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}
