"""Launch & benchmark page: start the server, watch it load, measure it, keep and compare runs.

The page holds the server row, the problem and fix buttons, and the tabs, each its own widget:
Benchmark (``launch_bench``), Server log (``launch_log``), Memory (``launch_memory``), Compare &
history (``launch_history``) and Tune (``tune_panel``). The server is a ``GuiServer``
(ui/server_process.py: QProcess over the launch use case). The benchmark is the benchmark use
case run through the task manager, with its own cancel token (a cancelled or failed run keeps
its finished categories) and progress relayed to the GUI thread by a queued signal. Every run
goes to the benchmark history; the charts and the export read it. Diagnosis fixes and doctor
remedies are buttons that change the Plan (``PlanPage.apply``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.bench.doctor import Finding
from mtpstudio.core.bench.history import BenchHistory, HistoryEntry
from mtpstudio.core.bench.results import BenchReport, BenchSettings
from mtpstudio.core.bench.target import BenchProgress
from mtpstudio.core.bench.target import CancelToken as BenchCancelToken
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.diagnosis import Diagnosis
from mtpstudio.core.server.health import HealthAnswer
from mtpstudio.core.server.launch import LaunchResult
from mtpstudio.core.server.process import ProcessOutcome
from mtpstudio.core.server.state import ServerState
from mtpstudio.core.usecases.bench import (
    export_entry,
    prompts_for,
    run_benchmark,
    runs_of_plans,
    vram_sampler,
)
from mtpstudio.core.usecases.files import write_text_atomic
from mtpstudio.core.usecases.launch import (
    attached_target,
    bench_target,
    card_not_here,
    refuse_unresolved,
    servers_elsewhere,
    stop_elsewhere,
)
from mtpstudio.core.usecases.prestart import service_load_lines
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.pages.launch_bench import EXPORT_FORMATS, BenchTab
from mtpstudio.ui.pages.launch_history import CompareTab
from mtpstudio.ui.pages.launch_log import ServerLogTab
from mtpstudio.ui.pages.launch_memory import MemoryTab
from mtpstudio.ui.pages.tune_panel import TunePanel
from mtpstudio.ui.server_process import GuiServer, ServerPhase
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.tasks import CancelToken, TaskManager
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.engine_picker import EnginePicker
from mtpstudio.ui.widgets.error_details import DetailsNotice

BENCH_KEY = "bench-run"
HISTORY_KEY = "bench-history"
ELSEWHERE_KEY = "servers-elsewhere"
UNIT_LOAD_KEY = "unit-load"
HISTORY_KINDS = ("bench", "ab-a", "ab-b")


class ServerExitChoice(StrEnum):
    """What to do with a running server when the window closes."""

    STOP = "stop"
    LEAVE = "leave"
    CANCEL = "cancel"


@dataclass(frozen=True)
class BenchOutcome:
    """A finished (or stopped) run: the report, the doctor's findings, its history id."""

    report: BenchReport
    findings: tuple[Finding, ...]
    run_id: int | None
    history: tuple[HistoryEntry, ...]
    history_error: str | None = None


class _ProgressRelay(QObject):
    """Emitted from the benchmark's pool thread; connected slots run on the GUI thread."""

    progressed = Signal(object)  # BenchProgress


def _history_runs(history: BenchHistory) -> tuple[HistoryEntry, ...]:
    return tuple(e for e in history.entries() if e.kind in HISTORY_KINDS)


