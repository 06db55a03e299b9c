"""One llama-server process: spawned in its own session, logged to a file, stopped for sure."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.errors import ServerError
from mtpstudio.core.server import procfs

LOG_RING_LINES = 2000
STOP_GRACE_S = 10.0
KILL_WAIT_S = 5.0
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProcessSpec:
    """What to execute: argv, the full environment, working folder and log file."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    die_with_parent: bool = False


def process_spec(
    spec: LaunchSpec,
    log_path: Path,
    environ: Mapping[str, str],
    *,
    cwd: Path | None = None,
    die_with_parent: bool = False,
) -> ProcessSpec:
    """The ProcessSpec for a LaunchSpec: the inherited environment minus what the engine would
    read as arguments (``LLAMA_ARG_*``…), plus the spec's own variables (pure)."""
    env = {k: v for k, v in environ.items() if not k.startswith(spec.drop_env_prefixes)}
    env.update(spec.env)
    return ProcessSpec(
        argv=spec.argv,
        env=env,
        cwd=cwd or log_path.parent,
        log_path=log_path,
        die_with_parent=die_with_parent,
    )


@dataclass(frozen=True)
class ProcessOutcome:
    """How a process ended.

    ``returncode`` follows subprocess: negative for a signal. ``stopped`` is True when mtpstudio
    asked it to stop; ``killed`` when SIGKILL was needed. None while it still runs.
    """

    returncode: int | None
    stopped: bool = False
    killed: bool = False

    @property
    def running(self) -> bool:
        return self.returncode is None

    @property
    def signal_name(self) -> str | None:
        """The signal that ended it (also for a shell's 128+N exit status)."""
        code = self.returncode
        if code is None:
            return None
        number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
        if number <= 0:
            return None
        try:
            return signal.Signals(number).name
        except ValueError:
            return f"signal {number}"

    @property
    def crashed(self) -> bool:
        """Ended by a fatal signal nobody here sent (SIGSEGV, SIGABRT, an outside SIGKILL…)."""
        return not self.stopped and self.signal_name is not None

    def describe(self) -> str:
        """A verb phrase for "The server …": 'is still running', 'exited with status 1',
        'crashed with SIGSEGV (exit 139)', 'stopped (exit 0)'."""
        code = self.returncode
        if code is None:
            return "is still running"
        if self.stopped:
            how = "killed after it ignored SIGTERM" if self.killed else "stopped"
            return f"{how} (exit {code})"
        name = self.signal_name
        if name is not None:
            shown = 128 - code if code < 0 else code
            verb = "was killed by" if name in ("SIGKILL", "SIGTERM", "SIGINT") else "crashed with"
            return f"{verb} {name} (exit {shown})"
        return f"exited with status {code}"


