"""A private X server (Xvfb) for the tests that run the real xcb platform plugin."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
from collections.abc import Iterator

SCREEN = (1280, 900)


@contextlib.contextmanager
def xvfb_display() -> Iterator[str]:
    """A private Xvfb on a free display number (Xvfb picks it and reports it on a pipe)."""
    xvfb = shutil.which("Xvfb")
    assert xvfb, "Xvfb is missing: install the xvfb package (scripts/test does)"
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [xvfb, "-displayfd", str(write_fd), "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24",
         "-br", "-nolisten", "tcp", "-noreset"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 30)
        number = os.read(read_fd, 64).decode().strip() if ready else ""
        assert number.isdigit(), (
            f"Xvfb did not start: {proc.stderr.read(2000) if proc.stderr else ''}"
        )
        yield f":{number}"
    finally:
        os.close(read_fd)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
