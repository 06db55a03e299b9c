"""Process facts from /proc (Linux): alive or zombie, start time, program, process group, who
listens on a TCP port."""

from __future__ import annotations

import os
import stat
from pathlib import Path

PROC = Path("/proc")
_TCP_LISTEN = "0A"


def _stat_fields(pid: int, proc_root: Path = PROC) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 onwards), or None."""
    try:
        text = (proc_root / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    _, sep, rest = text.rpartition(")")
    return rest.split() if sep else None


def start_ticks(pid: int, proc_root: Path = PROC) -> int | None:
    """When ``pid`` started, in clock ticks since boot (stat field 22); None if gone."""
    fields = _stat_fields(pid, proc_root)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])


def process_group(pid: int, proc_root: Path = PROC) -> int | None:
    """The process group ``pid`` is in (stat field 5); None if gone."""
    fields = _stat_fields(pid, proc_root)
    return int(fields[2]) if fields is not None and len(fields) > 2 else None


def exe_path(pid: int, proc_root: Path = PROC) -> str | None:
    """The program ``pid`` runs (``/proc/PID/exe``), even after the file was replaced."""
    try:
        target = os.readlink(proc_root / str(pid) / "exe")
    except OSError:
        return None
    return target.removesuffix(" (deleted)")


def _interpreter(path: str) -> str | None:
    """The program a ``#!`` script names on its first line (``env NAME``: NAME), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.read(fd, 256) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return words[1]
    return words[0]


def runs_binary(pid: int, binary: str, proc_root: Path = PROC) -> bool:
    """Whether ``pid`` runs the program ``binary`` (``/proc/PID/exe`` is that file), or - for a
    ``#!`` script - the interpreter running it. False when the pid cannot be looked at."""
    exe = exe_path(pid, proc_root)
    if exe is None:
        return False
    if exe == os.path.realpath(binary):
        return True
    interpreter = _interpreter(binary)
    if interpreter is None:
        return False
    if "/" not in interpreter:  # #!/usr/bin/env NAME
        return os.path.basename(exe) == interpreter
    return exe == os.path.realpath(interpreter)


def leads_group(pid: int, proc_root: Path = PROC) -> bool:
    """Whether ``pid`` is the leader of its own process group (pgid == pid)."""
    return process_group(pid, proc_root) == pid


def is_running(pid: int, start: int | None = None, proc_root: Path = PROC) -> bool:
    """``pid`` exists, is not a zombie and (when ``start`` is given) started then.

    A different start time means the pid now belongs to another program.
    """
    if pid <= 0:
        return False
    fields = _stat_fields(pid, proc_root)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start is None or start_ticks(pid, proc_root) == start


def process_name(pid: int, proc_root: Path = PROC) -> str | None:
    try:
        return (proc_root / str(pid) / "comm").read_text(encoding="utf-8").strip()
    except OSError:
        return None


def listening_inodes(port: int, proc_root: Path = PROC) -> set[str]:
    """Socket inodes in LISTEN state on ``port`` (IPv4 and IPv6)."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_root / "net" / name).read_text(encoding="utf-8").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != _TCP_LISTEN:
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes


def _socket_inodes(pid: int, proc_root: Path) -> set[str]:
    fd_dir = proc_root / str(pid) / "fd"
    out: set[str] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for fd in names:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def listens_on(pid: int, port: int, proc_root: Path = PROC) -> bool:
    """Whether process ``pid`` holds a listening socket on ``port``."""
    wanted = listening_inodes(port, proc_root)
    return bool(wanted) and bool(wanted & _socket_inodes(pid, proc_root))


def port_owner(port: int, proc_root: Path = PROC) -> int | None:
    """The pid listening on ``port``, when this user may see it."""
    wanted = listening_inodes(port, proc_root)
    if not wanted:
        return None
    for entry in proc_root.iterdir():
        if entry.name.isdigit() and wanted & _socket_inodes(int(entry.name), proc_root):
            return int(entry.name)
    return None