class LogRing:
    """The last lines of a log in memory; takes raw bytes in any chunking."""

    def __init__(self, max_lines: int = LOG_RING_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._partial = b""

    def feed(self, data: bytes) -> list[str]:
        """Add bytes; return the lines they completed."""
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        lines = [c.decode("utf-8", errors="replace").rstrip("\r") for c in complete]
        self._lines.extend(lines)
        return lines

    def flush(self) -> list[str]:
        """Treat a trailing partial line as complete (at process exit)."""
        if not self._partial:
            return []
        return self.feed(b"\n")

    def lines(self) -> list[str]:
        return list(self._lines)

    def text(self) -> str:
        return "\n".join(self._lines)


@dataclass
class LogFollower:
    """Reads what a process appended to its log file since the last call, into a LogRing."""

    path: Path
    ring: LogRing = field(default_factory=LogRing)
    offset: int = 0

    def poll(self) -> list[str]:
        """New complete lines (the file may not exist yet)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        return self.ring.feed(data)


def _die_with_parent() -> Callable[[], None]:
    """preexec_fn: SIGKILL the child when the thread that forked it dies (Linux prctl)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def preexec() -> None:  # between fork and exec: keep it tiny
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class ServerProcess:
    """A spawned server. Not thread-safe: one owner polls and stops it.

    The process leads its own session (and process group), so a stop reaches anything it
    started; stdout and stderr go straight to the log file, so the server keeps running and
    logging after the launching CLI exits. ``follower`` mirrors the file into memory.
    """

    def __init__(self, spec: ProcessSpec, proc: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self._proc = proc
        self.follower = LogFollower(spec.log_path)
        self._stopped = False
        self._killed = False

    @classmethod
    def start(cls, spec: ProcessSpec) -> ServerProcess:
        """Spawn; raises ServerError when the binary cannot be executed at all."""
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.cwd.mkdir(parents=True, exist_ok=True)
        try:
            with open(spec.log_path, "wb") as log:
                proc = subprocess.Popen(
                    list(spec.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(spec.env),
                    cwd=spec.cwd,  # ik writes llama.log into its working folder
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=_die_with_parent() if spec.die_with_parent else None,
                )
        except OSError as exc:
            raise ServerError(
                f"cannot start {spec.argv[0]}: {exc.strerror or exc}",
                hint="Check the engine binary path in the plan (mtpstudio detect lists builds).",
            ) from None
        return cls(spec, proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        return self._proc.poll()

    def alive(self) -> bool:
        return self._proc.poll() is None

    @property
    def outcome(self) -> ProcessOutcome:
        return ProcessOutcome(self._proc.poll(), self._stopped, self._killed)

    def read_log(self) -> list[str]:
        """Lines appended since the last call (also kept in ``follower.ring``)."""
        return self.follower.poll()

    def wait(self, timeout: float | None = None) -> ProcessOutcome:
        """Wait for the process to end; raises subprocess.TimeoutExpired after ``timeout``."""
        self._proc.wait(timeout)
        return self.outcome

    def stop(self, grace: float = STOP_GRACE_S) -> ProcessOutcome:
        """SIGTERM the group, wait ``grace`` s, SIGKILL, reap. Idempotent."""
        if self._proc.poll() is None:
            self._stopped = True
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._killed = True
                self._signal(signal.SIGKILL)
                self._proc.wait(KILL_WAIT_S)
        self.follower.poll()
        self.follower.ring.flush()
        return self.outcome

    def kill(self) -> ProcessOutcome:
        """SIGKILL the group at once and reap."""
        if self._proc.poll() is None:
            self._stopped = self._killed = True
            self._signal(signal.SIGKILL)
            self._proc.wait(KILL_WAIT_S)
        return self.outcome

    def _signal(self, sig: signal.Signals) -> None:
        # Signal the group while the leader is unreaped, so its id cannot have been recycled.
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)


def pid_alive(pid: int, start: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, when given, started at ``start`` (clock ticks
    since boot, see ``procfs.start_ticks``); another start time means the pid was reused."""
    return procfs.is_running(pid, start)


def stop_pid(
    pid: int, start: int, grace: float = STOP_GRACE_S, binary: str | None = None
) -> ProcessOutcome:
    """Stop a server another mtpstudio call started (not our child, so no exit code).

    The process is identified first: its start time (always required: a record without one is
    never acted on) and, when ``binary`` is given, its program (``/proc/PID/exe``); a reused pid
    or another program is never signalled. Then SIGTERM - to its process group only when it
    leads its own (mtpstudio starts servers in their own session), else to it alone - wait up
    to ``grace`` s, then SIGKILL.

    Raises:
        ServerError: the pid runs another program than ``binary``, may not be signalled, or
            survived SIGKILL (should not happen).
    """
    if not pid_alive(pid, start):
        return ProcessOutcome(returncode=0, stopped=True)
    if binary is not None and not procfs.runs_binary(pid, binary):
        shown = procfs.exe_path(pid) or "a program this user may not look at"
        raise ServerError(
            f"pid {pid} runs {shown}, not the recorded engine {binary}, so it was not signalled",
            hint="The record is not this server's; `mtpstudio server status` removes it.",
        )
    group = procfs.leads_group(pid)
    last = signal.SIGTERM
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT_S)):
        last = sig
        if not pid_alive(pid, start):  # never signal a pid that has been reused meanwhile
            break
        try:
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            raise ServerError(
                f"not allowed to stop the server with pid {pid}",
                hint="It runs as another user; stop it as that user (or via systemctl).",
            ) from None
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and pid_alive(pid, start):
            time.sleep(0.05)
        if not pid_alive(pid, start):
            break
    if pid_alive(pid, start):
        raise ServerError(f"the server with pid {pid} did not stop even after SIGKILL")
    # Not our child: its exit status is its reaper's; report the signal that ended it.
    return ProcessOutcome(returncode=-int(last), stopped=True, killed=last is signal.SIGKILL)
