"""Render Duet's SVG icon to the bitmap formats the desktops want, with Qt (no display needed).

    python packaging/render_icons.py SVG OUT...    e.g.  duet.png  duet-48.png  duet.ico  duet.icns

The format follows OUT's suffix (png, ico, icns: Qt's image plugins write all three); the size
is 256 px, or N px for a name ending in ``-N`` (``duet-48.png``). ``.icns`` gets 512 px.
Exit status 0, or 1 with one line on stderr.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

DEFAULT_SIZE = 256
SIZES = {".icns": 512}


def size_for(out: Path) -> int:
    m = re.search(r"-(\d+)$", out.stem)
    return int(m.group(1)) if m else SIZES.get(out.suffix.lower(), DEFAULT_SIZE)


def render(svg: Path, out: Path, size: int) -> None:
    """Draw ``svg`` into a transparent ``size``×``size`` image and save it as ``out``."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"not a valid SVG: {svg}")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    out.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(out), out.suffix.lstrip(".").upper()):
        raise ValueError(f"Qt cannot write {out.suffix} images here: {out}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: render_icons.py SVG OUT...", file=sys.stderr)
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(["render_icons"])  # noqa: F841
    svg = Path(argv[0])
    try:
        for name in argv[1:]:
            out = Path(name)
            render(svg, out, size_for(out))
    except ValueError as e:
        print(f"render_icons: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
