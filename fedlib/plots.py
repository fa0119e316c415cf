"""Figures: partition heatmaps, accuracy curves, 2-D embeddings, distance heatmaps."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator
import seaborn as sns


def partition_heatmap(partition, ax=None, title: str | None = None, annotate: bool | None = None):
    """Client x class training-sample counts (FedMPS Fig. 3, ProtoNorm Figs. 7-8 style).

    x = client id, y = class id, colour = number of samples; absent cells stay white.
    """
    counts = partition.counts.T
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5, 0.4 * counts.shape[1] + 2), max(3, 0.35 * counts.shape[0] + 1.5)))
    if annotate is None:
        annotate = counts.size <= 400
    sns.heatmap(counts, ax=ax, cmap="Blues", vmin=0, annot=annotate, fmt="d", mask=counts == 0,
                cbar_kws={"label": "samples"}, annot_kws={"fontsize": 7}, linewidths=0.3, linecolor="#eee")
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_title(title or f"{partition.params.get('scheme')} partition ({partition.hash})")
    return ax


MARKERS = "osD^vP*X"
DASHES = ("-", "--", ":", "-.")


def accuracy_curves(records_by_label: dict[str, list[dict]], metric: str | dict[str, str], ax=None,
                    ylabel: str | None = None, stat: str = "mean"):
    """Client accuracy per round for several runs (FedMPS Fig. 4 style).

    ``metric`` is one key for every run or ``{label: key}`` (e.g. each method under the
    paper's own convention); ``stat``: ``"mean"`` over clients or ``"weighted"`` (total
    correct over total test samples, PFLlib's). Each line has its own marker and dash pattern,
    so lines that coincide stay distinguishable; rounds are whole numbers on the axis.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for i, (label, records) in enumerate(records_by_label.items()):
        key = metric[label] if isinstance(metric, dict) else metric
        pts = [(r["round"], 100 * r["acc"][key][stat]) for r in records if "acc" in r and key in r["acc"]]
        if pts:
            rounds, acc = zip(*pts, strict=True)
            ax.plot(rounds, acc, label=label, marker=MARKERS[i % len(MARKERS)], ls=DASHES[i % len(DASHES)],
                    ms=4 if len(pts) < 15 else 0, alpha=0.85)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel or (f"{metric} (%)" if isinstance(metric, str) else "accuracy (%)"))
    ax.legend(fontsize=8)
    return ax


