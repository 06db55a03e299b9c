"""Hidden smoke hook: once the wizard is on screen, save the screen as a PNG and quit.

``MTPSTUDIO_SMOKE_SCREENSHOT=/path/shot.png mtpstudio gui --demo`` waits until the window is
exposed and painted, grabs the whole screen through the platform plugin (on xcb: the X server's
root window, so the PNG shows what the server really displays), prints one line naming the
platform, and closes the wizard the normal way. Used by the xcb/Xvfb test; not a user option.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping

from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

SMOKE_ENV = "MTPSTUDIO_SMOKE_SCREENSHOT"
SHOW_TIMEOUT_S = 30.0
SETTLE_MS = 800  # after the first expose, let the first paints reach the server


def arm_smoke_screenshot(window: QWidget, environ: Mapping[str, str] = os.environ) -> None:
    """When ``MTPSTUDIO_SMOKE_SCREENSHOT`` is set, screenshot and close ``window`` once shown."""
    target = environ.get(SMOKE_ENV)
    if not target:
        return
    deadline = time.monotonic() + SHOW_TIMEOUT_S
    poll = QTimer(window)

    def finish() -> None:
        app = QGuiApplication.instance()
        screen = window.screen()
        shot = screen.grabWindow(0)
        saved = shot.save(target, "PNG")
        platform = app.platformName() if isinstance(app, QGuiApplication) else "?"
        geo = window.frameGeometry()
        print(
            f"mtpstudio smoke: platform={platform} window={geo.width()}x{geo.height()}"
            f"+{geo.x()}+{geo.y()} screen={shot.width()}x{shot.height()} saved={saved} {target}",
            flush=True,
        )
        window.close()

    def check() -> None:
        handle = window.windowHandle()
        if handle is not None and handle.isExposed():
            poll.stop()
            QTimer.singleShot(SETTLE_MS, finish)
        elif time.monotonic() > deadline:
            poll.stop()
            print("mtpstudio smoke: the window was never exposed", file=sys.stderr, flush=True)
            window.close()

    poll.timeout.connect(check)
    poll.start(50)
