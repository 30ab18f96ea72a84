"""Attention heatmaps, and the figures the trainer and the sweep draw.

Figures are ``matplotlib.figure.Figure`` objects written straight to a file, without
pyplot: the library never switches matplotlib's backend, so a notebook's inline plots keep
working after it has written a PNG. matplotlib is imported only when a plot is asked for.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np

from ..errors import NumpyTransformerError

__all__ = ["new_figure", "image_suffixes", "plot_history", "plot_attention"]


def new_figure(**kwargs):
    """A matplotlib ``Figure`` that is not registered with pyplot (so nothing to close)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise NumpyTransformerError("plots need matplotlib: pip install matplotlib") from None
    return Figure(**kwargs)


def image_suffixes() -> tuple:
    """The suffixes a plot can be saved as (matplotlib picks the format by suffix); PGF is
    left out, as matplotlib writes it only with a LaTeX installation."""
    kinds = new_figure().canvas.get_supported_filetypes()
    return tuple("." + kind for kind in sorted(kinds) if kind != "pgf")


def plot_history(history: dict, path, log=print) -> None:
    """Loss and learning-rate curves as a PNG (skipped, with a note, without matplotlib)."""
    try:
        fig = new_figure(figsize=(10, 3.5))
    except NumpyTransformerError:
        log("matplotlib is not installed: no curves.png (pip install matplotlib)")
        return
    steps, epochs = history["steps"], history["epochs"]
    ax1, ax2 = fig.subplots(1, 2)
    updates = [s["step"] for s in steps]
    ax1.plot(updates, [s["loss"] for s in steps], lw=0.8, label="train (per update, label-smoothed)")
    if epochs and "val_loss" in epochs[0]:
        ax1.plot([e["step"] for e in epochs], [e["val_loss"] for e in epochs], "o-", label="validation (no smoothing)")
    ax1.set(xlabel="update", ylabel="loss", yscale="log")
    ax1.legend()
    ax2.plot(updates, [s["lr"] for s in steps])
    ax2.set(xlabel="update", ylabel="learning rate")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_attention(maps: Dict[str, np.ndarray], labels: Dict[str, tuple], path, title: str = "") -> Path:
    """One heatmap per layer (row) and head (column), written to ``path``.

    Parameters
    ----------
    maps : dict name -> weights (H, T, S) for one example
    labels : dict name -> (query labels (T,), key labels (S,))
    """
    H = max(m.shape[0] for m in maps.values())
    fig = new_figure(figsize=(2.2 * H + 0.6, 2.3 * len(maps) + 0.5))
    axes = fig.subplots(len(maps), H, squeeze=False)
    for r, (name, weights) in enumerate(maps.items()):
        ylab, xlab = labels[name]
        for h, ax in enumerate(axes[r]):
            if h >= weights.shape[0]:
                ax.axis("off")
                continue
            ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(len(xlab)), xlab, fontsize=6, rotation=90)
            ax.set_yticks(range(len(ylab)), ylab, fontsize=6)
            if h == 0:
                ax.set_ylabel(name.replace(".layers.", " L").replace("_attn", ""), fontsize=7)
            if r == 0:
                ax.set_title(f"head {h}", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, dpi=110)
    except RuntimeError as e:  # a format whose writer needs a program that is missing
        raise NumpyTransformerError(f"could not write {path}: {e}") from None
    return path
