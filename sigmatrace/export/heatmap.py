"""A communication matrix drawn as a heatmap PNG (matplotlib, Agg: no display needed)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..correlate.matrix import Matrix
from .outfile import open_output


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} PB"


def draw(m: Matrix, path: str | os.PathLike, metric: str = "bytes", title: str | None = None) -> Path:
    """The heatmap as a PNG at `path` (see .outfile: a link there is not followed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = (m.bytes if metric == "bytes" else m.ops).astype(np.float64)
    n = len(m.labels)
    size = max(4.0, min(0.6 * n + 3, 30.0))
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    im = ax.imshow(data, cmap="viridis", interpolation="nearest")
    ax.set_xticks(range(n), labels=m.labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels=m.labels, fontsize=8)
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    ax.set_title(title or f"{metric} by {m.by}")
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cb.set_label(metric)
    if n <= 16:
        top = data.max() if data.size else 0
        for i in range(n):
            for j in range(n):
                if data[i, j]:
                    text = human_bytes(data[i, j]) if metric == "bytes" else f"{int(data[i, j])}"
                    ax.text(j, i, text, ha="center", va="center", fontsize=7,
                            color="black" if data[i, j] > top * 0.6 else "white")
    fig.tight_layout()
    path = Path(path)
    try:
        with open_output(path, "wb") as f:
            fig.savefig(f, format="png", dpi=120)
    finally:
        plt.close(fig)
    return path
