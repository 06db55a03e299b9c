"""Render the app icon's PNG sizes (resources/icons/png/) from resources/icons/mtpstudio.svg.

Run ``.venv/bin/python scripts/render_icons.py`` after changing the SVG and commit the PNGs;
``--check`` only reports PNGs that are missing or differ from a fresh rendering (exit 1).
Qt renders offscreen, so no display is needed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "resources" / "icons" / "mtpstudio.svg"
PNG_DIR = ROOT / "resources" / "icons" / "png"
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
MAX_MEAN_DIFFERENCE = 2.0  # per channel, 0-255: room for another Qt's antialiasing


def png_path(size: int, folder: Path = PNG_DIR) -> Path:
    """Where the ``size`` x ``size`` PNG lives (packaging installs it into hicolor)."""
    return folder / f"mtpstudio-{size}.png"


def render(svg: bytes, size: int):  # type: ignore[no-untyped-def]
    """The SVG drawn on a transparent ``size`` x ``size`` QImage."""
    from PySide6.QtCore import QByteArray, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(QByteArray(svg))
    if not renderer.isValid():
        raise SystemExit(f"error: {SVG} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def mean_difference(a, b) -> float:  # type: ignore[no-untyped-def]
    """Mean absolute difference per channel of two same-sized ARGB32 images."""
    from PySide6.QtGui import QImage

    a = a.convertToFormat(QImage.Format.Format_ARGB32)
    b = b.convertToFormat(QImage.Format.Format_ARGB32)
    if a.size() != b.size():
        return 255.0
    bytes_a, bytes_b = bytes(a.constBits()), bytes(b.constBits())  # type: ignore[call-overload]
    return sum(abs(x - y) for x, y in zip(bytes_a, bytes_b, strict=True)) / len(bytes_a)


def stale_pngs(folder: Path = PNG_DIR) -> list[str]:
    """The PNGs that are missing or differ from a fresh rendering of the SVG."""
    from PySide6.QtGui import QImage

    svg = SVG.read_bytes()
    stale = []
    for size in SIZES:
        path = png_path(size, folder)
        current = QImage(str(path))
        if current.isNull() or mean_difference(current, render(svg, size)) > MAX_MEAN_DIFFERENCE:
            stale.append(path.name)
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale PNGs")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    if args.check:
        stale = stale_pngs()
        for name in stale:
            print(f"stale: resources/icons/png/{name}")
        return 1 if stale else 0
    PNG_DIR.mkdir(parents=True, exist_ok=True)
    svg = SVG.read_bytes()
    for size in SIZES:
        if not render(svg, size).save(str(png_path(size)), "PNG"):
            raise SystemExit(f"error: could not write {png_path(size)}")
        print(f"wrote {png_path(size).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
