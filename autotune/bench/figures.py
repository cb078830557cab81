"""Saving charts: studies/ keeps every step's plots in the checkout, so they go out as 256-colour PNGs
(a matplotlib chart has a few dozen colours), a third of the size of the full-colour file."""
from __future__ import annotations

import io
from pathlib import Path


def save_png(fig, path: Path, dpi: int = 120) -> None:
    """Write `fig` to `path` as a palette PNG and close it."""
    import matplotlib.pyplot as plt
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    palette.save(path, optimize=True)
