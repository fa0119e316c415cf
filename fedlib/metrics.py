"""Accuracy under every evaluation convention, named explicitly.

Per client and inference rule ``r`` (``head``, ``proto``, ...):
- ``acc_<r>``: argmax over all classes;
- ``acc_<r>_own``: argmax restricted to the classes the client holds training data of
  (FedMPS's protocol for its prototype methods; docs/fedmps.md).
Over clients: ``mean`` (unweighted, as FedMPS/FedProto report), ``std`` (np.std across
clients, FedMPS Table VI) and ``weighted`` (sum correct / sum samples, as PFLlib/HtFLlib).
Over rounds: ``best`` (max of the per-round mean) and ``last``.
"""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import torch


def client_accuracies(scores: dict[str, torch.Tensor], y: torch.Tensor, own: torch.Tensor,
                      num_classes: int) -> dict[str, torch.Tensor]:
    """Accuracy of one client's test set under every rule, over all and own classes, as 0-dim
    tensors on the scores' device (read them with :func:`to_host`)."""
    mask = torch.zeros(num_classes, dtype=torch.bool, device=y.device)
    mask[own] = True
    out = {}
    for rule, s in scores.items():
        s_own = s.masked_fill(~mask.unsqueeze(0), float("-inf"))
        for key, t in ((f"acc_{rule}", s), (f"acc_{rule}_own", s_own)):
            out[key] = (t.argmax(1) == y).float().mean() if len(y) else torch.full((), float("nan"), device=y.device)
    return out


def group_accuracies(scores: dict[str, torch.Tensor], y: torch.Tensor, valid: torch.Tensor,
                     own: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`client_accuracies` of G clients at once: ``scores`` ``{rule: (G, n, C)}`` on test sets padded to
    n (``y`` (G, n), ``valid`` (G, n) marks the real samples), ``own`` (G, C) the classes each client holds;
    ``{key: (G,)}`` (NaN for an empty test set)."""
    n = valid.sum(1).to(torch.float32)
    out = {}
    for rule, s in scores.items():
        s_own = s.masked_fill(~own.unsqueeze(1), float("-inf"))
        for key, t in ((f"acc_{rule}", s), (f"acc_{rule}_own", s_own)):
            out[key] = ((t.argmax(2) == y) & valid).sum(1).to(torch.float32) / n
    return out


def to_host(per_client: list[dict[str, torch.Tensor]], pending: dict | None = None) -> dict[str, list[float]]:
    """``{metric: [value per client]}`` from :func:`client_accuracies` of every client, read in one
    transfer (each value as ``float()`` of its tensor gives it); the 0-dim tensors of ``pending``
    come along and are replaced there by their floats."""
    keys = list(per_client[0]) if per_client else []
    extra = list(pending or {})
    flat = [acc[k].double() for acc in per_client for k in keys] + [pending[k].double() for k in extra]
    vals = torch.stack(flat).tolist() if flat else []
    for i, k in enumerate(extra):
        pending[k] = vals[len(vals) - len(extra) + i]
    n = len(keys)
    return {k: [vals[c * n + i] for c in range(len(per_client))] for i, k in enumerate(keys)}


def over_clients(per_client: dict[str, list[float]], sizes: list[int]) -> dict[str, dict[str, float]]:
    """``{metric: {"mean", "std", "weighted"}}`` from per-client values and test-set sizes."""
    w = np.asarray(sizes, dtype=float)
    out = {}
    for key, vals in per_client.items():
        v = np.asarray(vals, dtype=float)
        out[key] = {"mean": float(np.mean(v)), "std": float(np.std(v)),
                    "weighted": float(np.sum(v * w) / w.sum()) if w.sum() else float("nan")}
    return out


def summarize_rounds(records: list[dict]) -> dict[str, dict]:
    """Best and last round of every metric in per-round records (see the engine's log)."""
    evals = [r for r in records if "acc" in r]
    out: dict[str, dict] = {}
    if not evals:
        return out
    for key in evals[-1]["acc"]:
        means = [r["acc"][key]["mean"] for r in evals]
        b = int(np.nanargmax(means))
        bw = int(np.nanargmax([r["acc"][key]["weighted"] for r in evals]))
        out[key] = {"best": means[b], "best_round": evals[b]["round"], "best_std": evals[b]["acc"][key]["std"],
                    "last": means[-1], "last_round": evals[-1]["round"], "last_std": evals[-1]["acc"][key]["std"],
                    "last_weighted": evals[-1]["acc"][key]["weighted"],
                    "best_weighted": float(max(r["acc"][key]["weighted"] for r in evals)),
                    "best_weighted_round": evals[bw]["round"]}
    return out


def median_seconds(records: list[dict], skip: int = 1) -> float:
    """Median seconds per round, skipping the first ``skip`` (warm-up) rounds when possible."""
    secs = [r["seconds"] for r in records[skip:]] or [r["seconds"] for r in records]
    return statistics.median(secs)


COMM_KEYS = ("up_params", "up_bytes", "down_params", "down_bytes")


def run_numbers(records: list[dict]) -> dict:
    """The numbers a finished run's summary holds, derived from its per-round log alone (as JSON
    stores them): rounds, every metric's best and last round, communication and seconds per round.
    A reader re-derives them from the verified log, so an edited summary is never served."""
    return json.loads(json.dumps({
        "rounds": len(records), "metrics": summarize_rounds(records),
        "comm_per_round": {k: float(np.mean([r[k] for r in records])) for k in COMM_KEYS},
        "seconds_per_round_median": median_seconds(records)}))


def over_seeds(summaries: list[dict], key: str, stat: str = "best") -> tuple[float, float]:
    """Mean and sample std (ddof 1; NaN with one seed) over seeds of ``summary["metrics"][key][stat]``."""
    v = np.asarray([s["metrics"][key][stat] for s in summaries], dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else math.nan
