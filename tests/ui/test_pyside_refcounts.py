"""The installed PySide6 keeps reference counts right (6.12.0 does not: pyproject excludes it)."""

from __future__ import annotations

import os
import subprocess
import sys

STRESS = """
import os
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel
from mtpstudio.ui.app import ensure_application

class Ping(QObject):
    ping = Signal(int)

app = ensure_application()
label, ping = QLabel(), Ping()
for i in range(60_000):      # void calls: each drops a reference to None on the buggy build
    label.setText("x")
for i in range(20_000):      # emits: each drops a reference to True on the buggy build
    ping.ping.emit(i)
app.processEvents()
print("alive")
"""


def test_many_void_calls_and_emits_do_not_abort_the_interpreter() -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    result = subprocess.run(
        [sys.executable, "-c", STRESS], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "alive"
