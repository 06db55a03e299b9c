"""The Launch & benchmark page against the real upstream build and a tiny model (offscreen)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QProcess
from pytestqt.qtbot import QtBot
from support.plans import cpu_plan
from support.servers import free_port

from mtpstudio.core.bench.history import BenchHistory, export_entry
from mtpstudio.core.detect.engines import detect_engines
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.server.process import stop_pid
from mtpstudio.core.server.state import Liveness, load_states
from mtpstudio.ui.pages.launch import LaunchPage, ServerExitChoice
from mtpstudio.ui.server_process import ServerPhase
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import WizardFactory, go_to, no_gpu_report

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_server_left")]
CATEGORIES = ("code_python", "translation")
SERVER_WAIT_MS = 120_000


@pytest.fixture
def upstream_plan(engine: Callable[[str], Path], tiny_model: Callable[..., Path]) -> Plan:
    return cpu_plan(engine("upstream"), tiny_model("dense"))


def launch_page(make_wizard: WizardFactory, plan: Plan) -> tuple[MtpWizard, LaunchPage]:
    wizard = make_wizard(plan, remember=False)
    go_to(wizard, PageId.LAUNCH)
    page = wizard.launch_page
    page.ask_server_exit = lambda: ServerExitChoice.STOP  # type: ignore[method-assign]
    return wizard, page


def start(qtbot: QtBot, page: LaunchPage) -> None:
    assert page.start_button.isEnabled()
    with qtbot.waitSignal(page.server.became_healthy, timeout=SERVER_WAIT_MS):
        page.start_button.click()
    assert page.server.phase is ServerPhase.HEALTHY
    assert page.bench_tab.bench_button.isEnabled() and page.stop_button.isEnabled()


def bench(qtbot: QtBot, page: LaunchPage, n_predict: int = 8, repeats: int = 1) -> None:
    page.bench_tab.n_predict.setValue(n_predict)
    page.bench_tab.repeats.setValue(repeats)
    assert page.run_benchmark(CATEGORIES)
    assert page.bench_tab.cancel_button.isEnabled() and not page.bench_tab.bench_button.isEnabled()


def table(page: LaunchPage) -> list[list[str]]:
    t = page.bench_tab.results
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


def test_launch_benchmark_export_and_stop_on_close(
    qtbot: QtBot, make_wizard: WizardFactory, upstream_plan: Plan, tmp_path: Path
) -> None:
    wizard, page = launch_page(make_wizard, upstream_plan)
    start(qtbot, page)
    # the live log and its search
    qtbot.waitUntil(lambda: "listening" in page.log_tab.log_view.toPlainText(), timeout=10_000)
    page.log_tab.search.setText("listening")
    assert page.log_tab.search_label.text().endswith(("matching line", "matching lines"))
    assert page.log_tab.log_view.textCursor().selectedText().lower() == "listening"
    # predicted vs actual memory, from core's reconciliation
    qtbot.waitUntil(lambda: page.memory_tab.memory.rowCount() > 1, timeout=60_000)
    memory = page.memory_tab.memory
    segments = [memory.item(r, 0).text() for r in range(memory.rowCount())]
    assert "weights" in segments and segments[-1] == "total"
    assert page.server.result is not None and page.server.result.reconciliation is not None

    bench(qtbot, page)
    qtbot.waitUntil(lambda: page.bench_outcome is not None, timeout=SERVER_WAIT_MS)
    assert page.bench_outcome is not None
    report = page.bench_outcome.report
    assert report.error is None and [c.category for c in report.categories] == list(CATEGORIES)
    rows = table(page)
    assert [r[0] for r in rows] == list(CATEGORIES)
    assert all(int(r[1]) == 8 and float(r[2]) > 0 for r in rows)
    assert page.bench_tab.progress.value() == page.bench_tab.progress.maximum() == len(CATEGORIES)
    speeds = tuple(c.decode_tps for c in report.categories)
    assert page.bench_tab.tok_chart.series[0].values == pytest.approx(speeds, abs=0.01)
    # stored in the history; the export writes what `mtpstudio bench show` prints
    run_id = page.bench_outcome.run_id
    assert run_id is not None and run_id in [e.id for e in page.history_runs]
    entry = BenchHistory().get(run_id)
    for fmt in ("md", "csv", "json"):
        out = tmp_path / f"results.{fmt}"
        assert page.export_results(fmt, out)
        assert out.read_text() == export_entry(entry, fmt)

    pid = page.server.pid
    wizard.done(0)  # closing asks (STOP here) and stops the server
    assert page.server.phase is ServerPhase.STOPPED
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert [s for s in load_states() if s.pid == pid] == []


def test_killing_the_server_mid_benchmark_keeps_results_and_shows_the_diagnosis(
    qtbot: QtBot, make_wizard: WizardFactory, upstream_plan: Plan
) -> None:
    _, page = launch_page(make_wizard, upstream_plan)
    start(qtbot, page)
    page.bench_tab.n_predict.setValue(48)
    page.bench_tab.repeats.setValue(4)
    assert page.run_benchmark()  # all nine categories: long enough to be killed midway
    qtbot.waitUntil(lambda: page.bench_tab.progress.value() >= 5, timeout=SERVER_WAIT_MS)
    os.kill(page.server.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: page.bench_outcome is not None, timeout=SERVER_WAIT_MS)
    assert page.bench_outcome is not None
    report = page.bench_outcome.report
    assert report.error is not None and 1 <= len(report.categories) < 9
    assert len(table(page)) == len(report.categories)  # what finished is kept and shown
    assert page.bench_outcome.run_id is not None  # and stored
    assert page.server.phase is ServerPhase.FAILED
    assert "killed" in page.problem.sentence and "SIGKILL" in page.problem.sentence
    assert "Last log lines" in page.problem.details.toPlainText()
    assert page.fix_buttons, "a killed server gets memory fixes"
    before = page.state.plan
    diagnosis = page.last_diagnosis
    assert diagnosis is not None and len(diagnosis.fixes) == len(page.fix_buttons)
    page.fix_buttons[0].click()
    assert page.state.plan == diagnosis.fixes[0].apply(before) != before
    assert "Start the server again" in page.note.text()
    assert page.start_button.isEnabled()


def test_cancel_keeps_finished_categories(
    qtbot: QtBot, make_wizard: WizardFactory, upstream_plan: Plan
) -> None:
    _, page = launch_page(make_wizard, upstream_plan)
    start(qtbot, page)
    page.bench_tab.n_predict.setValue(192)
    page.bench_tab.repeats.setValue(4)

    def cancel_after_the_first_category(done: int) -> None:
        # clicked as the progress arrives, not at the next poll: on an idle machine the tiny
        # model runs the 36 requests in well under a second, faster than a poll could cancel
        if done >= 5 and page.bench_tab.cancel_button.isEnabled():
            page.bench_tab.cancel_button.click()

    page.bench_tab.progress.valueChanged.connect(cancel_after_the_first_category)
    assert page.run_benchmark()
    qtbot.waitUntil(lambda: page.bench_outcome is not None, timeout=SERVER_WAIT_MS)
    assert page.bench_outcome is not None and page.bench_outcome.report.cancelled
    assert 1 <= len(table(page)) < 9
    assert "cancelled" in page.bench_tab.summary.text()
    assert page.server.phase is ServerPhase.HEALTHY and page.bench_tab.bench_button.isEnabled()


def test_leave_running_on_close_hands_the_server_to_the_cli(
    qtbot: QtBot, make_wizard: WizardFactory, upstream_plan: Plan
) -> None:
    wizard, page = launch_page(make_wizard, upstream_plan)
    start(qtbot, page)
    pid = page.server.pid
    page.ask_server_exit = lambda: ServerExitChoice.LEAVE  # type: ignore[method-assign]
    wizard.done(0)
    processes = page.server.findChildren(QProcess)
    assert processes
    for proc in processes:  # ~QProcess kills what it still counts as running
        shiboken6.delete(proc)
    qtbot.wait(300)
    states = [s for s in load_states() if s.pid == pid]
    assert len(states) == 1 and states[0].liveness() is Liveness.RUNNING  # `server status`
    outcome = stop_pid(pid, states[0].start_ticks, grace=5.0)  # what `server stop` does
    assert outcome.stopped


def test_cancel_on_close_keeps_the_window_and_the_server(
    qtbot: QtBot, make_wizard: WizardFactory, upstream_plan: Plan
) -> None:
    wizard, page = launch_page(make_wizard, upstream_plan)
    wizard.show()
    start(qtbot, page)
    page.ask_server_exit = lambda: ServerExitChoice.CANCEL  # type: ignore[method-assign]
    wizard.done(0)
    assert wizard.isVisible() and page.server.phase is ServerPhase.HEALTHY
    page.ask_server_exit = lambda: ServerExitChoice.STOP  # type: ignore[method-assign]
    wizard.done(0)
    assert page.server.phase is ServerPhase.STOPPED


def test_walk_through_from_hardware_to_a_benchmark_result(
    qtbot: QtBot,
    make_wizard: WizardFactory,
    engine: Callable[[str], Path],
    tiny_model: Callable[..., Path],
) -> None:
    """Drive every page as a user would: CPU, open the GGUF, pick the build, …, benchmark."""
    binary = engine("upstream")
    found = detect_engines(os.environ, SubprocessRunner(), [binary], opt_root=None)
    engines = [e for e in found.engines if Path(e.path).resolve() == binary.resolve()]
    report = no_gpu_report().model_copy(update={"engines": engines})
    wizard = make_wizard(Plan(), report=report, remember=False)
    wizard.show()
    assert wizard.currentId() == PageId.HARDWARE
    wizard.hardware_page.radio_cpu.setChecked(True)
    assert wizard.plan.device == "cpu"
    wizard.next()
    model = tiny_model("dense")
    wizard.model_page.open_path(model)
    assert wizard.tasks.wait_idle(30)
    assert wizard.plan.model.path == model
    wizard.next()
    engine_page = wizard.engine_page
    row = next(
        i for i, c in enumerate(engine_page.choices) if c.probed and Path(c.binary) == binary
    )
    engine_page.build_list.setCurrentRow(row)
    assert wizard.state.build().probed and wizard.state.build().build.binary == binary
    engine_page.apply(
        {"runtime.ctx": 512, "runtime.threads": 2, "mtp.enabled": False, "server.port": free_port()}
    )
    for page_id in (PageId.BUDGET, PageId.DESKTOP, PageId.SERVICE, PageId.LAUNCH):
        wizard.next()
        assert wizard.tasks.wait_idle(30)
        assert wizard.currentId() == page_id
    page = wizard.launch_page
    page.ask_server_exit = lambda: ServerExitChoice.STOP  # type: ignore[method-assign]
    start(qtbot, page)
    assert page.server.prepared is not None and page.server.prepared.build.binary == binary
    bench(qtbot, page)
    qtbot.waitUntil(lambda: page.bench_outcome is not None, timeout=SERVER_WAIT_MS)
    assert page.bench_outcome is not None and page.bench_outcome.report.tok_s
    assert [r[0] for r in table(page)] == list(CATEGORIES)
    assert "tok/s" in page.bench_tab.summary.text()
    wizard.done(0)
    assert page.server.phase is ServerPhase.STOPPED
