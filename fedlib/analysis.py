"""Analyses of finished runs shared by the paper studies: test features under each client's
own model, 2-D embeddings, the uploads a server would receive next, pairwise distances."""

from __future__ import annotations

import numpy as np
import torch

from fedlib.algorithms.base import Round, derive_seed
from fedlib.runner import RunState
from fedlib.validation import ConfigError


def test_features(state: RunState, level: str = "high", max_points: int | None = None, seed: int = 0,
                  clients: list[int] | None = None) -> dict[str, np.ndarray]:
    """Features of every client's local test set under the model the client predicts with
    (docs/fedmps.md, decision 21: t-SNE of z^h, each client's model on its own test set, pooled).

    Returns ``{"z": (n, d), "y": (n,), "client": (n,)}``, subsampled to ``max_points``.
    """
    zs, ys, cs = [], [], []
    with torch.no_grad():
        for cid in clients if clients is not None else range(state.data.num_clients):
            test = state.data.test[cid]
            feats = state.features(cid, test.x)
            zs.append(feats[level].numpy())
            ys.append(test.y.numpy())
            cs.append(np.full(len(test.y), cid))
    out = {"z": np.concatenate(zs), "y": np.concatenate(ys), "client": np.concatenate(cs)}
    if max_points is not None and len(out["y"]) > max_points:
        keep = np.sort(np.random.default_rng(seed).choice(len(out["y"]), max_points, replace=False))
        out = {k: v[keep] for k, v in out.items()}
    return out


def embed_2d(z: np.ndarray, method: str = "tsne", seed: int = 0) -> np.ndarray:
    """2-D embedding of features: scikit-learn t-SNE (PCA init) or umap-learn UMAP.

    t-SNE runs on one OpenMP thread: on a busy 2-core machine its threads' barriers cost ten times the
    CPU of the work (three 200-point embeddings: 47 s of CPU with the default threads, 4.6 s with one),
    and one thread gives the same embedding on any machine."""
    if method == "tsne":
        from sklearn.manifold import TSNE
        from threadpoolctl import threadpool_limits

        perplexity = min(30.0, max(2.0, (len(z) - 1) / 3))
        with threadpool_limits(1):
            return TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed).fit_transform(z)
    if method == "umap":
        import umap

        return umap.UMAP(n_components=2, random_state=seed, n_jobs=1).fit_transform(z)
    raise ConfigError("embedding method", method, "'tsne' or 'umap'")


def next_uploads(state: RunState, clients: list[int] | None = None) -> dict[int, dict]:
    """What each client would upload in the round after the last one: the messages an
    honest-but-curious server receives (the run's saved states are not modified)."""
    out = {}
    rnd = Round(state.round + 1, state.cfg["train"]["rounds"], state.ctx.seed)
    for cid in clients if clients is not None else range(state.data.num_clients):
        torch.manual_seed(derive_seed(state.ctx.seed, 1, rnd.index, cid))  # the engine's seed for that round
        _, up, _ = state.algorithm.local_update(state.ctx, cid, state.clients[cid], state.message(cid),
                                                state.data.train[cid], rnd)
        out[cid] = up
    return out


def pairwise_distances(x: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``x``."""
    t = torch.as_tensor(x, dtype=torch.float64)
    return torch.cdist(t, t).numpy()
