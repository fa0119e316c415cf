"""Pictures of the reconstruction attacks: a few images kept small in JSON, and the grid that shows the attacked
client's real images beside what an attack reconstructed.

The leakage study (:mod:`fedlib.papers.privacy`) keeps, beside each run's attack scores, a few of the attacked
client's reconstructions per attack and the private image each one was scored against, as a value derived from the
run (:func:`fedlib.results.derived`), so that the figure is drawn from the run archive later without the model.
Images travel as one grey (or RGB) PNG strip per attack, base64 text (:func:`encode` / :func:`decode`): 8 images of
28 x 28 take about 1-3 kB.

:func:`reconstruction_grid` draws them: one row per (method, attack), each real image beside its reconstruction
with that reconstruction's SSIM under it, rows grouped under headers (what the server holds, or the attack family).
"""

from __future__ import annotations

import base64
import io
import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd


def encode(images: np.ndarray) -> str:
    """``images`` (n, H, W, C) in [0, 1] as one base64 PNG strip (n images side by side, 8 bits per pixel)."""
    from PIL import Image

    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 4 or x.shape[-1] not in (1, 3):
        raise ValueError(f"images of shape (n, H, W, 1 or 3), got {x.shape}")
    strip = np.concatenate(list(np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)), axis=1)   # (H, n W, C)
    buf = io.BytesIO()
    Image.fromarray(strip[..., 0] if strip.shape[-1] == 1 else strip).save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode(text: str, n: int) -> np.ndarray:
    """The ``n`` images of a strip made by :func:`encode`, (n, H, W, C) float in [0, 1] (8-bit steps)."""
    from PIL import Image

    strip = np.asarray(Image.open(io.BytesIO(base64.b64decode(text))), dtype=np.float64) / 255.0
    if strip.ndim == 2:
        strip = strip[..., None]
    w = strip.shape[1] // n
    return np.stack([strip[:, i * w:(i + 1) * w] for i in range(n)])


def spread(count: int, n: int) -> list[int]:
    """``min(n, count)`` indices evenly spaced over ``range(count)``, first and last included: which of an attack's
    reconstructions a picture shows (chosen by position, not by score)."""
    if count <= 0:
        return []
    if count <= n:
        return list(range(count))
    return sorted({int(round(v)) for v in np.linspace(0, count - 1, n)})


def _show(ax, image: np.ndarray) -> None:
    if image.shape[-1] == 1:
        ax.imshow(image[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    else:
        ax.imshow(image, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])


def reconstruction_grid(groups: Sequence[tuple[str, Sequence[dict]]], title: str, image_size: float = 0.66,
                        label_width: float = 2.2, fontsize: float = 9.5, min_columns: int = 5):
    """The attacked client's real images beside their reconstructions.

    ``groups``: ``[(header, rows)]``; each row a dict with ``label`` (its name: method, attack), ``ssim`` (the row's
    SSIM, as the leakage table gives it, printed in the row label), ``real`` and ``recon`` ((n, H, W, C) in [0, 1],
    the same n), ``ssim_each`` (n SSIMs, one under each reconstruction) and optionally ``note`` (a line under the
    label). A row with no images (``recon`` None) shows its label and note only. Each row is two lines of images:
    the client's training images each reconstruction was scored against (grey frames), and under them the
    reconstructions (red frames) with their SSIM below; columns are images (at least ``min_columns`` wide, so that
    the title and headers fit).

    Returns ``(figure, layout)``: ``layout`` has one line per row drawn (``group``, ``label``, ``ssim``, ``images``,
    the row ``text`` printed at its left and the ``ssim_text`` under its reconstructions), so that callers and tests
    read what the figure shows."""
    import matplotlib.pyplot as plt

    groups = [(h, list(rows)) for h, rows in groups if len(rows)] or [(h, []) for h, _ in groups[:1]]
    n = max([len(r["recon"]) for _, rows in groups for r in rows if r.get("recon") is not None] + [min_columns])
    gap = 0.07                                     # inches between two images
    lines = []                                     # (kind, height, header, row)
    for header, rows in groups:
        lines.append(("header", 0.36, header, None))
        for r in rows:
            lines += [("real", image_size, header, r), ("gap", 0.05, header, r), ("recon", image_size, header, r),
                      ("text", 0.34, header, r)]
    widths = [label_width] + sum(([image_size, gap] for _ in range(n)), [])[:-1]
    chars = max(40, int((sum(widths) + 0.2) * 72 / (fontsize + 1.5) / 0.5))   # a title line fits the grid's width
    title = "\n".join(textwrap.fill(line, chars) for line in title.split("\n"))
    top = 0.3 + 0.22 * (title.count("\n") + 1)
    heights = [h for _, h, _, _ in lines]
    fig = plt.figure(figsize=(sum(widths) + 0.2, sum(heights) + top + 0.1))
    W, H = fig.get_size_inches()
    grid = fig.add_gridspec(len(lines), len(widths), height_ratios=heights, width_ratios=widths,
                            left=0.1 / W, right=1 - 0.1 / W, top=1 - top / H, bottom=0.1 / H, wspace=0.0, hspace=0.0)
    fig.suptitle(title, fontsize=fontsize + 1.5, y=1 - 0.1 / H, va="top", linespacing=1.3)
    layout = []
    for i, (kind, _, header, r) in enumerate(lines):
        if kind == "header":
            ax = fig.add_subplot(grid[i, :])
            ax.axis("off")
            ax.text(0.0, 0.2, header, fontsize=fontsize + 0.5, fontweight="bold", va="bottom", ha="left",
                    transform=ax.transAxes)
            ax.axhline(0.08, color="0.6", lw=0.8)
            continue
        if kind != "real":
            continue
        lab = fig.add_subplot(grid[i:i + 3, 0])
        lab.axis("off")
        text = f"{r['label']}\nmean SSIM {r['ssim']:.3f}" + (f"\n{r['note']}" if r.get("note") else "")
        lab.text(1 - 0.3 / label_width, 0.5, text, fontsize=fontsize, ha="right", va="center", transform=lab.transAxes,
                 linespacing=1.2)
        ssim_text = []
        if r.get("recon") is not None:
            for k in range(len(r["recon"])):
                for line, images, colour, tag in ((i, r["real"], "0.55", "real"), (i + 2, r["recon"], "C3", "attack")):
                    ax = fig.add_subplot(grid[line, 1 + 2 * k])
                    _show(ax, images[k])
                    for side in ax.spines.values():
                        side.set_color(colour)
                        side.set_linewidth(1.0)
                    if k == 0:
                        ax.set_ylabel(tag, fontsize=fontsize - 1.5, labelpad=2)
                    if tag == "attack":
                        s = f"{r['ssim_each'][k]:.2f}"
                        ax.set_xlabel(s, fontsize=fontsize, labelpad=2)
                        ssim_text.append(s)
        layout.append({"group": header, "label": r["label"], "ssim": r["ssim"],
                       "images": 0 if r.get("recon") is None else len(r["recon"]), "text": text,
                       "ssim_text": ssim_text})
    return fig, pd.DataFrame(layout, columns=["group", "label", "ssim", "images", "text", "ssim_text"])
