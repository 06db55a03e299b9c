"""The committed PNG icons are the SVG rendered at every hicolor size (scripts/render_icons.py)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

ROOT = Path(__file__).resolve().parents[2]


def render_icons() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_icons", ROOT / "scripts/render_icons.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_icons", module)
    spec.loader.exec_module(module)
    return module


def test_every_png_has_its_size_and_is_not_blank(qapp: QApplication) -> None:
    icons = render_icons()
    for size in icons.SIZES:
        image = QImage(str(icons.png_path(size)))
        assert (image.width(), image.height()) == (size, size), size
        assert image.hasAlphaChannel()
        centre = image.pixelColor(size // 2, size // 2)
        corner = image.pixelColor(0, 0)
        assert centre.alpha() == 255 and corner.alpha() == 0, size


def test_the_pngs_match_a_fresh_rendering_of_the_svg(qapp: QApplication) -> None:
    assert render_icons().stale_pngs() == []


def test_a_png_from_another_drawing_is_reported_stale(qapp: QApplication, tmp_path: Path) -> None:
    icons = render_icons()
    for size in icons.SIZES:
        shutil.copy(icons.png_path(size), icons.png_path(size, tmp_path))
    other = icons.render(
        b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 8 8">'
        b'<circle cx="4" cy="4" r="4" fill="red"/></svg>',
        48,
    )
    other.save(str(icons.png_path(48, tmp_path)))
    icons.png_path(16, tmp_path).unlink()
    assert icons.stale_pngs(tmp_path) == ["mtpstudio-16.png", "mtpstudio-48.png"]
