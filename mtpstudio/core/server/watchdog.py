"""Until a launch hands its server over healthy, the server dies with the launch: a watchdog.

``mtpstudio launch`` (and the GUI) leave a healthy server running after they exit, so the
kernel's parent-death signal (``PR_SET_PDEATHSIG``), which would then kill it too, only serves
the launches that never leave a server behind (``--foreground``, the benchmark). For the others
a watchdog process is started before the server: it runs in its own session (a Ctrl-C or a
kill of the launch's process group does not reach it) and holds the read end of a pipe whose
write end only the launching process holds. The launch writes ``watch PID START`` once the
server is spawned and ``release`` once the server is healthy and recorded (or stopped by the
launch itself). If the launch ends any other way (an exception, SIGTERM, SIGKILL) the pipe
closes without ``release``: the watchdog SIGKILLs the server's process group, if the pid still
has that start time and leads its group, removes the server's state record, and exits.

What is left: SIGKILL of both the launch and the watchdog (two sessions) before the server is
healthy. The server is recorded before the health wait, so ``mtpstudio server stop`` still finds
and stops it then.

Run as ``python -m mtpstudio.core.server.watchdog FD RECORD``; stdlib and procfs only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mtpstudio.core.server import procfs

KILL_WAIT_S = 5.0
_RECORD_LIMIT = 256 * 1024


class Watchdog:
    """The launching side: start the watchdog, tell it the server, release the server."""

    def __init__(self, proc: subprocess.Popen[bytes], write_fd: int) -> None:
        self._proc = proc
        self._fd: int | None = write_fd

    @classmethod
    def start(cls, record: Path) -> Watchdog:
        """Start a watchdog that removes ``record`` (the server's state file) with the server."""
        read_fd, write_fd = os.pipe()
        os.set_inheritable(write_fd, False)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mtpstudio.core.server.watchdog", str(read_fd),
                 str(record)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(read_fd,), start_new_session=True, close_fds=True,
            )  # fmt: skip
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(proc, write_fd)

    def _send(self, line: str) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(BrokenPipeError):
            os.write(self._fd, line.encode())

    def watch(self, pid: int, start_ticks: int | None) -> None:
        """The server to kill if the launch dies (nothing when it is already gone)."""
        if start_ticks is not None:
            self._send(f"watch {pid} {start_ticks}\n")

    def release(self) -> None:
        """The launch is done with the server (healthy and recorded, or stopped by itself)."""
        if self._fd is None:
            return
        self._send("release\n")
        os.close(self._fd)
        self._fd = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5.0)


def _kill_group(pid: int, start: int) -> None:
    """SIGKILL the group ``pid`` leads, if the pid still has ``start`` (never a reused pid)."""
    if not procfs.is_running(pid, start) or procfs.process_group(pid) != pid:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while procfs.is_running(pid, start) and time.monotonic() < deadline:
        time.sleep(0.05)


def _forget_record(record: Path, pid: int) -> None:
    """Remove the state record if it is the killed server's (a small JSON object naming it)."""
    try:
        with record.open("rb") as handle:
            data = json.loads(handle.read(_RECORD_LIMIT))
    except (OSError, ValueError, RecursionError):
        return
    if isinstance(data, dict) and data.get("pid") == pid:
        record.unlink(missing_ok=True)


def serve(read_fd: int, record: Path) -> int:
    """The watchdog's side: read until the pipe closes; act unless released."""
    server: tuple[int, int] | None = None
    released = False
    with os.fdopen(read_fd, "rb") as pipe:
        for raw in pipe:
            words = raw.decode(errors="replace").split()
            if words[:1] == ["watch"] and len(words) == 3 and all(w.isdigit() for w in words[1:]):
                server = (int(words[1]), int(words[2]))
            elif words == ["release"]:
                released = True
    if server is not None and not released:
        _kill_group(*server)
        _forget_record(record, server[0])
    return 0


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe ends the watch
    return serve(int(argv[0]), Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
