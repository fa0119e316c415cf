"""CFL-GP: Heasung Kim, Hyeji Kim, Gustavo de Veciana, "Clustered Federated Learning via Gradient-based
Partitioning", ICML 2024, PMLR 235 (proceedings.mlr.press/v235/kim24p); a baseline of FedIC (Table 1).

The server keeps K cluster models theta_1..theta_K and an assignment a(i) of every client to one of them. Each
round client i trains the model of its cluster and the server moves each cluster model by the mean update of the
clients now assigned to it. Every P rounds (a *partition round*, while the round is at most ``stop``) the server
also gathers gradient information on one *criterion model* theta_n, n = ((r - 1) / P) mod K, so that over K
partition rounds every model has been probed, and accumulates it per client into the gradient profile

    G_i = [gbar_i(theta_1), ..., gbar_i(theta_K)] in R^{K d},
    gbar_i(theta_n) <- gbar_i(theta_n) + (g_i(theta_n) - gbar_i(theta_n)) / m_{i,n}

(the cumulative average of client i's m_{i,n} probes of model n). The partition is spectral clustering of the
profiles: with G (clients x K d) = U S V^T, client i's reduced feature is row i of U_K S_K (the projection of its
profile on the K leading singular directions), and k-means (k-means++, 10 restarts, seeded by run and round)
splits the reduced features into K groups; the new group labels are renamed to agree with the previous
assignment on as many clients as possible (an optimal matching of the K x K confusion table, so that cluster n
keeps model n). The model update of round r, with the assignment after that round's partition,

    theta_k <- theta_k + mean_{i : a(i) = k} Delta_i,    Delta_i = w_i - theta_{a_old(i)},

(plain mean; sample-count weights with ``weighted: true``) averages only within a cluster; a cluster nobody
joins keeps its model. Inference: the model of the client's cluster.

Up: the trained model ``w.*`` and ``num_samples``; in a partition round also the probe ``g.*`` (one tensor per
profiled parameter). Down: the client's cluster model ``w.*``; in a partition round whose criterion model is not
the client's own also the criterion model ``q.*``.

Defaults: ``k: 3`` clusters (the cluster count is given, as in the paper's experiments; FedIC compares at a fixed
count), ``period: 2`` and ``stop: 10`` (the authors' code: clustering period 2, clustering stops after round
10, so rounds 1, 3, 5, 7, 9 partition), ``weighted: false`` (the code's plain mean of updates).

Choices and simplifications:

- The local computation is ``local_epochs`` of SGD and the cluster models move by the mean model update (the
  code's ``model_averaging`` protocol); the paper's gradient-averaging protocol (one stochastic gradient per
  client and round, the server takes the step) is not implemented.
- ``profile``: the probe g_i(theta_n) is the model update from ``local_epochs`` of SGD started at theta_n
  (``update``, the code's model-averaging query; when theta_n is the client's own model this is its ordinary
  update, computed once), or the cross-entropy gradient at theta_n on one batch of ``batch_size`` samples
  (``gradient``, the code's gradient query). The profile covers the model parameters (not BatchNorm buffers);
  ``profile_layers: head`` keeps only the classifier head's (the code's reduced, last-layer option).
- The criterion model cycles through the K models (the paper's "gradients that clients compute for various
  models"); the released code keeps model 0 as criterion and computes the gradient on the client's own model.
- All K models start from the server's one initialisation (the code draws K initialisations, yet every client
  starts from model 0 and the first updates are added to every model): round 1 partitions on the probes of that
  one model and each cluster model becomes its members' average.
- Only clients with at least one probe enter the partition (partial participation); the others keep their
  cluster (model 0 until probed). Fewer probed clients than K give as many groups as clients. No probes are
  gathered after ``stop`` (the code gathers them but never uses them); ``stop: null`` partitions every P rounds
  for the whole run. The unknown-K variant (silhouette over k) is not implemented.
- With ``k: 1`` (or ``stop: 0``) the method is FedAvg with a plain mean (no probes are sent).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import LocalTask, derive_seed, mean_params, model_message, sample_weights, train_task
from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import BOOL, Interval, Options


def spectral_partition(profiles: torch.Tensor, k: int, seed: int) -> np.ndarray:
    """Group labels (n,) of the rows of ``profiles`` (n, D): k-means on the projection of each row
    on the ``k`` leading right singular directions (the rows of U_k S_k), ``min(k, n)`` groups."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    n = profiles.shape[0]
    if n <= 1:
        return np.zeros(n, dtype=np.int64)
    u, s, _ = torch.linalg.svd(profiles.detach().to("cpu", torch.float64), full_matrices=False)
    r = min(k, s.numel())
    feats = (u[:, :r] * s[:r]).numpy()
    with warnings.catch_warnings():  # identical profiles give fewer distinct groups than asked
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=min(k, n), init="k-means++", n_init=10, random_state=seed % 2 ** 32).fit(feats)
    return km.labels_.astype(np.int64)


