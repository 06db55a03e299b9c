"""Test hook: stop the helper at a named step of a write (SIGKILL, ENOSPC, or a pause).

Off unless ``MTPSTUDIO_HELPER_FAULT`` is set, and always off under pkexec (``PKEXEC_UID`` set;
pkexec also drops the caller's environment). ``MTPSTUDIO_HELPER_TRACE=FILE`` appends the name
of every step reached, one per line, so a test can list them and then stop at each in turn.

``MTPSTUDIO_HELPER_FAULT=ACTION@WHERE`` where ACTION is ``kill`` (SIGKILL itself), ``enospc``
(raise "No space left on device") or ``pause`` (create ``$MTPSTUDIO_HELPER_PAUSE.paused`` and
wait, at most 30 s, for ``$MTPSTUDIO_HELPER_PAUSE.resume``), and WHERE is the N-th step reached
(a number, from 1) or a step name with an optional ``#N`` occurrence.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

FAULT_ENV = "MTPSTUDIO_HELPER_FAULT"
TRACE_ENV = "MTPSTUDIO_HELPER_TRACE"
PAUSE_ENV = "MTPSTUDIO_HELPER_PAUSE"
PAUSE_LIMIT_S = 30.0


class Faults:
    """Counts the steps of one helper run and acts at the configured one."""

    def __init__(
        self,
        action: str | None = None,
        where: str | None = None,
        trace: str | None = None,
        pause_base: str | None = None,
    ) -> None:
        self._action = action
        self._where = where
        self._trace = trace
        self._pause = pause_base
        self._count = 0
        self._by_name: dict[str, int] = {}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Faults:
        """The hook as the environment sets it (nothing under pkexec)."""
        if environ.get("PKEXEC_UID") is not None:
            return cls()
        spec = environ.get(FAULT_ENV, "")
        action, _, where = spec.partition("@")
        if action not in {"kill", "enospc", "pause"} or not where:
            action, where = "", ""
        return cls(
            action or None, where or None, environ.get(TRACE_ENV) or None, environ.get(PAUSE_ENV)
        )

    def point(self, name: str) -> None:
        """Reached step ``name``: record it, and act if it is the configured one."""
        self._count += 1
        self._by_name[name] = self._by_name.get(name, 0) + 1
        if self._trace:
            with open(self._trace, "a", encoding="utf-8") as handle:
                handle.write(name + "\n")
        if self._action is None or not self._matches(name):
            return
        if self._action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self._action == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        elif self._action == "pause" and self._pause:
            Path(self._pause + ".paused").touch()
            deadline = time.monotonic() + PAUSE_LIMIT_S
            while not os.path.exists(self._pause + ".resume") and time.monotonic() < deadline:
                time.sleep(0.01)

    def _matches(self, name: str) -> bool:
        where = self._where or ""
        if where.isdigit():
            return self._count == int(where)
        wanted, _, nth = where.partition("#")
        return wanted == name and self._by_name[name] == (int(nth) if nth.isdigit() else 1)
