"""IFCA: Ghosh, Chung, Yin, Ramchandran, "An Efficient Framework for Clustered Federated Learning", NeurIPS 2020,
arXiv 2006.04088; a baseline of FedIC (Table 1).

The server keeps ``k`` cluster models theta_1..theta_k and sends all of them to every client. A client estimates
its cluster identity as the model with the lowest loss on its local training data (Algorithm 1, line 6)::

    j_i = argmin_j F_i(theta_j),   F_i(theta) = mean cross-entropy of theta on client i's training set

trains theta_{j_i} locally (the model-averaging option II, ``LocalUpdate``: the run's ``local_epochs`` of SGD
with its batch size and learning rate) and uploads the trained model with ``j_i`` and its sample count. The
server averages each cluster's uploads (option II, line 15)::

    theta_j = sum_{i in S_j} w_i theta_i / sum_{i in S_j} w_i,   S_j = {i : j_i = j}

with ``w_i = n_i`` (``weighted: true``, the default here, as FedAvg) or ``w_i = 1`` (``weighted: false``: the
plain mean of Algorithm 1). A cluster nobody chose in a round keeps its model. Inference: each client predicts
with the model of the cluster it chose in its last local update, taken from the next round's broadcast (which
holds the k averaged models); a client that has never trained predicts with cluster 0.

Defaults: ``k: 3`` (the paper sets k to the number of distributions its benchmarks are built from, e.g. the four
rotations of rotated MNIST; the label-skew benchmarks here have no such number, so 3, as FeSEM in this suite).
Initialisation (IFCA's random init): the k models start from different random initialisations: cluster 0 from the
server's initial model (the one FedAvg starts from, so that ``k: 1`` is FedAvg round for round), cluster j >= 1
from a model of the same architecture seeded with ``derive_seed(run seed, 20, j)``.

Up: ``w.<name>`` (parameters and float buffers of the trained model), ``cluster`` (j_i) and ``num_samples``.
Down: ``c<j>.<name>`` for every cluster j, i.e. k models per client per round: IFCA's real downlink cost.

Simplifications: the cluster-identity loss is evaluated in eval mode (BatchNorm running statistics, no dropout) on
the whole local training set before training, ties going to the lowest index; every layer is cluster-specific (the
paper's weight-sharing variant, which shares all but the last layers across clusters, is not implemented); one
random initialisation per run (no restarts); every client runs one architecture (the server's), as FedAvg.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Context, LocalTask, derive_seed, mean_params, model_message, sample_weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import Interval

IFCA_INIT = 20  # derive_seed purpose tag of IFCA's cluster initialisations


def seeded_model(ctx: Context, tag: int, j: int) -> nn.Module:
    """A fresh model of the server's architecture seeded with ``derive_seed(ctx.seed, tag, j)`` (built on the
    CPU under a forked RNG, as :meth:`Context.new_model`)."""
    from fedlib.models import build_model, member

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(ctx.seed, tag, j))
        model = build_model(member(ctx.model_name, None), ctx.input_shape, ctx.num_classes, **ctx.model_args)
    return model.to(ctx.device)


@torch.no_grad()
def eval_logits(model: nn.Module, x: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """``model``'s logits on ``x`` in eval mode, in chunks of ``chunk`` samples (no gradients)."""
    model.eval()
    return torch.cat([model(x[s:s + chunk])[0] for s in range(0, len(x), chunk)])


def argmin_first(values: list[float]) -> int:
    """The index of the smallest value; ties go to the lowest index."""
    return min(range(len(values)), key=values.__getitem__)


def cluster_prefix(j: int) -> str:
    """The key prefix of cluster ``j``'s model in a broadcast."""
    return f"c{j}."


def cluster_weights(client: dict, msg: dict, j: int) -> dict:
    """Cluster ``j``'s ``state_dict`` from a broadcast of all clusters (the client's own model supplies the
    integer buffers that messages do not carry)."""
    p = cluster_prefix(j)
    return {**client["model"], **{k[len(p):]: v for k, v in msg.items() if k.startswith(p)}}


@register
@dataclasses.dataclass(frozen=True)
class IFCA(FedAvg):
    k: int = 3             # cluster models
    weighted: bool = True  # n_i weights within a cluster (as FedAvg); false: Algorithm 1's plain mean
    name = "ifca"
    CONSTRAINTS = {"k": Interval(1, None, integer=True)}
    UPLOAD = {"w.*": "float[...]", "cluster": "int", "num_samples": "int"}
    BROADCAST = {"c*": "float[...]"}

    def init_client(self, ctx, cid):
        return {**super().init_client(ctx, cid), "cluster": 0}

    def init_server(self, ctx):
        models = [ctx.new_model(None)] + [seeded_model(ctx, IFCA_INIT, j) for j in range(1, self.k)]
        return {"clusters": [model_message(m) for m in models]}

    def broadcast(self, ctx, server, cid, rnd):
        return {cluster_prefix(j) + k[2:]: v for j, w in enumerate(server["clusters"]) for k, v in w.items()}

    def cluster_losses(self, ctx, cid, client, msg, data) -> list[float]:
        """F_i(theta_j) for every cluster j: the mean cross-entropy on the client's training set."""
        return [float(F.cross_entropy(eval_logits(self.module(ctx, cid, cluster_weights(client, msg, j)), data.x),
                                      data.y)) for j in range(self.k)]

    def task(self, ctx, cid, client, msg, data, rnd):
        losses = self.cluster_losses(ctx, cid, client, msg, data)
        j = argmin_first(losses)
        return LocalTask(cluster_weights(client, msg, j), memo={"cluster": j, "loss": losses[j]})

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        j = task.memo["cluster"]
        state, up, metrics = super().finish(ctx, cid, client, msg, data, rnd, task, model, sums, metrics)
        return {**state, "cluster": j}, {**up, "cluster": j}, {**metrics, "cluster_loss": task.memo["loss"]}

    def aggregate(self, ctx, server, uploads, rnd):
        if not uploads:
            return server, {}
        clusters = list(server["clusters"])
        chosen = {int(up["cluster"]) for up in uploads.values()}
        for j in sorted(chosen):
            members = [up for up in uploads.values() if int(up["cluster"]) == j]
            clusters[j] = mean_params(members, clusters[j], sample_weights(members, self.weighted))
        return {**server, "clusters": clusters}, {"clusters_used": len(chosen)}

    def predict_weights(self, ctx, cid, client, msg):
        return cluster_weights(client, msg, int(client["cluster"]))
