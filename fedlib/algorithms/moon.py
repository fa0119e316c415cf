"""MOON: Li, He and Song, "Model-Contrastive Federated Learning", CVPR 2021.

FedAvg whose local loss adds the model-contrastive term (paper Eqs. 2-3)

    CE + mu * -log( e^{sim(z, z_glob)/t} / (e^{sim(z, z_glob)/t} + sum_prev e^{sim(z, z_prev)/t}) ),

with z the local model's representation of a sample, z_glob the (frozen) global model's,
z_prev those of the client's previous local models (a FIFO buffer of ``buffer_size``),
sim the cosine similarity and t the temperature. The server averages the models weighted
by data size (MOON and the FedMPS code, docs/fedmps.md). Messages as in
:mod:`fedavg`. Inference: the global model's head.

Choices:
- ``mu=1``: the FedMPS grid optimum for Fashion-MNIST and FEMNIST (Sec. IV-A), also the
  default of the MOON and FedMPS code; FedMPS uses 0.1 for Flowers/DeFungi/RealWaste and
  5 for CIFAR-10 (MOON's own CIFAR-10 value).
- ``temperature=0.5``, cosine similarity, ``buffer_size=1`` (FedMPS Sec. IV-A, its code).
- The representation is the ``"high"`` feature level: the FedMPS code contrasts the
  L2-normalised high-level features (the models' third output), not a projection head.
- The first round a client trains has no previous model, hence no negative: the term is
  CE over a single logit, i.e. zero, so the loss is CE only (as in both codes, whose
  model pool is empty in round 0).
- The frozen global and previous models run in eval mode (both codes call ``.eval()``).
- ``previous="local"``: the previous model is the client's own model after its last
  local training (MOON paper and code). ``"global"`` reproduces the FedMPS code, which
  fills the pool from the client models *after* loading the new average into them: the
  "previous" model then equals the current global model, positive and negative logits
  coincide, and the term is the constant mu*log 2 with zero gradient, i.e. the method
  trains exactly like data-size-weighted FedAvg.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import model_message, weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import Interval, Options


def moon_contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: list[torch.Tensor],
                          temperature: float) -> torch.Tensor:
    """MOON Eq. 2, the model-contrastive loss, mean over the batch.

    Parameters
    ----------
    z : Tensor, shape (B, d), the local model's representations
    z_glob : Tensor, shape (B, d), the global model's (the positive)
    z_prev : list of Tensor (B, d), the previous local models' (the negatives)
    temperature : float
    """
    sims = [F.cosine_similarity(z, z_glob, dim=-1)] + [F.cosine_similarity(z, zp, dim=-1) for zp in z_prev]
    logits = torch.stack(sims, dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


@register
@dataclasses.dataclass(frozen=True)
class Moon(FedAvg):
    mu: float = 1.0             # FedMPS Sec. IV-A: Fashion-MNIST / FEMNIST optimum; MOON/FedMPS code default
    temperature: float = 0.5    # FedMPS Sec. IV-A: "temperature used in MOON ... is set to 0.5"
    buffer_size: int = 1        # previous models kept (MOON/FedMPS code --model_buffer_size 1)
    level: str = "high"         # FedMPS code contrasts the high-level features
    previous: str = "local"     # "local": MOON; "global": the FedMPS code's pool (see module docstring)
    weighted: bool = True       # MOON/FedMPS code: server mean weighted by data size
    name = "moon"
    CONSTRAINTS = {"mu": Interval(0, None), "temperature": Interval(0, None, low_open=True),
                   "buffer_size": Interval(1, None, integer=True), "level": Options(("high", "low")),
                   "previous": Options(("local", "global"))}

    def init_client(self, ctx, cid):
        # prev: weight messages of the negatives, oldest first; rounds: local updates done so far
        return {**super().init_client(ctx, cid), "prev": [], "rounds": 0}

    def task(self, ctx, cid, client, msg, data, rnd):
        task = super().task(ctx, cid, client, msg, data, rnd)
        prev = list(client["prev"])
        if self.previous == "global" and client["rounds"] > 0:
            # FedMPS code: the pool holds the clients' models after the new average was loaded into them
            prev = (prev + [{k: v.clone() for k, v in msg.items() if k.startswith("w.")}])[-self.buffer_size:]
        if self.mu > 0 and prev:
            task.teachers = {"global": task.weights, **{f"prev{i}": {**task.weights, **{k[2:]: v for k, v in w.items()}}
                                                        for i, w in enumerate(prev)}}
        task.memo["prev"] = prev
        return task

    def local_loss(self, out, y, extras, teachers, params):
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        if "global" in teachers:
            z_prev = [teachers[f"prev{i}"][1][self.level] for i in range(len(teachers) - 1)]
            loss = loss + self.mu * moon_contrastive_loss(feats[self.level], teachers["global"][1][self.level], z_prev,
                                                          self.temperature)
        return loss

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        prev = task.memo["prev"]
        if self.previous == "local":
            prev = (prev + [model_message(model)])[-self.buffer_size:]
        state = {"model": weights(model), "prev": prev, "rounds": client["rounds"] + 1}
        return state, self.upload(model, data), metrics