def match_labels(new: np.ndarray, old: np.ndarray, k: int) -> np.ndarray:
    """``new`` group labels renamed to cluster ids 0..k-1 so that as many clients as possible keep
    their ``old`` id (an optimal assignment on the confusion table; groups are never merged)."""
    from scipy.optimize import linear_sum_assignment

    groups = int(new.max()) + 1 if len(new) else 0
    table = np.zeros((groups, k), dtype=np.int64)
    np.add.at(table, (new, old), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    rename = np.empty(groups, dtype=np.int64)
    rename[rows] = cols
    return rename[new]


@register
@dataclasses.dataclass(frozen=True)
class CFLGP(FedAvg):
    k: int = 3                  # clusters (cluster models)
    period: int = 2             # P: a partition round every P rounds (code: clustering period 2)
    stop: int | None = 10       # last round that may partition (code: 10); null: never stop
    profile: str = "update"     # the probe: "update" (model update from theta_n) or "gradient" (one batch)
    profile_layers: str = "all"  # parameters in the profile: "all" or "head"
    weighted: bool = False      # plain mean of the cluster's updates (code: torch.mean)
    name = "cflgp"
    CONSTRAINTS = {"k": Interval(1, None, integer=True), "period": Interval(1, None, integer=True),
                   "stop": Interval(0, None, integer=True, allow_none=True),
                   "profile": Options(("update", "gradient")), "profile_layers": Options(("all", "head")),
                   "weighted": BOOL}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "g.*": "float[...]"}
    BROADCAST = {"w.*": "float[...]", "q.*": "float[...]"}

    # -- schedule ------------------------------------------------------------------------
    def partitions(self, rnd) -> bool:
        """Whether round ``rnd`` gathers probes and re-partitions the clients."""
        return self.k > 1 and (rnd.index - 1) % self.period == 0 and (self.stop is None or rnd.index <= self.stop)

    def criterion(self, rnd) -> int:
        """The criterion model of a partition round: the models in turn."""
        return (rnd.index - 1) // self.period % self.k

    def profiled(self, name: str) -> bool:
        return self.profile_layers == "all" or name.startswith("head.")

    # -- server --------------------------------------------------------------------------
    def init_server(self, ctx):
        model = ctx.new_model(None)
        w = model_message(model)
        d = sum(p.numel() for n, p in model.named_parameters() if self.profiled(n))
        N, dev = ctx.num_clients, ctx.device
        return {"models": [{k: v.clone() for k, v in w.items()} for _ in range(self.k)],
                "assign": torch.zeros(N, dtype=torch.int64, device=dev),
                "profile": torch.zeros(N, self.k, d if self.k > 1 else 0, device=dev),
                "counts": torch.zeros(N, self.k, dtype=torch.int64, device=dev)}

    def broadcast(self, ctx, server, cid, rnd):
        own = int(server["assign"][cid])
        msg = dict(server["models"][own])
        if self.partitions(rnd) and self.criterion(rnd) != own:
            msg.update({"q." + k[2:]: v for k, v in server["models"][self.criterion(rnd)].items()})
        return msg

    def aggregate(self, ctx, server, uploads, rnd):
        ids = sorted(uploads)
        if not ids:
            return server, {}
        models = server["models"]
        keys = list(models[0])
        old = server["assign"]
        deltas = {c: {k: uploads[c][k] - models[int(old[c])][k] for k in keys} for c in ids}
        assign, profile, counts = old.clone(), server["profile"], server["counts"]
        metrics = {"partitioned": 0}
        if self.partitions(rnd):
            n = self.criterion(rnd)
            profile, counts = profile.clone(), counts.clone()
            for c in ids:
                g = [uploads[c][k].flatten() for k in sorted(uploads[c]) if k.startswith("g.")]
                if g:
                    counts[c, n] += 1
                    profile[c, n] += (torch.cat(g) - profile[c, n]) / counts[c, n]
            seen = torch.nonzero(counts.sum(1) > 0).flatten()
            labels = spectral_partition(profile[seen].reshape(len(seen), -1), self.k,
                                        derive_seed(rnd.seed, 22, rnd.index))
            matched = match_labels(labels, old[seen].cpu().numpy(), self.k)
            assign[seen] = torch.from_numpy(matched).to(assign.device)
            metrics["partitioned"] = 1
        new_models = list(models)
        for j in range(self.k):
            members = [c for c in ids if int(assign[c]) == j]
            if members:
                w = sample_weights([uploads[c] for c in members], True) if self.weighted else None
                step = mean_params([deltas[c] for c in members], keys, w)
                new_models[j] = {k: models[j][k] + step[k] for k in keys}
        metrics["clusters_used"] = int(assign.unique().numel())
        return {**server, "models": new_models, "assign": assign, "profile": profile, "counts": counts}, metrics

    # -- client --------------------------------------------------------------------------
    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        """FedAvg's upload, plus the gradient information where this round partitions (after the update is
        taken from ``model``: the probe reuses its scratch module)."""
        state, up, metrics = super().finish(ctx, cid, client, msg, data, rnd, task, model, sums, metrics)
        if self.partitions(rnd):
            up.update(self.probe(ctx, cid, client, msg, data, rnd, up))
        return state, up, metrics

    def probe(self, ctx, cid, client, msg, data, rnd, up) -> dict:
        """``g.*``: the client's gradient information on the criterion model (``q.*``, or its own
        model ``w.*`` when the criterion is its cluster's)."""
        prefix = "q." if any(k.startswith("q.") for k in msg) else "w."
        start = {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith(prefix)}}
        model = self.module(ctx, cid, start)
        names = [n for n, _ in model.named_parameters() if self.profiled(n)]
        if self.profile == "gradient":
            gen = torch.Generator().manual_seed(derive_seed(rnd.seed, 23, rnd.index, cid))
            idx = torch.randperm(len(data), generator=gen)[:ctx.train.batch_size]
            model.train()
            params = dict(model.named_parameters())
            loss = F.cross_entropy(model(data.x[idx])[0], data.y[idx])
            grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
            return {"g." + n: (torch.zeros_like(params[n]) if g is None else g.detach())
                    for n, g in zip(names, grads, strict=True)}
        if prefix == "w.":  # the criterion is the client's own model: its ordinary update
            return {"g." + n: up["w." + n] - start[n] for n in names}
        trained, _, _, _ = train_task(self, ctx, cid, LocalTask(start), data, rnd)
        after = trained.state_dict()
        return {"g." + n: after[n].detach() - start[n] for n in names}
