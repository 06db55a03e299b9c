"""The command line as a user runs it (a real subprocess of ``python -m mtpstudio``), and the
model file the CLI tests plan and render for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, display: bool = False) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}
    }
    if display:
        env["QT_QPA_PLATFORM"] = "offscreen"
    return subprocess.run(
        [sys.executable, "-m", "mtpstudio", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def write_model(path: Path) -> Path:
    """A loadable model file: the zero-weight full-size 35B (sparse; units need a real file)."""
    from devkit.zero_gguf import zero_gguf_for_card

    return zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", path)