class LaunchPage(PlanPage):
    """Launch the Plan's server, follow its log and memory, and benchmark it.

    Tests replace ``ask_server_exit`` and ``ask_export_path``; ``history`` may be given one
    at another path. ``add_tool_tab`` is where the tuner plugs in its live table.
    """

    slug = "launch"

    def __init__(
        self,
        state: WizardState,
        tasks: TaskManager,
        parent: QWidget | None = None,
        *,
        history: BenchHistory | None = None,
    ) -> None:
        super().__init__(state, parent)
        self.setTitle("Launch & benchmark")
        self.setSubTitle(
            "Start the server from the plan, see what it really allocated, and measure its "
            "tokens per second. Fixes and findings change the plan with one click."
        )
        self.tasks = tasks
        self.history = history or BenchHistory()
        self.server = GuiServer(tasks, parent=self)
        self.bench_cancel: BenchCancelToken | None = None
        self.bench_outcome: BenchOutcome | None = None
        self.history_runs: tuple[HistoryEntry, ...] = ()
        self.last_diagnosis: Diagnosis | None = None
        self.plan_note: str | None = None
        self._started_from: Plan | None = None
        self.shown_run_id: int | None = None  # the stored run in the table (export writes it)
        self._relay = _ProgressRelay(self)
        self._relay.progressed.connect(self._on_bench_progressed)

        # -- the server row
        self.start_button = QPushButton("Start server", self)
        self.stop_button = QPushButton("Stop server", self)
        self.phase_label = QLabel(self)
        self.health_label = QLabel(self)
        self.health_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        server_row = QHBoxLayout()
        server_row.addWidget(self.start_button)
        server_row.addWidget(self.stop_button)
        server_row.addWidget(self.phase_label)
        server_row.addWidget(self.health_label, 1)
        self.problem = DetailsNotice(self)
        self.picker = EnginePicker(state, self)  # shown while the plan has no probed build
        # a server mtpstudio started elsewhere (the CLI, another window): attach or stop it
        self.elsewhere: ServerState | None = None
        self.attached: ServerState | None = None
        self.elsewhere_label = QLabel(self)
        self.elsewhere_label.setWordWrap(True)
        self.attach_button = QPushButton("Attach", self)
        self.attach_button.setToolTip(
            "Benchmark this server from here; it keeps running when the window closes."
        )
        self.stop_elsewhere_button = QPushButton("Stop it", self)
        self.elsewhere_row = QWidget(self)
        row = QHBoxLayout(self.elsewhere_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.elsewhere_label, 1)
        row.addWidget(self.attach_button)
        row.addWidget(self.stop_elsewhere_button)
        self.elsewhere_row.setVisible(False)
        self.fix_row = QHBoxLayout()
        self.fix_buttons: list[QPushButton] = []
        self.note = Notice(self)

        # -- tabs
        self.tabs = QTabWidget(self)
        self.bench_tab = BenchTab(self)
        self.log_tab = ServerLogTab(self)
        self.memory_tab = MemoryTab(self)
        self.compare_tab = CompareTab(self)
        self.tabs.addTab(self.bench_tab, "Benchmark")
        self.tabs.addTab(self.log_tab, "Server log")
        self.tabs.addTab(self.memory_tab, "Memory")
        self.tabs.addTab(self.compare_tab, "Compare && history")
        self.tune = TunePanel(state, tasks, self, history=self.history)
        self.add_tool_tab(self.tune, "Tune")

        body = QVBoxLayout(self)
        body.addLayout(server_row)
        body.addWidget(self.problem)
        body.addWidget(self.elsewhere_row)
        body.addWidget(self.picker)
        body.addLayout(self.fix_row)
        body.addWidget(self.note)
        body.addWidget(self.tabs, 1)

        self.bench_tab.bench_button.clicked.connect(self._on_bench_clicked)
        self.bench_tab.cancel_button.clicked.connect(self._on_cancel_clicked)
        self.bench_tab.export_button.clicked.connect(self._on_export_clicked)
        self.bench_tab.remedy_chosen.connect(self.apply_fix)
        self.start_button.clicked.connect(self._on_start_clicked)
        self.picker.picked.connect(self._on_engine_picked)
        self.attach_button.clicked.connect(self.attach_elsewhere)
        self.stop_elsewhere_button.clicked.connect(self.stop_server_elsewhere)
        self.picker.failed.connect(lambda text: self.problem.show_problem(text))
        self.stop_button.clicked.connect(self._on_stop_clicked)
        self.server.phase_changed.connect(self._on_phase_changed)
        self.server.lines_logged.connect(self._on_lines_logged)
        self.server.start_refused.connect(self._on_start_refused)
        self.server.became_healthy.connect(self._on_became_healthy)
        self.server.measured.connect(self._on_measured)
        self.server.launch_failed.connect(self._on_server_failed)
        self.server.died.connect(self._on_server_failed)
        self.server.stopped.connect(self._on_server_stopped)
        self.server.health_polled.connect(self._on_health_polled)
        self._show_phase()

    def add_tool_tab(self, widget: QWidget, title: str) -> None:
        """The hook for tools that drive the server from this page (the tuner's live table
        with its "use the best" button goes here when the tuner core lands)."""
        self.tabs.addTab(widget, title)

    # -- refresh -----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        self._show_phase()
        self.find_servers_elsewhere()
        self.find_unit_load()
        self.tune.show_state()
        self._note_plan_drift()
        if not self.history_runs and not self.tasks.is_running(HISTORY_KEY):
            self.load_history()

    def _note_plan_drift(self) -> None:
        running = self.server.phase in (ServerPhase.LOADING, ServerPhase.HEALTHY)
        if running and self._started_from is not None and self._started_from != self.state.plan:
            self.note.show_text(
                "The plan changed since this server started: stop and start it again to use "
                "the new settings.",
                Tone.WARN,
            )
        elif self.plan_note:
            self.note.show_text(self.plan_note, Tone.INFO)
        elif self.state.plan.model.path is None:
            self.note.show_text(
                f"The plan uses the {self.state.plan.model.label}, which has no file "
                "to run: open your GGUF file on the Model page to launch and benchmark it here.",
                Tone.INFO,
            )
        elif (elsewhere := self.card_elsewhere()) is not None:
            self.note.show_text(f"{elsewhere}.", Tone.WARN)
        else:
            self.note.show_text(None)

    def card_elsewhere(self) -> str | None:
        """Said before launch: the plan is for a catalogue card this computer does not have."""
        if self.state.report is None:
            return None
        return card_not_here(self.state.plan, self.state.machine())

    def _on_plan_changed(self, plan: object) -> None:
        super()._on_plan_changed(plan)
        self._note_plan_drift()

    def _show_phase(self) -> None:
        phase = self.server.phase
        colour = {
            ServerPhase.HEALTHY: "#166534",
            ServerPhase.FAILED: "#991b1b",
            ServerPhase.LOADING: "#92400e",
            ServerPhase.PREPARING: "#92400e",
            ServerPhase.STOPPING: "#92400e",
        }.get(phase, "#374151")
        self.phase_label.setText(f"Server: <b style='color:{colour}'>{phase.value}</b>")
        can_start = not self.server.busy and self.state.plan.model.path is not None
        self.start_button.setEnabled(can_start)
        self.start_button.setToolTip(
            "" if self.state.plan.model.path is not None
            else "The plan uses a demo card: choose your GGUF file on the Model page first."
        )  # fmt: skip
        self.stop_button.setEnabled(self.server.busy)
        self.picker.setVisible(not self.state.build().probed)
        benching = self.tasks.is_running(BENCH_KEY)
        tab = self.bench_tab
        ready = phase is ServerPhase.HEALTHY or (self.attached is not None and not self.server.busy)
        tab.bench_button.setEnabled(ready and not benching)
        self.stop_elsewhere_button.setEnabled(self.elsewhere is not None)
        tab.cancel_button.setEnabled(benching)
        tab.export_button.setEnabled(self.shown_run_id is not None)
        if phase is not ServerPhase.HEALTHY:
            self.health_label.setText("")

    # -- server ------------------------------------------------------------------------------------

    def start_server(self) -> None:
        self.problem.show_problem(None)
        self._clear_fixes()
        self.plan_note = None
        self.log_tab.clear()
        self.memory_tab.clear()
        plan = self._started_from = self.state.plan
        try:  # exactly the plan the pages resolved and showed: nothing is detected again
            resolved = self.state.resolved()
            if resolved is None:
                refuse_unresolved(plan)
        except MtpStudioError as exc:
            self.server.refuse(error_sentence(exc))
            return
        self.server.start(resolved)
        self._show_phase()

    def _on_start_clicked(self) -> None:
        self.start_server()

    # -- servers started elsewhere ------------------------------------------------------------

    def find_servers_elsewhere(self) -> None:
        """Look for a running server mtpstudio recorded that this page did not start."""
        own = self.server.pid

        def work(token: CancelToken) -> list[ServerState]:
            return servers_elsewhere(own)

        self.tasks.run(work, self._show_elsewhere, lambda _: None, key=ELSEWHERE_KEY)

    def find_unit_load(self) -> None:
        """What the plan's installed unit compared after its last load (its journal lines)."""
        service = self.state.plan.outputs.service_name

        def work(token: CancelToken) -> list[str]:
            return service_load_lines(service)

        def done(lines: list[str]) -> None:
            self.memory_tab.show_unit_load(service, lines)

        self.tasks.run(work, done, lambda _: None, key=UNIT_LOAD_KEY)

    def _show_elsewhere(self, states: list[ServerState]) -> None:
        port = self.state.plan.server.port
        state = next((s for s in states if s.port == port), states[0] if states else None)
        self.elsewhere = state
        if self.attached is not None and all(s.pid != self.attached.pid for s in states):
            self.attached = None  # it has gone
        if state is None:
            self.elsewhere_row.setVisible(False)
            self._show_phase()
            return
        uptime = time.time() - state.started_at
        attached = self.attached is not None and self.attached.pid == state.pid
        same_port = " — the port this plan uses" if state.port == port else ""
        self.elsewhere_label.setText(
            f"{'Attached to' if attached else 'Running elsewhere:'} the {state.flavour} server "
            f"mtpstudio started on port {state.port} (pid {state.pid}, up "
            f"{uptime / 60:.0f} min){same_port}."
        )
        self.attach_button.setEnabled(not attached and not self.server.busy)
        self.elsewhere_row.setVisible(True)
        self._show_phase()

    def attach_elsewhere(self) -> None:
        """Benchmark the server started elsewhere from this page."""
        if self.elsewhere is None:
            return
        self.attached = self.elsewhere
        self.health_label.setText(
            f"attached · http://{self.attached.host}:{self.attached.port} · pid {self.attached.pid}"
        )
        self._show_elsewhere([self.attached])

    def stop_server_elsewhere(self) -> None:
        """Stop the server started elsewhere (SIGTERM, then SIGKILL), as `server stop` does."""
        state = self.elsewhere
        if state is None:
            return

        def work(token: CancelToken) -> str:
            return stop_elsewhere(state).describe()

        def done(how: str) -> None:
            if self.attached is not None and self.attached.pid == state.pid:
                self.attached = None
                self.health_label.setText("")
            self.note.show_text(f"The server on port {state.port} {how}.", Tone.INFO)
            self.find_servers_elsewhere()

        def failed(exc: BaseException) -> None:
            self.problem.show_problem(f"It could not be stopped: {error_sentence(exc)}")

        self.stop_elsewhere_button.setEnabled(False)
        self.tasks.run(work, done, failed, key=ELSEWHERE_KEY)

    def _on_stop_clicked(self) -> None:
        if self.bench_cancel is not None:
            self.bench_cancel.cancel()
        self.server.stop()

    def _on_phase_changed(self, phase: str) -> None:
        self._show_phase()
        self._note_plan_drift()

    def _on_lines_logged(self, lines: list[str]) -> None:
        self.log_tab.append(lines)

    def _on_start_refused(self, sentence: str) -> None:
        if not self.state.build().probed and "llama-server was found" in sentence:
            flavour = self.state.plan.engine.flavour.value
            sentence = (
                f"No {flavour} llama-server was found on this computer: Browse… for the one "
                "you have, or build one (How to build one says how)."
            )
        self.problem.show_problem(sentence)
        self._show_phase()

    def _on_engine_picked(self, sentence: str) -> None:
        self.problem.show_problem(None)
        self.note.show_text(sentence, Tone.GOOD)
        self._show_phase()

    def _on_became_healthy(self, result: LaunchResult) -> None:
        health = result.health
        self.log_tab.show_path(result.log_path)
        self.health_label.setText(
            f"up after {health.seconds:.1f} s · {self._base_url()} · pid {self.server.pid}"
        )
        self.memory_tab.show_computing()
        if result.diagnosis is not None:
            self._show_diagnosis(result.diagnosis, Tone.WARN)
        self._show_phase()

    def _on_health_polled(self, answer: HealthAnswer) -> None:
        state = "/health OK" if answer.status == 200 else f"/health: {answer.detail}"
        self.health_label.setText(f"{state} · {self._base_url()} · pid {self.server.pid}")

    def _on_measured(self, result: LaunchResult) -> None:
        self.memory_tab.show_reconciliation(result.reconciliation, result.prediction_error)

    def _on_server_failed(self, result: LaunchResult) -> None:
        if result.diagnosis is not None:
            self._show_diagnosis(result.diagnosis, Tone.BAD)
        if self.bench_cancel is not None:
            self.bench_cancel.cancel()  # the run stops; what finished stays in the table
        self._show_phase()

    def _on_server_stopped(self, outcome: ProcessOutcome) -> None:
        self.health_label.setText(f"The server {outcome.describe()}.")
        self._show_phase()

    def _base_url(self) -> str:
        return self.server.base_url or ""

    # -- diagnosis and fixes -----------------------------------------------------------------------

    def _show_diagnosis(self, diagnosis: Diagnosis, tone: Tone) -> None:
        self.last_diagnosis = diagnosis
        tail = "\n".join(self.server.log_lines()[-30:])
        details = diagnosis.render() + ("\n\nLast log lines:\n" + tail if tail else "")
        self.problem.show_problem(diagnosis.cause, details, tone)
        self._clear_fixes()
        for fix in diagnosis.fixes:
            self._add_fix_button(fix.label, fix.changes, fix.buys)

    def _clear_fixes(self) -> None:
        for button in self.fix_buttons:
            self.fix_row.removeWidget(button)
            button.deleteLater()
        self.fix_buttons = []

    def _add_fix_button(self, title: str, changes: dict[str, Any], why: str) -> None:
        shown = ", ".join(f"{k} = {v}" for k, v in changes.items())
        button = QPushButton(title[:1].upper() + title[1:], self)
        button.setToolTip(f"{why}\nChanges the plan: {shown}")
        button.clicked.connect(lambda: self.apply_fix(title, changes))
        self.fix_row.addWidget(button)
        self.fix_buttons.append(button)

    def apply_fix(self, title: str, changes: dict[str, Any]) -> bool:
        """Put a fix (or a doctor's remedy) into the Plan; says so, or why it was refused."""
        plan = self.apply(dict(changes))
        if plan is None:
            return False
        shown = ", ".join(f"{k} = {v}" for k, v in changes.items())
        self.plan_note = f"Plan changed ({title}: {shown}). Start the server again to try it."
        self._note_plan_drift()
        return True

    def plan_refused(self, sentence: str | None) -> None:
        if sentence:
            self.plan_note = None
            self.note.show_text(f"The plan did not take that change: {sentence}", Tone.BAD)

    # -- benchmark ---------------------------------------------------------------------------------

    def run_benchmark(self, categories: Sequence[str] | None = None) -> bool:
        """Benchmark the running server through the task manager (progress, cancel)."""
        prepared = self.server.prepared
        base_url = self.server.base_url
        own = self.server.phase is ServerPhase.HEALTHY and prepared is not None and base_url
        if own:
            assert prepared is not None and base_url is not None
            target = bench_target(prepared, base_url)
            on_gpu = prepared.plan.device != "cpu"
        elif self.attached is not None:
            target = attached_target(self.attached)
            on_gpu = target.device not in (None, "cpu")
        else:
            self.problem.show_problem("Start the server first; the benchmark measures it.")
            return False
        tab = self.bench_tab
        settings = BenchSettings(n_predict=tab.n_predict.value(), repeats=tab.repeats.value())
        cancel = self.bench_cancel = BenchCancelToken()
        relay = self._relay
        history = self.history
        wanted = set(categories) if categories is not None else None
        sampler_on = on_gpu
        pctx = self.state.context()  # the estimate beside the measurement

        def job(token: CancelToken) -> BenchOutcome:
            run = run_benchmark(target, prompts_for(wanted), settings, history=history,
                                cancel=cancel, progress=relay.progressed.emit,
                                vram=vram_sampler(sampler_on), pctx=pctx)  # fmt: skip
            error = run.history_error
            runs: tuple[HistoryEntry, ...] = ()
            if error is None:
                try:
                    runs = _history_runs(history)
                except MtpStudioError as exc:
                    error = exc
            if error is not None:
                return BenchOutcome(run.report, run.findings, None, (), error_sentence(error))
            return BenchOutcome(run.report, run.findings, run.run_id, runs)

        total = len(wanted) if wanted is not None else 9
        tab.start_progress(total * settings.repeats)
        self.tasks.run(job, self._on_bench_finished, self._on_bench_failed, key=BENCH_KEY)
        self._show_phase()
        return True

    def _on_bench_clicked(self) -> None:
        self.run_benchmark()

    def _on_cancel_clicked(self) -> None:
        if self.bench_cancel is not None:
            self.bench_cancel.cancel()
            self.bench_tab.progress_label.setText("cancelling after the current request…")

    def _on_bench_progressed(self, step: BenchProgress) -> None:
        self.bench_tab.show_progress(step)

    def _on_bench_finished(self, outcome: BenchOutcome) -> None:
        self.bench_cancel = None
        self.bench_tab.stop_progress()
        self.show_bench(outcome)
        self._show_phase()

    def _on_bench_failed(self, exc: BaseException) -> None:
        self.bench_cancel = None
        self.bench_tab.stop_progress()
        self.problem.show_problem(f"The benchmark failed: {error_sentence(exc)}")
        self._show_phase()

    def show_bench(self, outcome: BenchOutcome) -> None:
        """Fill the table, the summary, the findings and the charts from a run."""
        self.bench_outcome = outcome
        self.shown_run_id = outcome.run_id
        self.bench_tab.show_report(
            outcome.report, outcome.findings, outcome.run_id, outcome.history_error
        )
        if outcome.history:
            self.show_history(outcome.history)

    def show_stored(self, entry: HistoryEntry) -> None:
        """Show a run from the history (the page opens on the latest one)."""
        self.shown_run_id = entry.id
        self._show_phase()
        self.bench_tab.show_stored(entry)

    # -- history, A/B, export ----------------------------------------------------------------------

    def load_history(self) -> None:
        history = self.history

        def job(token: CancelToken) -> tuple[HistoryEntry, ...]:
            return _history_runs(history)

        self.tasks.run(job, self.show_history, lambda _: None, key=HISTORY_KEY)

    def show_history(self, runs: Sequence[HistoryEntry]) -> None:
        self.history_runs = tuple(runs)
        self.compare_tab.show_runs(self.history_runs, self._latest_id())
        if self.bench_outcome is not None or self.bench_tab.results.rowCount() != 0:
            return
        mine = runs_of_plans(self.history_runs, self._plan_forms())
        if mine:  # the page opens on the latest run of this plan, never on another plan's
            self.show_stored(mine[-1])
        elif self.history_runs:
            n = len(self.history_runs)
            self.bench_tab.summary.setText(
                f"No stored run of this plan yet ({n} run{'s' if n != 1 else ''} of other plans "
                "under Compare & history). Start the server, then run the benchmark."
            )

    def _plan_forms(self) -> list[Plan]:
        """The wizard's plan and the plan it launches as (what a stored run records), the latter
        from the page's cached evaluation."""
        evaluation = self.state.evaluation()
        result = evaluation.result if evaluation is not None else None
        effective = result.effective if result is not None else None
        return [self.state.plan] + ([effective] if effective is not None else [])

    def _latest_id(self) -> int | None:
        if self.bench_outcome is not None and self.bench_outcome.run_id is not None:
            return self.bench_outcome.run_id
        return self.history_runs[-1].id if self.history_runs else None

    def ask_export_path(self, fmt: str) -> Path | None:
        """The save dialog (tests replace this method)."""
        start = str(Path.home() / f"mtpstudio-bench.{fmt}")
        name, _ = QFileDialog.getSaveFileName(
            self, "Export the results", start, EXPORT_FORMATS[fmt]
        )
        return Path(name) if name else None

    def export_results(self, fmt: str, path: Path) -> bool:
        """Write the run shown as md/csv/json (what ``mtpstudio bench show --format`` prints)."""
        if self.shown_run_id is None:
            return False
        try:
            text = export_entry(self.history.get(self.shown_run_id), fmt)
            write_text_atomic(path, text)
        except (MtpStudioError, OSError) as exc:
            self.problem.show_problem(f"Cannot export the results: {error_sentence(exc)}")
            return False
        self.note.show_text(f"Results exported to {path}.", Tone.GOOD)
        return True

    def _on_export_clicked(self) -> None:
        fmt = str(self.bench_tab.export_format.currentData())
        path = self.ask_export_path(fmt)
        if path is not None:
            self.export_results(fmt, path)

    # -- leaving -----------------------------------------------------------------------------------

    def ask_server_exit(self) -> ServerExitChoice:
        """Ask what to do with the running server (tests replace this method)."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("The server is running")
        box.setText("The server this window started is still running.")
        box.setInformativeText(
            "Stop it, or leave it running (`mtpstudio server status` and `mtpstudio server "
            "stop` find it later)?"
        )
        stop = box.addButton("Stop the server", QMessageBox.ButtonRole.AcceptRole)
        leave = box.addButton("Leave it running", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(stop)
        box.exec()
        clicked = box.clickedButton()
        if clicked is stop:
            return ServerExitChoice.STOP
        if clicked is leave:
            return ServerExitChoice.LEAVE
        return ServerExitChoice.CANCEL

    def release_server(self) -> bool:
        """Before the window closes: ask about a running server; False keeps the window open."""
        if not self.server.busy:
            return True
        choice = self.ask_server_exit()
        if choice is ServerExitChoice.CANCEL:
            return False
        if self.bench_cancel is not None:
            self.bench_cancel.cancel()
        if choice is ServerExitChoice.LEAVE and self.server.phase is ServerPhase.HEALTHY:
            self.server.leave_running()
        else:
            self.server.stop_now()
        return True
