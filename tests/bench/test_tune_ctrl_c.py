"""Ctrl-C during `mtpstudio tune`: the handler may interrupt a write to stderr and must not fail."""

from __future__ import annotations

import io
import os
import signal
import sys

import pytest

from mtpstudio.cli.tune import CANCELLING, _ctrl_c_cancels
from mtpstudio.core.cancel import CancelToken


class _InterruptingRaw(io.RawIOBase):
    """A pipe whose first write is interrupted by SIGINT, as a real Ctrl-C can land mid-print."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.interrupted = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if not self.interrupted:
            self.interrupted = True
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler)
            handler(signal.SIGINT, None)  # the handler runs inside this buffered write
        return os.write(self.fd, bytes(data))


def test_ctrl_c_landing_inside_a_stderr_write_cancels_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    raw = _InterruptingRaw(write_end)
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BufferedWriter(raw), write_through=True))
    cancel = CancelToken()
    with _ctrl_c_cancels(cancel):
        print("[1 done, 3 left] baseline: code_python", file=sys.stderr, flush=True)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read().decode()
    assert cancel.cancelled
    assert CANCELLING in said
    assert "baseline: code_python" in said
