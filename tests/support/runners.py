"""Fakes for the runner interface (``mtpstudio.core.runner.Runner``: ``runner(argv, timeout)
-> RunResult``), for the programs a test machine cannot run as the user's would answer."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from mtpstudio.core.runner import RunResult, SubprocessRunner


class ScriptedRunner:
    """Answers commands from a table keyed by argv[0]; unknown programs are 'not installed'."""

    def __init__(self, answers: dict[str, RunResult] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        self.calls.append(tuple(argv))
        answer = self.answers.get(argv[0])
        if answer is None:
            return RunResult(tuple(argv), None, error="No such file or directory")
        return answer


class FixedRunner:
    """Answers every command with one fixed (recorded) output; records the argv it was asked."""

    def __init__(self, stdout: str, returncode: int = 0, stderr: str = "") -> None:
        self.stdout, self.returncode, self.stderr = stdout, returncode, stderr
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        self.calls.append(tuple(argv))
        return RunResult(tuple(argv), self.returncode, self.stdout, self.stderr)


class CountingRunner:
    """The real runner, counting calls (thread-safe: probes run in a pool)."""

    def __init__(self) -> None:
        self._real = SubprocessRunner(env={"PATH": "/usr/bin:/bin"})
        self._lock = threading.Lock()
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        with self._lock:
            self.calls.append(tuple(argv))
        return self._real(argv, timeout)
