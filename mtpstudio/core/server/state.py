"""Running servers recorded in the XDG state dir, so a later CLI call can find and stop them.

A record is written as soon as the server is spawned (``healthy_after_s`` is None while it
loads) and read back as untrusted input: a record that is not exactly what mtpstudio writes (a
pid that is not a number, no start time to tell the server from a later program with the same
pid) is named in one logged sentence and never acted on; one whose pid runs another program
than the recorded binary is not the server's (``Liveness.OTHER``) and is removed unsignalled.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from mtpstudio.core import paths
from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.schema import is_host
from mtpstudio.core.server import procfs
from mtpstudio.core.server.process import pid_alive
from mtpstudio.core.state_files import SchemaError, StateFileError, read_json

log = logging.getLogger(__name__)

STATE_SCHEMA = 1
RECORD_MAX_BYTES = 256 * 1024
PID_MAX = 1 << 22  # the kernel's pid_max ceiling


def servers_dir() -> Path:
    """``$XDG_STATE_HOME/mtpstudio/servers``: one JSON file per running server (by port)."""
    return paths.state_dir() / "servers"


def logs_dir() -> Path:
    """``$XDG_STATE_HOME/mtpstudio/logs``: server logs (kept after the server stops)."""
    return paths.state_dir() / "logs"


def run_dir() -> Path:
    """The servers' working folder (ik writes its llama.log there)."""
    return paths.state_dir() / "run"


class Liveness(StrEnum):
    """What the recorded pid is now."""

    RUNNING = "running"
    GONE = "gone"
    REUSED = "pid reused by another program"
    OTHER = "another program than the recorded engine"


@dataclass(frozen=True)
class ServerState:
    """What a later call needs: which process, where it listens, its log and plan.

    ``start_ticks`` (the process start time from /proc) tells our server from a program that got
    the same pid after it died. ``healthy_after_s`` is None while the server is still loading.
    """

    pid: int
    start_ticks: int
    host: str
    port: int
    log_path: str
    plan_path: str
    flavour: str
    binary: str
    argv: list[str]
    started_at: float = field(default_factory=time.time)
    healthy_after_s: float | None = None
    schema: int = STATE_SCHEMA

    @property
    def path(self) -> Path:
        return state_path(self.port)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def liveness(self) -> Liveness:
        """RUNNING only when the pid has the recorded start time and runs the recorded binary
        (``procfs.runs_binary``)."""
        if pid_alive(self.pid, self.start_ticks):
            if not procfs.runs_binary(self.pid, self.binary):
                return Liveness.OTHER
            return Liveness.RUNNING
        if pid_alive(self.pid):
            return Liveness.REUSED
        return Liveness.GONE


def state_path(port: int) -> Path:
    return servers_dir() / f"{port}.json"


def save_state(state: ServerState) -> Path:
    """Write the state atomically; returns its file."""
    path = state_path(state.port)
    write_text_atomic(path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _check(data: Any) -> ServerState:
    """The record as mtpstudio writes it, or SchemaError saying what is wrong."""
    names = {f.name for f in fields(ServerState)}
    if not isinstance(data, dict) or set(data) != names or data["schema"] != STATE_SCHEMA:
        raise SchemaError("is not a server record of this mtpstudio")
    if not _is_int(data["pid"], 2, PID_MAX):
        raise SchemaError("has no valid pid")
    if not _is_int(data["start_ticks"], 0, 1 << 62):
        raise SchemaError("has no start time to tell the server from a later program")
    if not _is_int(data["port"], 1, 65535) or not (
        isinstance(data["host"], str) and is_host(data["host"])
    ):
        raise SchemaError("has no valid address")
    texts = ("log_path", "plan_path", "binary")
    if not all(isinstance(data[k], str) and "\n" not in data[k] for k in texts):
        raise SchemaError("has no valid paths")
    if data["flavour"] not in {f.value for f in EngineFlavour}:
        raise SchemaError("names no engine mtpstudio knows")
    argv = data["argv"]
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise SchemaError("has no valid command line")
    healthy = data["healthy_after_s"]
    if not _is_number(data["started_at"]) or not (healthy is None or _is_number(healthy)):
        raise SchemaError("has no valid times")
    return ServerState(**data)


def load_states() -> list[ServerState]:
    """Every recorded server, by port. A damaged record is named in one logged sentence,
    left in place and never acted on."""
    out: list[ServerState] = []
    try:
        files = sorted(f for f in servers_dir().glob("*.json") if f.stem.isdigit())
    except OSError:
        return out
    for file in files:
        try:
            state = _check(read_json(file, "server record", max_bytes=RECORD_MAX_BYTES))
        except StateFileError as exc:
            log.warning("mtpstudio: %s; it is ignored.", exc)
            continue
        except SchemaError as exc:
            log.warning("mtpstudio: the server record %s %s; it is ignored.", file, exc)
            continue
        if file.name == f"{state.port}.json":
            out.append(state)
    return out


def remove_state(state: ServerState) -> None:
    """Forget a server (its log stays); also removes the plan copy kept in the state dir."""
    state.path.unlink(missing_ok=True)
    plan = Path(state.plan_path)
    if plan.parent == servers_dir():
        plan.unlink(missing_ok=True)


def prune_stale(states: list[ServerState] | None = None) -> list[ServerState]:
    """Remove records whose process is gone or whose pid now belongs to another program
    (of ``states``, else of every record)."""
    stale = [s for s in (load_states() if states is None else states)
             if s.liveness() is not Liveness.RUNNING]  # fmt: skip
    for s in stale:
        remove_state(s)
    return stale
