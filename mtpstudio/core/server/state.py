"""Running servers recorded in the XDG state dir, so a later CLI call can find and stop them."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from mtpstudio.core import paths
from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.server.process import pid_alive

STATE_SCHEMA = 1


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


@dataclass(frozen=True)
class ServerState:
    """What a later call needs: which process, where it listens, its log and plan.

    ``start_ticks`` (the process start time from /proc) tells our server from a program that got
    the same pid after it died.
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
        if pid_alive(self.pid, self.start_ticks):
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


def _from_json(data: Any) -> ServerState | None:
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return None
    try:
        return ServerState(**data)
    except TypeError:
        return None


def load_states() -> list[ServerState]:
    """Every recorded server, by port; unreadable files are skipped (and left alone)."""
    out: list[ServerState] = []
    try:
        files = sorted(servers_dir().glob("*.json"))
    except OSError:
        return out
    for file in files:
        try:
            state = _from_json(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if state is not None and file.name == f"{state.port}.json":
            out.append(state)
    return out


def remove_state(state: ServerState) -> None:
    """Forget a server (its log stays); also removes the plan copy kept in the state dir."""
    state.path.unlink(missing_ok=True)
    plan = Path(state.plan_path)
    if plan.parent == servers_dir():
        plan.unlink(missing_ok=True)


def prune_stale() -> list[ServerState]:
    """Remove records whose process is gone or whose pid now belongs to another program."""
    stale = [s for s in load_states() if s.liveness() is not Liveness.RUNNING]
    for s in stale:
        remove_state(s)
    return stale
