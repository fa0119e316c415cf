"""Ranking methods over several data sets with its uncertainty: ranks, the Friedman test, the Nemenyi critical
difference and its diagram, bootstrap intervals of mean ranks, and Pareto fronts of accuracy against cost.

Scores come as a frame whose rows are blocks (e.g. ``(setting, seed)``), columns methods and values
accuracies (higher is better; NaN: the method did not run there). The statistics follow J. Demšar,
"Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR 7:1-30 (2006).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def ranks(scores: pd.DataFrame) -> pd.DataFrame:
    """Rank of each method within each block (row): 1 = best, ties share their mean rank, NaN stays NaN and is
    not ranked (the others are ranked among themselves)."""
    return scores.rank(axis=1, ascending=False, method="average", na_option="keep")


def mean_ranks(scores: pd.DataFrame, by: str | None = None) -> pd.Series | pd.DataFrame:
    """Mean rank per method over the blocks it ran in. With ``by`` (a level of the row index, e.g. "setting"):
    a frame with one column per group and ``overall`` (the mean over every block)."""
    r = ranks(scores)
    if by is None:
        return r.mean(axis=0)
    out = r.groupby(level=by, sort=False).mean().T
    out["overall"] = r.mean(axis=0)
    return out


def complete(scores: pd.DataFrame) -> pd.DataFrame:
    """The blocks in which every method has a value."""
    return scores.dropna(axis=0, how="any")


def friedman(scores: pd.DataFrame) -> tuple[float, float, int, int]:
    """Friedman's chi-square test that all methods rank alike, over the complete blocks only (a method missing
    from some block would otherwise need imputing): ``(statistic, p, n_blocks, k_methods)``.
    chi2_F = 12 N / (k (k + 1)) * (sum_j R_j^2 - k (k + 1)^2 / 4), R_j the mean rank of method j; the p of the
    chi-square distribution with k - 1 degrees of freedom (ties get mean ranks, no tie correction)."""
    from scipy.stats import chi2

    full = complete(scores)
    n, k = full.shape
    if n < 2 or k < 2:
        raise ValueError(f"friedman: needs at least 2 complete blocks and 2 methods, got {n} and {k}")
    r = ranks(full).mean(axis=0).to_numpy()
    stat = 12.0 * n / (k * (k + 1)) * (float((r ** 2).sum()) - k * (k + 1) ** 2 / 4.0)
    return stat, float(chi2.sf(stat, k - 1)), n, k


def iman_davenport(statistic: float, n: int, k: int) -> tuple[float, float]:
    """Iman and Davenport's F form of Friedman's statistic, less conservative: ``(F, p)`` with (k - 1) and
    (k - 1)(n - 1) degrees of freedom."""
    from scipy.stats import f

    if statistic >= n * (k - 1):   # every block ranks the methods identically
        return math.inf, 0.0
    value = (n - 1) * statistic / (n * (k - 1) - statistic)
    return value, float(f.sf(value, k - 1, (k - 1) * (n - 1)))


def nemenyi_q(k: int, alpha: float = 0.05) -> float:
    """The Nemenyi test's q_alpha for ``k`` methods: the studentized range quantile over sqrt(2)."""
    from scipy.stats import studentized_range

    if k < 2:
        raise ValueError(f"nemenyi_q: k must be >= 2, got {k}")
    return float(studentized_range.ppf(1.0 - alpha, k, np.inf)) / math.sqrt(2.0)


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """The critical difference of mean ranks for ``k`` methods over ``n`` blocks: q_alpha sqrt(k (k + 1) / (6 n))."""
    return nemenyi_q(k, alpha) * math.sqrt(k * (k + 1) / (6.0 * n))


