"""Test hook: stop the helper at a named step of a write (SIGKILL, ENOSPC, or a pause).

Off unless ``MTPSTUDIO_HELPER_FAULT`` is set, and always off under pkexec (``PKEXEC_UID`` set;
pkexec also drops the caller's environment). ``MTPSTUDIO_HELPER_TRACE=FILE`` appends the name
of every step reached, one per line, so a test can list them and then stop at each in turn.

``MTPSTUDIO_HELPER_FAULT=ACTION@WHERE[,ACTION@WHERE…]`` where ACTION is ``kill`` (SIGKILL
itself), ``enospc`` (raise "No space left on device") or ``pause`` (create
``$MTPSTUDIO_HELPER_PAUSE.paused`` and wait, at most 30 s, for ``$MTPSTUDIO_HELPER_PAUSE.resume``),
and WHERE is the N-th step reached (a number, from 1) or a step name with an optional ``#N``
occurrence. Several faults (a disk that stays full while the helper puts things back) are
separated by commas.
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
    """Counts the steps of one helper run and acts at the configured ones."""

    def __init__(
        self,
        faults: tuple[tuple[str, str], ...] = (),
        trace: str | None = None,
        pause_base: str | None = None,
    ) -> None:
        self._faults = faults  # (action, where) pairs
        self._trace = trace
        self._pause = pause_base
        self._count = 0
        self._by_name: dict[str, int] = {}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Faults:
        """The hook as the environment sets it (nothing under pkexec)."""
        if environ.get("PKEXEC_UID") is not None:
            return cls()
        faults = []
        for spec in environ.get(FAULT_ENV, "").split(","):
            action, _, where = spec.strip().partition("@")
            if action in {"kill", "enospc", "pause"} and where:
                faults.append((action, where))
        return cls(tuple(faults), environ.get(TRACE_ENV) or None, environ.get(PAUSE_ENV))

    def point(self, name: str) -> None:
        """Reached step ``name``: record it, and act if it is a configured one."""
        self._count += 1
        self._by_name[name] = self._by_name.get(name, 0) + 1
        if self._trace:
            with open(self._trace, "a", encoding="utf-8") as handle:
                handle.write(name + "\n")
        for action, where in self._faults:
            if self._matches(name, where):
                self._act(action)

    def _act(self, action: str) -> None:
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        elif action == "pause" and self._pause:
            Path(self._pause + ".paused").touch()
            deadline = time.monotonic() + PAUSE_LIMIT_S
            while not os.path.exists(self._pause + ".resume") and time.monotonic() < deadline:
                time.sleep(0.01)

    def _matches(self, name: str, where: str) -> bool:
        if where.isdigit():
            return self._count == int(where)
        wanted, _, nth = where.partition("#")
        return wanted == name and self._by_name[name] == (int(nth) if nth.isdigit() else 1)
