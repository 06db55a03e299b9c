"""The real xcb platform plugin opens the wizard on an X server (Xvfb), not only offscreen."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage
from support.xvfb import SCREEN


@pytest.mark.slow
def test_wizard_opens_on_xvfb_with_the_xcb_plugin(xvfb_display: str, tmp_path: Path) -> None:
    shot = tmp_path / "xcb-window.png"
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "DISPLAY": xvfb_display,
        "QT_QPA_PLATFORM": "xcb",
        "MTPSTUDIO_SMOKE_SCREENSHOT": str(shot),
    }
    mtpstudio = Path(sys.executable).with_name("mtpstudio")
    argv = [str(mtpstudio)] if mtpstudio.exists() else [sys.executable, "-m", "mtpstudio"]
    out = subprocess.run(
        [*argv, "gui", "--demo"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    match = re.search(
        r"platform=(\w+) window=(\d+)x(\d+)\+(-?\d+)\+(-?\d+) screen=(\d+)x(\d+) saved=True",
        out.stdout,
    )
    assert match, out.stdout + out.stderr
    platform, *numbers = match.groups()
    w, h, x, y, sw, sh = (int(n) for n in numbers)
    assert platform == "xcb"
    assert (sw, sh) == SCREEN and w >= 800 and h >= 600

    # The PNG is the X server's root window: the wizard's pixels inside its frame, the black
    # root (-br) outside it.
    image = QImage(str(shot))
    assert (image.width(), image.height()) == SCREEN

    def lit(px: int, py: int) -> bool:
        return image.pixelColor(px, py).lightness() > 16

    inside = [
        lit(px, py) for px in range(x + 5, x + w - 5, 37) for py in range(y + 5, y + h - 5, 29)
    ]
    outside = [lit(px, py) for px in range(0, SCREEN[0], 41) for py in range(0, SCREEN[1], 31)
               if not (x <= px < x + w and y <= py < y + h)]  # fmt: skip
    assert sum(inside) / len(inside) > 0.7
    assert outside and not any(outside)
    keep = os.environ.get("MTPSTUDIO_KEEP_XCB_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
