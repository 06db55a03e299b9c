"""Fixtures for launching real servers through mtpstudio's own launcher."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.plans import cpu_plan

from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.process import ServerProcess
from mtpstudio.core.server.state import load_states, prune_stale, servers_dir


@pytest.fixture(autouse=True)
def _no_server_outlives_its_test() -> Iterator[None]:
    """A test that failed half-way must not leave its server to the next tests (they count
    processes and state records): kill what is still recorded, after the test's own checks."""
    yield
    for state in load_states():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(state.pid, signal.SIGKILL)  # servers run in their own session
    prune_stale()


@pytest.fixture
def launched() -> Iterator[list[ServerProcess]]:
    """Processes a test launched; every one is stopped and reaped afterwards."""
    procs: list[ServerProcess] = []
    yield procs
    for proc in procs:
        proc.stop(grace=3.0)
    prune_stale()  # their state records, now stale


@pytest.fixture
def plan_for(engine: Callable[[str], Path], tiny_model: Callable[..., Path]) -> Callable[..., Plan]:
    """``plan_for(build, kind="dense", model_params={}, **plan_changes)``: a CPU plan for one
    build of the test bench ("upstream", "upstream-b11549", "ik"), of its flavour."""

    def make(name: str, kind: str = "dense", model_params: Any = None, **changes: Any) -> Plan:
        model = tiny_model(kind, **(model_params or {}))
        flavour = "ik" if name == "ik" else "upstream"
        return cpu_plan(engine(name), model, flavour, **changes)

    return make


def processes_with(text: str) -> list[int]:
    """Pids (not zombies) whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if text in cmd and stat and stat[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def state_files() -> list[Path]:
    return sorted(servers_dir().glob("*.json")) if servers_dir().exists() else []
