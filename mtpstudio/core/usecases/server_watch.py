"""A server watched while it loads and runs: its recorded state, health, load log, the
diagnosis of a failed start, the process and its log, and the watchdog that stops a loading
server if the window dies.

`mtpstudio launch`/`server` and the GUI's server process enter the server rooms here; starting a
plan's server is :mod:`usecases.launch`, the systemd unit :mod:`usecases.server_units`.
"""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server import procfs
from mtpstudio.core.server.diagnosis import Diagnosis, diagnose
from mtpstudio.core.server.health import (
    DEFAULT_STARTUP_TIMEOUT_S,
    HealthAnswer,
    HealthResult,
    HealthState,
    connect_host,
    probe_health,
    wait_healthy,
)
from mtpstudio.core.server.load_log import LoadReport, parse_load_log
from mtpstudio.core.server.process import STOP_GRACE_S, LogFollower, ProcessOutcome, stop_pid
from mtpstudio.core.server.state import (
    ServerState,
    load_states,
    logs_dir,
    prune_stale,
    remove_state,
    state_path,
)
from mtpstudio.core.server.watchdog import Watchdog

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT_S",
    "STOP_GRACE_S",
    "Diagnosis",
    "HealthAnswer",
    "HealthResult",
    "HealthState",
    "LoadReport",
    "LogFollower",
    "ProcessOutcome",
    "ServerState",
    "Watchdog",
    "connect_host",
    "diagnose",
    "diagnose_ended",
    "load_states",
    "logs_dir",
    "parse_load_log",
    "probe_health",
    "procfs",
    "prune_stale",
    "remove_state",
    "servers_here",
    "state_path",
    "stop_pid",
    "wait_healthy",
]


def servers_here(port: int | None = None) -> tuple[list[ServerState], list[ServerState]]:
    """The servers mtpstudio started that still run, and the stale records just removed (their
    process is gone or the pid is another program's); of ``port`` only when given. The records
    are read once, so a damaged one is named once."""
    states = load_states()
    stale = prune_stale(states)
    live = [s for s in states if s not in stale and (port is None or s.port == port)]
    return live, [s for s in stale if port is None or s.port == port]


def diagnose_ended(
    log_path: Path, plan: Plan, outcome: ProcessOutcome, model: ModelInfo | None = None
) -> Diagnosis:
    """Why a server that had started ended by itself: its load log (read as it is, damaged
    bytes replaced) and its exit, explained for the plan it ran."""
    text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    return diagnose(parse_load_log(text), plan, outcome, model=model)
