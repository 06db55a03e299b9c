"""`mtpstudio gui --demo --screenshots DIR` renders every page to PNG, with no display."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QImage

from mtpstudio.ui.screenshots import SCREENSHOT_SIZE

EXPECTED = [
    "01-hardware.png",
    "02-model.png",
    "03-engine.png",
    "04-vram-budget.png",
    "05-desktop-vram.png",
    "06-service.png",
    "07-launch.png",
]


def test_screenshot_command_renders_every_page(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # the command picks offscreen itself
    out = tmp_path / "shots"
    result = subprocess.run(
        [sys.executable, "-m", "mtpstudio", "gui", "--demo", "--screenshots", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == EXPECTED
    assert [Path(line).name for line in result.stdout.split()] == EXPECTED
    for name in EXPECTED:
        path = out / name
        assert 20_000 < path.stat().st_size < 300_000, name
        image = QImage(str(path))
        assert (image.width(), image.height()) == (
            SCREENSHOT_SIZE.width(),
            SCREENSHOT_SIZE.height(),
        ), name
        # not a blank canvas: many distinct colours
        colours = {
            image.pixel(x, y)
            for x in range(0, image.width(), 37)
            for y in range(0, image.height(), 23)
        }
        assert len(colours) > 8, name


def test_screenshots_do_not_touch_the_remembered_state(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    result = subprocess.run(
        [sys.executable, "-m", "mtpstudio", "gui", "--demo", "--screenshots", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "config" / "mtpstudio").exists()
