"""Matplotlib figures written as small palette PNGs whose bytes depend only on the figure: what
the reports, the studies and `--mode=diagnose` draw."""

from __future__ import annotations

import io

from transformer import paths

PNG_COLORS = 64  # plots are lines on white: a palette keeps their colours, 3-4x smaller


def save_png(plt, fig, path: str, dpi: int) -> None:
  """Writes `fig` to `path` as a palette PNG and closes it. The bytes depend only on the
  figure (no date or software version in the file), so a regenerated report is identical."""
  from PIL import Image  # loaded with matplotlib, only when drawing
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=dpi)
  plt.close(fig)
  image = Image.open(buf).convert("RGB")
  image = image.quantize(PNG_COLORS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
  with paths.open_file(path, "wb") as f:
    image.save(f, format="png", optimize=True)
