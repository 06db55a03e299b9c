"""The injected command runner: argv + timeout -> RunResult, never raising, never hanging."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# Upstream llama-server applies LLAMA_ARG_* (and LLAMA_API_KEY, LLAMA_LOG_*) before argv, so a
# probe must not inherit them; ik reads a few too.
DROPPED_ENV_PREFIXES = ("LLAMA_",)
MAX_OUTPUT_CHARS = 1_000_000


@dataclass(frozen=True)
class RunResult:
    """What one command did.

    ``returncode`` is None when the command did not finish (timeout) or could not start
    (``error`` says why, e.g. "No such file or directory").
    """

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        """stderr then stdout: the engines print --version on stderr, --help on stdout."""
        return self.stderr + self.stdout

    def reason(self, timeout: float | None = None) -> str:
        """One phrase saying why the command did not succeed ('' when it did)."""
        if self.error is not None:
            return f"could not run: {self.error}"
        if self.timed_out:
            limit = f" within {timeout:g} s" if timeout is not None else ""
            return f"did not finish{limit}"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        if self.returncode != 0:
            # stderr first: ik prints why on stderr and its whole usage on stdout after it
            line = first_error_line(self.stderr) or first_error_line(self.stdout)
            suffix = f": {line}" if line else ""
            return f"exit status {self.returncode}{suffix}"
        return ""


def first_error_line(text: str) -> str:
    """The most telling line of an engine's failure output (an 'error' line, else the last)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:200]
    return lines[-1][:200] if lines else ""


class Runner(Protocol):
    """Runs a command; must return (not raise) and must give up after ``timeout`` seconds."""

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult: ...


def clean_environ(
    environ: Mapping[str, str], drop_prefixes: Sequence[str] = DROPPED_ENV_PREFIXES
) -> dict[str, str]:
    """A copy of ``environ`` without the variables the engines would read as arguments."""
    return {k: v for k, v in environ.items() if not k.startswith(tuple(drop_prefixes))}


class SubprocessRunner:
    """The real runner: a new session per command, killed as a group on timeout.

    A new process group matters: a shell script that starts ``sleep`` keeps the output pipes
    open after the shell itself is killed, so killing only the child would still hang.
    Thread-safe; the flag probes call it from a thread pool.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = clean_environ(os.environ if env is None else env)

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        args = tuple(str(a) for a in argv)
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                start_new_session=True,
            )
        except OSError as exc:
            return RunResult(args, None, error=exc.strerror or str(exc))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=2.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable child
                out, err = b"", b""
            return RunResult(args, None, _text(out), _text(err), timed_out=True)
        return RunResult(args, proc.returncode, _text(out), _text(err))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()


def _text(data: bytes | None) -> str:
    if not data:
        return ""
    return data[:MAX_OUTPUT_CHARS].decode("utf-8", errors="replace")
