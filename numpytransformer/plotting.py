"""Attention heatmaps (matplotlib, imported only when a plot is asked for).

Figures are built as ``matplotlib.figure.Figure`` objects and written straight to a file,
without pyplot: the library never switches matplotlib's backend, so plots shown inline in
a notebook keep working after the library has written a PNG.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from .errors import NumpyTransformerError

__all__ = ["image_suffixes", "plot_attention"]


def new_figure(**kwargs):
    """A matplotlib ``Figure`` that is not registered with pyplot (so nothing to close)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise NumpyTransformerError("plots need matplotlib: pip install matplotlib") from None
    return Figure(**kwargs)


def image_suffixes() -> tuple:
    """The file suffixes a plot can be saved as: matplotlib picks the format by suffix.

    PGF is left out: matplotlib writes it only with a LaTeX installation."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise NumpyTransformerError("plots need matplotlib: pip install matplotlib") from None
    return tuple("." + kind for kind in sorted(FigureCanvasBase.get_supported_filetypes()) if kind != "pgf")


def plot_attention(maps: Dict[str, np.ndarray], labels: Dict[str, tuple], path, title: str = "") -> Path:
    """One heatmap per layer and head.

    Parameters
    ----------
    maps : dict name -> weights (H, T, S) for one example
    labels : dict name -> (query labels (T,), key labels (S,))
    path : where to write the PNG
    """
    names = list(maps)
    H = max(m.shape[0] for m in maps.values())
    fig = new_figure(figsize=(2.2 * H + 0.6, 2.3 * len(names) + 0.5))
    axes = fig.subplots(len(names), H, squeeze=False)
    for r, name in enumerate(names):
        ylab, xlab = labels[name]
        for h in range(H):
            ax = axes[r, h]
            if h >= maps[name].shape[0]:
                ax.axis("off")
                continue
            ax.imshow(maps[name][h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(len(xlab)))
            ax.set_xticklabels(xlab, fontsize=6, rotation=90)
            ax.set_yticks(range(len(ylab)))
            ax.set_yticklabels(ylab, fontsize=6)
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
        raise ValueError(f"could not write {path}: {e}") from None
    return path


def short_labels(tokens: Sequence[str]) -> list:
    return [str(t)[:10] for t in tokens]
