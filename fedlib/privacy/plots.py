"""Figure of the prototype inversion attack in the style of FedMPS Fig. 11."""

from __future__ import annotations

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
                  image_size: float = 1.3) -> Figure:
    """FedMPS Fig. 11: originals, reconstructions per level combination, loss curves.

    Rows are the client's classes. Columns: one private image of the class (when the
    report has client data), then the reconstruction from the prototypes for each level
    combination in ``report.runs`` (by default low+high, low, high), and a last column
    with every decoder's training MSE (log scale, moving average over ``smooth`` steps,
    the raw curve faint behind it).

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
    rows, cols = len(report.classes), len(columns)
    fig = plt.figure(figsize=(image_size * cols + 4.0, image_size * max(rows, 2) + 0.6), layout="constrained")
    grid = fig.add_gridspec(rows, cols + 1, width_ratios=[1.0] * cols + [3.0 / image_size])
    for r, c in enumerate(report.classes.tolist()):
        for j, (title, images) in enumerate(columns):
            ax = fig.add_subplot(grid[r, j])
            _show(ax, images[r])
            if r == 0:
                ax.set_title(title, fontsize=9)
            if j == 0:
                ax.set_ylabel(class_names[c] if class_names is not None else f"class {c}", fontsize=9)
    ax = fig.add_subplot(grid[:, cols])
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