def rank_intervals(scores: pd.DataFrame, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Bootstrap over blocks (resampled with replacement, ``n_boot`` times) of each method's mean rank: columns
    ``mean_rank`` (on the data), ``low`` and ``high`` (percentile interval at ``level``); deterministic in
    ``seed``. Sorted by mean rank."""
    r = ranks(scores).to_numpy()
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, r.shape[0], size=(n_boot, r.shape[0]))
    with np.errstate(all="ignore"):
        boot = np.stack([np.nanmean(r[p], axis=0) for p in picks])
    tail = (1.0 - level) / 2.0
    out = pd.DataFrame({"mean_rank": np.nanmean(r, axis=0), "low": np.nanquantile(boot, tail, axis=0),
                        "high": np.nanquantile(boot, 1.0 - tail, axis=0)}, index=scores.columns)
    return out.sort_values("mean_rank")


def pareto_front(points: pd.DataFrame, x: str, y: str, minimize_x: bool = True, maximize_y: bool = True) -> list:
    """The index labels of the points no other point dominates (at least as good on both ``x`` and ``y`` and
    strictly better on one); identical points are all on the front. In order of ``x`` (best first)."""
    xs = points[x].to_numpy(float) * (1 if minimize_x else -1)     # smaller is better on both after this
    ys = points[y].to_numpy(float) * (-1 if maximize_y else 1)
    front = []
    for i in range(len(points)):
        dominated = np.any((xs <= xs[i]) & (ys <= ys[i]) & ((xs < xs[i]) | (ys < ys[i])))
        if not dominated:
            front.append(i)
    front.sort(key=lambda i: (xs[i], ys[i]))
    return [points.index[i] for i in front]


def cliques(mean_rank: pd.Series, cd: float) -> list[tuple[int, int]]:
    """The groups of the CD diagram: maximal runs ``(first, last)`` of consecutive methods (in rank order) whose
    mean ranks differ by less than ``cd``; runs of one method are left out."""
    values = mean_rank.sort_values().to_numpy()
    runs = []
    for i in range(len(values)):
        j = i
        while j + 1 < len(values) and values[j + 1] - values[i] < cd:
            j += 1
        if j > i and not any(a <= i and j <= b for a, b in runs):
            runs.append((i, j))
    return runs


def cd_diagram(mean_rank: pd.Series, cd: float, title: str | None = None, highlight: str | None = None):
    """A critical-difference diagram: the rank axis with rank 1 at the left, the better half of the methods
    labelled on the left and the other half on the right, each joined to its mean rank; the CD as a bar above
    the axis; thick bars under the axis join the groups whose mean ranks differ by less than the CD.
    ``highlight``: a method drawn apart (bold, coloured, its line thicker). Returns the Figure."""
    import matplotlib.pyplot as plt

    order = mean_rank.sort_values()
    k = len(order)
    half = (k + 1) // 2
    rows = max(half, k - half)
    groups = cliques(order, cd) if math.isfinite(cd) else []
    lo, hi = 1, max(k, 2)
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.28 * rows + 0.15 * len(groups)))
    ax.set_xlim(lo - 0.5 - 0.25 * (hi - lo), hi + 0.5 + 0.25 * (hi - lo))
    top = 1.0
    ax.hlines(top, lo, hi, color="k", lw=1)
    for t in range(lo, hi + 1):
        ax.vlines(t, top, top + 0.06, color="k", lw=1)
        ax.text(t, top + 0.1, str(t), ha="center", va="bottom", fontsize=8)
    if math.isfinite(cd) and cd > 0:
        ax.hlines(top + 0.45, lo, lo + cd, color="k", lw=1.5)
        ax.text(lo + cd / 2, top + 0.5, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8)
    step = 0.28
    for i, (name, r) in enumerate(order.items()):
        left = i < half
        row = i if left else k - 1 - i
        yl = top - 0.25 - (len(groups) + 1) * 0.12 - row * step
        xl = ax.get_xlim()[0] + 0.1 if left else ax.get_xlim()[1] - 0.1
        mine = highlight is not None and name == highlight
        ax.plot([r, r, xl], [top, yl, yl], color="C3" if mine else "0.3", lw=1.8 if mine else 0.8)
        ax.text(xl, yl, f"{name} ({r:.2f})", ha="left" if left else "right", va="center", fontsize=8,
                color="C3" if mine else "k", fontweight="bold" if mine else "normal")
    for g, (a, b) in enumerate(groups):
        y = top - 0.12 * (g + 1)
        ax.hlines(y, order.iloc[a] - 0.03, order.iloc[b] + 0.03, color="k", lw=3)
    ax.set_ylim(top - 0.3 - (len(groups) + 1) * 0.12 - rows * step, top + 0.8)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def pareto_scatter(points: pd.DataFrame, x: str, y: str, labels: bool = True, logx: bool = False,
                   title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
                   highlight: str | None = None):
    """``y`` against ``x`` per point (index = label), the Pareto front (small ``x``, large ``y``) as a step
    line with its points filled; ``highlight``: a point drawn apart (a large star, its label bold). Returns the
    Figure."""
    import matplotlib.pyplot as plt

    front = pareto_front(points, x, y)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    on = points.index.isin(front)
    ax.scatter(points.loc[~on, x], points.loc[~on, y], s=22, facecolors="none", edgecolors="0.4")
    ax.scatter(points.loc[on, x], points.loc[on, y], s=26, color="C3", label="Pareto front")
    fx, fy = points.loc[front, x].to_numpy(float), points.loc[front, y].to_numpy(float)
    ax.step(fx, fy, where="post", color="C3", lw=1)
    if highlight is not None and highlight in points.index:
        ax.scatter([points.loc[highlight, x]], [points.loc[highlight, y]], s=160, marker="*", color="C0", zorder=3,
                   label=str(highlight))
    if labels:
        for name, row in points.iterrows():
            mine = highlight is not None and name == highlight
            ax.annotate(str(name), (row[x], row[y]), fontsize=8 if mine else 7, xytext=(3, 2),
                        textcoords="offset points", fontweight="bold" if mine else "normal",
                        color="C0" if mine else "k")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.legend(loc="lower right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
