"""Figure of the prototype inversion attack in the style of FedMPS Fig. 11."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from fedlib.privacy.attack import AttackReport
from fedlib.privacy.metrics import to_unit_range


def _show(ax, image: np.ndarray) -> None:
    if image.shape[-1] == 1:
        ax.imshow(image[..., 0], cmap="gray", vmin=0.0, vmax=1.0)
    else:
        ax.imshow(image)
    ax.set_xticks([])
    ax.set_yticks([])


def _smooth(curve: np.ndarray, window: int) -> np.ndarray:
    window = max(1, min(window, len(curve)))
    return np.convolve(curve, np.ones(window) / window, mode="valid")


def attack_figure(report: AttackReport, class_names: Sequence[str] | None = None, smooth: int = 50,
                  image_size: float = 1.3, title: str | None = None, fontsize: float = 9.0) -> Figure:
    """FedMPS Fig. 11: originals, reconstructions per level combination, loss curves.

    Rows are the client's classes. Columns: one private image of the class (when the
    report has client data), then the reconstruction from the prototypes for each level
    combination in ``report.runs`` (by default low+high, low, high), each with its SSIM
    against the client's images of the class under it (when the report has scores), and a
    last column with every decoder's training MSE (log scale, moving average over
    ``smooth`` steps, the raw curve faint behind it). ``title``: the figure's title (default
    a generic one); ``fontsize``: of the labels and the SSIMs (points; the report shows the
    figure at 120 dpi).

    Parameters
    ----------
    report : AttackReport from :func:`fedlib.privacy.prototype_attack`
    class_names : names indexed by class id, optional
    smooth : int, moving-average window of the loss curves
    image_size : float, inches per image cell

    Returns
    -------
    matplotlib Figure
    """
    columns: list[tuple[str, np.ndarray]] = []
    if report.originals is not None:
        columns.append(("original", to_unit_range(report.originals, report.mean, report.std)))
    for name, run in report.runs.items():
        columns.append((name, to_unit_range(run.recons, report.mean, report.std)))
    ssim = {}                                   # (levels, class) -> SSIM of the reconstruction
    if len(report.scores):
        own = report.scores[report.scores["source"] == "prototype"]
        ssim = {(lv, int(c)): float(v) for lv, c, v in zip(own["levels"], own["class"], own["ssim"], strict=True)}
    rows, cols = len(report.classes), len(columns)
    fig = plt.figure(figsize=(image_size * cols + 4.0, (image_size + 0.25) * max(rows, 2) + 1.0),
                     layout="constrained")
    title = title or "Reconstructions of the client's classes from its uploaded prototypes" + (
        ", SSIM under each" if ssim else "")
    chars = max(40, int(fig.get_size_inches()[0] * 72 / (fontsize + 2) / 0.55))   # a line fits the figure's width
    fig.suptitle("\n".join(textwrap.fill(line, chars) for line in title.split("\n")), fontsize=fontsize + 2)
    grid = fig.add_gridspec(rows, cols + 1, width_ratios=[1.0] * cols + [3.0 / image_size])
    for r, c in enumerate(report.classes.tolist()):
        for j, (name, images) in enumerate(columns):
            ax = fig.add_subplot(grid[r, j])
            _show(ax, images[r])
            if r == 0:
                ax.set_title("client image" if name == "original" else f"from {name}", fontsize=fontsize)
            if j == 0:
                ax.set_ylabel(class_names[c] if class_names is not None else f"class {c}", fontsize=fontsize)
            if (name, c) in ssim:
                ax.set_xlabel(f"SSIM {ssim[(name, c)]:.2f}", fontsize=fontsize, labelpad=2)
    ax = fig.add_subplot(grid[:, cols])
    ax.set_title("decoder training loss", fontsize=fontsize)
    for name, run in report.runs.items():
        curve = run.result.loss_curve
        (line,) = ax.plot(np.arange(len(curve)), curve, alpha=0.2, linewidth=0.6)
        window = max(1, min(smooth, len(curve)))
        ax.plot(np.arange(window - 1, len(curve)), _smooth(curve, window), color=line.get_color(), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("reconstruction MSE (decoder training)")
    ax.legend(title="levels", fontsize=8)
    return fig