def embedding_scatter(points: np.ndarray, labels: np.ndarray, ax=None, title: str | None = None,
                      num_classes: int | None = None):
    """A 2-D embedding (t-SNE, UMAP) coloured by class (FedMPS Figs. 6-7 style)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    num_classes = num_classes or int(labels.max()) + 1
    palette = sns.color_palette("tab10" if num_classes <= 10 else "husl", num_classes)
    for c in np.unique(labels):
        sel = labels == c
        ax.scatter(points[sel, 0], points[sel, 1], s=4, color=palette[int(c)], label=str(int(c)))
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def distance_heatmap(dist: np.ndarray, ticks: list, ax=None, title: str | None = None, label: str = "distance", *,
                     blocks: bool | None = None, groups=None, cbar: bool = True, vmin: float | None = None,
                     vmax: float | None = None, xlabel: str | None = None, ylabel: str | None = None,
                     fontsize: float = 7):
    """Pairwise distances (e.g. between global prototypes) as an annotated heatmap (values written in the cells up to
    12 rows).

    ``blocks``: label each run of equal consecutive ticks (a class block) once, at its middle (``fontsize``), with
    lines between the blocks; by default only with more than 40 rows. ``groups`` (one value per row, e.g. a
    clustering's labels): lines between the runs of equal consecutive values, the ticks kept per row. ``cbar``,
    ``vmin``, ``vmax``: the colour bar and a colour scale shared between panels; ``xlabel``, ``ylabel``: the axes'
    names."""
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 4))
    many = len(ticks) > 40 if blocks is None else blocks
    sns.heatmap(np.asarray(dist), ax=ax, cmap="viridis", annot=len(ticks) <= 12, fmt=".2f",
                xticklabels=False if many else ticks, yticklabels=False if many else ticks, vmin=vmin, vmax=vmax,
                annot_kws={"fontsize": 6}, cbar=cbar, cbar_kws={"label": label} if cbar else None)

    def runs(values):
        return [i for i in range(len(values)) if i == 0 or values[i] != values[i - 1]] + [len(values)]

    lines = []
    if many:
        starts = runs(ticks)
        mids = [(a + b) / 2 for a, b in zip(starts[:-1], starts[1:], strict=True)]
        names = [str(ticks[a]) for a in starts[:-1]]
        ax.set_xticks(mids, names, fontsize=fontsize, rotation=0)
        ax.set_yticks(mids, names, fontsize=fontsize)
        lines += starts[1:-1]
    if groups is not None:
        lines += runs(list(groups))[1:-1]
    for b in sorted(set(lines)):
        ax.axhline(b, color="white", lw=1.5 if groups is not None and not many else 0.4)
        ax.axvline(b, color="white", lw=1.5 if groups is not None and not many else 0.4)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def partition_bubbles(partition, ax=None, title: str | None = None):
    """Client x class training samples as bubbles, area proportional to the count (MP-FedCL Fig. 6 style)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 0.6 * partition.num_clients + 2), 4))
    counts = np.asarray(partition.counts)
    clients, classes = np.nonzero(counts)
    sizes = counts[clients, classes]
    ax.scatter(clients, classes, s=600 * sizes / sizes.max(), c=clients, cmap="tab10", alpha=0.6,
               edgecolors="black", linewidths=0.5)
    ax.set_xticks(range(partition.num_clients))
    ax.set_yticks(range(counts.shape[1]))
    ax.set(xlabel="client", ylabel="class", title=title or "training samples per client and class")
    ax.set_xlim(-0.7, partition.num_clients - 0.3)
    ax.set_ylim(-0.7, counts.shape[1] - 0.3)
    return ax


def mean_curve(records_by_seed: list[list[dict]], metric: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """``(rounds, mean, std)``: the seed-mean accuracy curve (%, unweighted mean over clients) of per-seed round
    records over the rounds every seed evaluated, and the sample std (ddof 1) over seeds per round (NaN with one)."""
    curves = [{r["round"]: 100 * r["acc"][metric]["mean"] for r in recs if "acc" in r and metric in r["acc"]}
              for recs in records_by_seed]
    rounds = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    y = np.array([[c[t] for t in rounds] for c in curves], float)
    std = y.std(axis=0, ddof=1) if len(curves) > 1 else np.full(len(rounds), np.nan)
    return rounds, y.mean(axis=0) if len(curves) else np.array([]), std


def curve_panel(ax, by_method: dict, metric_of, label_of) -> None:
    """Each method's seed-mean curve on ``ax`` (``by_method``: ``{method: [records per seed]}``, scored by
    ``metric_of(method)``, labelled ``label_of(method)``) with a band of ± the sample std over seeds (none with one
    seed); the FedMPS, MP-FedCL and GFPL accuracy figures draw theirs with it."""
    for i, (m, per_seed) in enumerate(by_method.items()):
        rounds, mean, std = mean_curve(per_seed, metric_of(m))
        if not rounds:
            continue
        line, = ax.plot(rounds, mean, label=label_of(m), marker=MARKERS[i % len(MARKERS)],
                        ls=DASHES[i % len(DASHES)], ms=4 if len(rounds) < 15 else 0, alpha=0.85)
        if not np.isnan(std).all():
            ax.fill_between(rounds, mean - std, mean + std, color=line.get_color(), alpha=0.12, lw=0)
    ax.set_xlabel("round")
    ax.legend(fontsize=8)
