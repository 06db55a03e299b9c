"""The GUI's QProcess server against the real upstream build on a tiny model."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from support.plans import cpu_plan

from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.diagnosis import CauseKind
from mtpstudio.core.server.health import probe_health
from mtpstudio.core.server.state import Liveness, load_states, prune_stale
from mtpstudio.ui.server_process import GuiServer, ServerPhase
from mtpstudio.ui.tasks import TaskManager

pytestmark = [pytest.mark.engine]


@pytest.fixture
def gui_server(qtbot: QtBot) -> Iterator[GuiServer]:
    tasks = TaskManager()
    server = GuiServer(tasks, predict=False)
    yield server
    server.stop_now(grace=3.0)
    tasks.shutdown()
    prune_stale()


@pytest.fixture
def upstream_plan(engine: Callable[[str], Path], tiny_model: Callable[..., Path]) -> Plan:
    return cpu_plan(engine("upstream"), tiny_model("dense"))


def test_start_healthy_recorded_then_stopped(
    qtbot: QtBot, gui_server: GuiServer, upstream_plan: Plan
) -> None:
    lines: list[str] = []
    gui_server.lines_logged.connect(lines.extend)
    with qtbot.waitSignal(gui_server.became_healthy, timeout=120_000) as healthy:
        gui_server.start(upstream_plan, timeout=100)
    result = healthy.args[0]
    assert result.ok and gui_server.phase is ServerPhase.HEALTHY
    port = upstream_plan.server.port
    assert probe_health("127.0.0.1", port).status == 200
    states = [s for s in load_states() if s.port == port]
    assert [s.pid for s in states] == [gui_server.pid]  # what `mtpstudio server status` reads
    assert states[0].liveness() is Liveness.RUNNING
    assert states[0].argv == list(result.prepared.spec.argv)
    qtbot.waitUntil(lambda: any("listening" in line for line in lines), timeout=10_000)
    pid = gui_server.pid
    with qtbot.waitSignal(gui_server.stopped, timeout=20_000) as stopped:
        gui_server.stop()
    assert stopped.args[0].stopped and not stopped.args[0].killed
    assert gui_server.phase is ServerPhase.STOPPED
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert not [s for s in load_states() if s.port == port]


def test_killed_server_is_diagnosed(
    qtbot: QtBot, gui_server: GuiServer, upstream_plan: Plan
) -> None:
    with qtbot.waitSignal(gui_server.became_healthy, timeout=120_000):
        gui_server.start(upstream_plan, timeout=100)
    with qtbot.waitSignal(gui_server.died, timeout=20_000) as died:
        os.kill(gui_server.pid, signal.SIGKILL)
    diagnosis = died.args[0].diagnosis
    assert diagnosis is not None and diagnosis.kind is CauseKind.KILLED
    assert gui_server.phase is ServerPhase.FAILED


def test_missing_model_refused_before_start(
    qtbot: QtBot, gui_server: GuiServer, upstream_plan: Plan, tmp_path: Path
) -> None:
    plan = plan_with(upstream_plan, {"model.path": str(tmp_path / "no such model.gguf")})
    with qtbot.waitSignal(gui_server.start_refused, timeout=30_000) as refused:
        gui_server.start(plan)
    sentence = refused.args[0]
    assert "no such model.gguf" in sentence and "\n" not in sentence
    assert gui_server.process is None and gui_server.phase is ServerPhase.FAILED


def test_the_server_dies_with_the_gui_object(
    qtbot: QtBot, gui_server: GuiServer, upstream_plan: Plan
) -> None:
    """Without "leave it running", destroying the GUI's process object ends the server."""
    import shiboken6

    with qtbot.waitSignal(gui_server.became_healthy, timeout=120_000):
        gui_server.start(upstream_plan, timeout=100)
    pid = gui_server.pid
    assert gui_server.process is not None
    gui_server.process.finished.disconnect()
    shiboken6.delete(gui_server.process)  # what the window's teardown does
    gui_server.process = None
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
