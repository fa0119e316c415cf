"""FedNH: Dai et al., "Tackling Data Heterogeneity in Federated Learning with Class
Prototypes", AAAI 2023 (ProtoNorm Table 3 homogeneous baseline; docs/protonorm.md).

The classifier is a cosine classifier whose weight rows are class prototypes p_k on the unit
hypersphere: logits_k = s * <z / ||z||, p_k> with a scale s. The prototypes are initialised
spread over the sphere and are *not* trained by the clients; clients train the body (and s)
with cross-entropy. After training a client uploads its body and, per class it holds, the
normalised mean of its normalised features with the class count. The server averages the
bodies and moves each prototype towards the count-weighted mean of the clients' class means:

    mu_k  = normalise( sum_i n_ik * normalise(mean_{x in D_ik} z(x)/||z(x)||) / sum_i n_ik )
    p_k  <- normalise( rho * p_k + (1 - rho) * mu_k )

(the server step as the authors' code computes it, ``FedNHServer.aggregate``; the paper body was
not available here, so equations are cited from the code, not by number).
A class nobody holds gets mu_k = 0 and keeps p_k. Inference: the global model's head.

The model's own ``head`` is replaced by :class:`PrototypeHead` on the ``high`` features. Where
a backbone's head is an MLP (``cnn_cifar``) its hidden layers are dropped: FedNH's networks put
the prototype layer directly on the penultimate features.

Down: the global model ``w.<name>`` (body, ``w.head.scale`` and the prototypes
``w.head.prototypes`` (C, d)). Up: the body and ``w.head.scale`` (the prototypes are not
changed by clients, so they are not sent back), ``protos`` (k, d) unit class means,
``classes`` (k,), ``counts`` (k,), ``num_samples``, ``train_loss``. (The FedNH code uploads its
whole state dict, prototypes included, and ProtoNorm Supp. D counts |w| each way; here the
upload is smaller by C*d - k*d floats.)

Hyperparameters and choices (FedNH code = github.com/Yutong-Dai/FedNH):
- ``rho=0.9``: ProtoNorm Table 6 and the code's ``--FedNH_smoothing`` default.
- ``scale=1.0``, ``learn_scale=True``: the code's default ``FedNH_fix_scaling: False`` with the
  scale a learnable parameter initialised at 1.0 in its CNN (``Conv2CifarNH``; 20.0 in its
  ResNet-18) and averaged with the body; ``learn_scale=False`` fixes s (the code's fixed
  option uses 30).
- ``proto_init="orthogonal"``: the code's default ``FedNH_head_init``: a Haar-random matrix
  with orthonormal rows when C <= d (pairwise orthogonal prototypes); for C > d the rows of
  the orthonormal-column matrix are normalised (our choice: the code leaves them below unit
  norm there). ``"uniform"``: evenly spaced angles when d = 2 (the code's option for its 2-D
  toy), i.i.d. uniform points on the sphere otherwise (our extension). Drawn from a generator
  seeded by the run seed, so deterministic per seed.
- ``weighted=False``: the code averages the bodies with equal client weights (server step
  ``w + lr / |S| * sum_i (w_i - w)`` with server lr 1); ``True`` weights by sample counts.
  Prototype means are always weighted by class counts n_ik (the code).
- Not reproduced: the code clips local gradients at norm 10 (the shared SGD loop has no
  clipping) and its optional "adv" prototype aggregation variants (off by default).
- Class means are taken in eval mode over all the client's training samples after training
  (the code's ``_estimate_prototype``).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import derive_seed, mean_params, model_message, sample_weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.prototypes import ProtoAccumulator, aggregate_protos
from fedlib.validation import BOOL, Interval, Options

PROTO_KEY = "w.head.prototypes"


class PrototypeHead(nn.Module):
    """Cosine classifier with fixed prototypes: logits = s * normalise(z) @ P^T (the code's ``Conv2CifarNH``)."""

    def __init__(self, dim: int, num_classes: int, scale: float = 1.0, learn_scale: bool = True):
        super().__init__()
        self.register_buffer("prototypes", torch.zeros(num_classes, dim))  # a buffer: never trained
        self.scale = nn.Parameter(torch.tensor([float(scale)]), requires_grad=learn_scale)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.scale * F.normalize(z, dim=1) @ self.prototypes.T


def init_prototypes(num_classes: int, dim: int, method: str, gen: torch.Generator) -> torch.Tensor:
    """(C, d) unit-norm initial prototypes (see the module docstring for ``method``)."""
    if method == "uniform":
        if dim == 2:
            theta = 2 * math.pi * torch.arange(num_classes, dtype=torch.float32) / num_classes
            return torch.stack([theta.cos(), theta.sin()], dim=1)
        return F.normalize(torch.randn(num_classes, dim, generator=gen), dim=1)
    tall = torch.randn(max(num_classes, dim), min(num_classes, dim), generator=gen)
    q, r = torch.linalg.qr(tall)
    q = q * torch.sign(torch.diagonal(r))  # the sign fix makes q Haar-distributed (as init.orthogonal_)
    w = q.T if num_classes <= dim else q
    return F.normalize(w, dim=1)


def smooth_prototypes(protos: torch.Tensor, uploads: list[dict], rho: float) -> torch.Tensor:
    """The server's prototype update: p_k <- normalise(rho p_k + (1 - rho) mu_k), with mu_k the
    normalised count-weighted mean of the uploaded unit class means (0 for absent classes)."""
    ups = [u for u in uploads if len(u["classes"])]
    if not ups:
        return protos
    mean, _ = aggregate_protos(ups, protos.shape[0], weighted=True)
    return F.normalize(rho * protos + (1 - rho) * F.normalize(mean, dim=1), dim=1)


@register
@dataclasses.dataclass(frozen=True)
class FedNH(FedAvg):
    rho: float = 0.9             # prototype smoothing (ProtoNorm Table 6; FedNH code default)
    scale: float = 1.0           # initial logit scale s (FedNH code, CNN)
    learn_scale: bool = True     # FedNH code: FedNH_fix_scaling False
    proto_init: str = "orthogonal"
    weighted: bool = False       # FedNH code: equal weights for the bodies
    name = "fednh"
    CONSTRAINTS = {"rho": Interval(0, 1), "scale": Interval(0, None, low_open=True), "learn_scale": BOOL,
                   "proto_init": Options(("orthogonal", "uniform"))}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "protos": "float[k, d]", "classes": "int[k]",
              "counts": "int[k]"}

    def build(self, ctx, cid, role="model"):
        model = ctx.new_model(cid)
        model.head = PrototypeHead(model.feature_dims["high"], ctx.num_classes, self.scale, self.learn_scale)
        return model.to(ctx.device)

    def init_server(self, ctx):
        model = self.build(ctx, None)
        gen = torch.Generator().manual_seed(derive_seed(ctx.seed, 7))
        with torch.no_grad():
            model.head.prototypes.copy_(init_prototypes(ctx.num_classes, model.feature_dims["high"],
                                                        self.proto_init, gen))
        return {"weights": model_message(model)}

    UPLOAD_READS_STATE = False  # its upload computes class means with the model

    @staticmethod
    def upload(model, data) -> dict:
        up = {k: v for k, v in FedAvg.upload(model, data).items() if k != PROTO_KEY}  # unchanged by clients
        up.update(FedNH._class_means(model, data, model.head.prototypes.shape[0]))
        return up

    @staticmethod
    def _class_means(model, data, num_classes, chunk=1024):
        """Per held class: normalise(mean of the normalised features), with the class count."""
        acc = ProtoAccumulator(num_classes, model.feature_dims["high"], data.x.device)
        model.eval()
        with torch.no_grad():
            for s in range(0, len(data), chunk):
                acc.add(F.normalize(model(data.x[s:s + chunk])[1]["high"], dim=1), data.y[s:s + chunk])
        up = acc.message()
        up["protos"] = F.normalize(up["protos"], dim=1)
        return up

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = list(uploads.values())
        if not msgs:
            return server, {}
        keys = [k for k in server["weights"] if k != PROTO_KEY]
        new = mean_params(msgs, keys, sample_weights(msgs, self.weighted))
        new[PROTO_KEY] = smooth_prototypes(server["weights"][PROTO_KEY], msgs, self.rho)
        return {"weights": new}, {}
