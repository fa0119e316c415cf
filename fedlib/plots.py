"""Figures: partition heatmaps and accuracy curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
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


def accuracy_curves(records_by_label: dict[str, list[dict]], metric: str, ax=None):
    """Mean client accuracy per round for several runs (FedMPS Fig. 4 style)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for label, records in records_by_label.items():
        pts = [(r["round"], 100 * r["acc"][metric]["mean"]) for r in records if "acc" in r and metric in r["acc"]]
        if pts:
            ax.plot(*zip(*pts), label=label)
    ax.set_xlabel("round")
    ax.set_ylabel(f"{metric} (%)")
    ax.legend()
    return ax
