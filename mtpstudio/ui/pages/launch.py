"""Launch & benchmark page: start the server, watch it load, measure it, keep and compare runs.

The server is a ``GuiServer`` (ui/server_process.py: QProcess over core's launch spec). The
benchmark is core's ``run_bench`` run through the task manager, with its own cancel token (a
cancelled or failed run keeps its finished categories) and progress relayed to the GUI thread by
a queued signal. Every run goes to the benchmark history; the charts and the export read it.
Diagnosis fixes and doctor remedies are buttons that change the Plan (``PlanPage.apply``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFont, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.bench.history import BenchHistory, HistoryEntry, export_entry
from mtpstudio.core.bench.target import BenchProgress
from mtpstudio.core.bench.target import CancelToken as BenchCancelToken
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan import Plan, plan_with
from mtpstudio.core.server.diagnosis import Diagnosis
from mtpstudio.core.server.health import HealthAnswer
from mtpstudio.core.server.process import ProcessOutcome
from mtpstudio.core.server.reconcile import Reconciliation
from mtpstudio.core.usecases.bench import (
    BenchReport,
    BenchSettings,
    Finding,
    prompts_for,
    run_benchmark,
    vram_sampler,
)
from mtpstudio.core.usecases.launch import LaunchResult, bench_target
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.pages.tune_panel import TunePanel
from mtpstudio.ui.server_process import GuiServer, ServerPhase
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.tasks import CancelToken, TaskManager
from mtpstudio.ui.widgets.charts import BarChart, LineChart, Series
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.error_details import DetailsNotice

BENCH_KEY = "bench-run"
HISTORY_KEY = "bench-history"
LOG_BLOCKS = 5000
DEFAULT_N_PREDICT = 192
RESULT_COLUMNS = (
    "Category",
    "Tokens",
    "Decode tok/s",
    "Prefill tok/s",
    "TTFT ms",
    "Drafts",
    "Accepted",
    "Accept",
)
EXPORT_FILTERS = {
    "md": "Markdown (*.md)",
    "csv": "CSV, one row per category (*.csv)",
    "json": "JSON, everything (*.json)",
}
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


def _cell(value: float | int | None, fmt: str = "{:.1f}") -> str:
    if value is None:
        return "–"
    return fmt.format(value)


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
        self.bench: BenchOutcome | None = None
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
        self.fix_row = QHBoxLayout()
        self.fix_buttons: list[QPushButton] = []
        self.note = Notice(self)

        # -- tabs
        self.tabs = QTabWidget(self)
        self.tabs.addTab(self._build_bench_tab(), "Benchmark")
        self.tabs.addTab(self._build_log_tab(), "Server log")
        self.tabs.addTab(self._build_memory_tab(), "Memory")
        self.tabs.addTab(self._build_compare_tab(), "Compare && history")
        self.tune = TunePanel(state, tasks, self, history=self.history)
        self.add_tool_tab(self.tune, "Tune")

        body = QVBoxLayout(self)
        body.addLayout(server_row)
        body.addWidget(self.problem)
        body.addLayout(self.fix_row)
        body.addWidget(self.note)
        body.addWidget(self.tabs, 1)

        self.start_button.clicked.connect(self._on_start_clicked)
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

    # -- building the tabs -------------------------------------------------------------------------

    def _build_bench_tab(self) -> QWidget:
        tab = QWidget(self)
        self.n_predict = QSpinBox(tab)
        self.n_predict.setRange(1, 4096)
        self.n_predict.setValue(DEFAULT_N_PREDICT)
        self.n_predict.setToolTip("Tokens generated per request (the community's runs use 192).")
        self.repeats = QSpinBox(tab)
        self.repeats.setRange(1, 20)
        self.repeats.setValue(1)
        self.repeats.setToolTip("Requests per category; the table shows medians.")
        self.bench_button = QPushButton("Run benchmark", tab)
        self.cancel_button = QPushButton("Cancel", tab)
        self.export_button = QPushButton("Export…", tab)
        self.export_format = QComboBox(tab)
        for fmt in EXPORT_FILTERS:
            self.export_format.addItem(fmt, fmt)
        self.progress = QProgressBar(tab)
        self.progress.setFormat("%v / %m requests")
        self.progress_label = QLabel(tab)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Tokens per request", tab))
        controls.addWidget(self.n_predict)
        controls.addWidget(QLabel("Repeats", tab))
        controls.addWidget(self.repeats)
        controls.addWidget(self.bench_button)
        controls.addWidget(self.cancel_button)
        controls.addStretch(1)
        controls.addWidget(self.export_format)
        controls.addWidget(self.export_button)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.progress_label, 2)
        self.progress.setVisible(False)
        self.summary = QLabel(
            "Start the server, then run the benchmark: nine prompt categories, tokens per "
            "second and draft acceptance, one warm-up request left out.",
            tab,
        )
        self.summary.setWordWrap(True)
        self.findings = QVBoxLayout()
        self.finding_rows: list[QWidget] = []
        self.finding_notices: list[Notice] = []
        self.remedy_buttons: list[QPushButton] = []
        self.results = QTableWidget(0, len(RESULT_COLUMNS), tab)
        self.results.setHorizontalHeaderLabels(list(RESULT_COLUMNS))
        self.results.verticalHeader().setVisible(False)
        self.results.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.results.horizontalHeader().setStretchLastSection(True)
        self.results.verticalHeader().setDefaultSectionSize(22)
        self.results.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.tok_chart = BarChart("Decode speed per category", "tok/s", tab)
        self.accept_chart = BarChart("Draft acceptance per category", "%", tab)
        self.accept_chart.fixed_max = 100.0
        charts = QWidget(tab)
        charts.setMaximumWidth(300)
        column = QVBoxLayout(charts)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.tok_chart)
        column.addWidget(self.accept_chart)
        lower = QHBoxLayout()
        lower.addWidget(self.results, 1)
        lower.addWidget(charts)
        layout = QVBoxLayout(tab)
        layout.addLayout(controls)
        layout.addLayout(progress_row)
        layout.addWidget(self.summary)
        layout.addLayout(self.findings)
        layout.addLayout(lower, 1)
        self.bench_button.clicked.connect(self._on_bench_clicked)
        self.cancel_button.clicked.connect(self._on_cancel_clicked)
        self.export_button.clicked.connect(self._on_export_clicked)
        return tab

    def _build_log_tab(self) -> QWidget:
        tab = QWidget(self)
        self.search = QLineEdit(tab)
        self.search.setPlaceholderText("Search the log (Enter: next match)")
        self.search.setClearButtonEnabled(True)
        self.search_label = QLabel(tab)
        self.log_path_label = QLabel(tab)
        self.log_path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.log_view = QPlainTextEdit(tab)
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_BLOCKS)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.log_view.setFont(mono)
        row = QHBoxLayout()
        row.addWidget(self.search, 1)
        row.addWidget(self.search_label)
        layout = QVBoxLayout(tab)
        layout.addLayout(row)
        layout.addWidget(self.log_path_label)
        layout.addWidget(self.log_view, 1)
        self.search.returnPressed.connect(self.find_next)
        self.search.textChanged.connect(self._on_search_changed)
        return tab

    def _build_memory_tab(self) -> QWidget:
        tab = QWidget(self)
        self.memory_label = QLabel(
            "Start the server to compare the planned memory with what the engine reports.", tab
        )
        self.memory_label.setWordWrap(True)
        self.memory = QTableWidget(0, 5, tab)
        self.memory.setHorizontalHeaderLabels(
            ["Segment", "Device", "Predicted MiB", "Logged MiB", "Difference"]
        )
        self.memory.verticalHeader().setVisible(False)
        self.memory.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.memory.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        layout = QVBoxLayout(tab)
        layout.addWidget(self.memory_label)
        layout.addWidget(self.memory, 1)
        return tab

    def _build_compare_tab(self) -> QWidget:
        tab = QWidget(self)
        self.compare_with = QComboBox(tab)
        self.compare_with.setToolTip("The stored run to put next to the latest one.")
        self.compare_with.setPlaceholderText("no other stored run yet")
        self.ab_chart = BarChart("A/B: decode speed per category", "tok/s", tab)
        self.history_chart = LineChart("History: tokens per second per run", "tok/s", tab)
        grid = QGridLayout(tab)
        grid.addWidget(QLabel("Compare the latest run with", tab), 0, 0)
        grid.addWidget(self.compare_with, 0, 1)
        grid.setColumnStretch(1, 1)
        grid.addWidget(self.ab_chart, 1, 0, 1, 2)
        grid.addWidget(self.history_chart, 2, 0, 1, 2)
        self.compare_with.currentIndexChanged.connect(lambda _: self._draw_ab())
        return tab

    def add_tool_tab(self, widget: QWidget, title: str) -> None:
        """The hook for tools that drive the server from this page (the tuner's live table
        with its "use the best" button goes here when the tuner core lands)."""
        self.tabs.addTab(widget, title)

    # -- refresh -----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        self._show_phase()
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
        else:
            self.note.show_text(None)

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
        benching = self.tasks.is_running(BENCH_KEY)
        self.bench_button.setEnabled(phase is ServerPhase.HEALTHY and not benching)
        self.cancel_button.setEnabled(benching)
        self.export_button.setEnabled(self.shown_run_id is not None)
        if phase is not ServerPhase.HEALTHY:
            self.health_label.setText("")

    # -- server ------------------------------------------------------------------------------------

    def start_server(self) -> None:
        self.problem.show_problem(None)
        self._clear_fixes()
        self.plan_note = None
        self.log_view.clear()
        self.memory.setRowCount(0)
        plan = self._started_from = self.state.plan
        if plan.engine.binary is None:
            shown = self.state.build()  # the build the Engine page shows for this flavour
            if shown.probed:
                plan = plan_with(plan, {"engine.binary": str(shown.build.binary)})
        self.server.start(plan)
        self._show_phase()

    def _on_start_clicked(self) -> None:
        self.start_server()

    def _on_stop_clicked(self) -> None:
        if self.bench_cancel is not None:
            self.bench_cancel.cancel()
        self.server.stop()

    def _on_phase_changed(self, phase: str) -> None:
        self._show_phase()
        self._note_plan_drift()

    def _on_lines_logged(self, lines: list[str]) -> None:
        self.log_view.appendPlainText("\n".join(lines))
        if self.search.text():
            self._count_matches()

    def _on_start_refused(self, sentence: str) -> None:
        self.problem.show_problem(sentence)
        self._show_phase()

    def _on_became_healthy(self, result: LaunchResult) -> None:
        health = result.health
        self.log_path_label.setText(f"Log file: {result.log_path}")
        self.health_label.setText(
            f"up after {health.seconds:.1f} s · {self._base_url()} · pid {self.server.pid}"
        )
        self.memory_label.setText("Computing the prediction for this machine…")
        if result.diagnosis is not None:
            self._show_diagnosis(result.diagnosis, Tone.WARN)
        self._show_phase()

    def _on_health_polled(self, answer: HealthAnswer) -> None:
        state = "/health OK" if answer.status == 200 else f"/health: {answer.detail}"
        self.health_label.setText(f"{state} · {self._base_url()} · pid {self.server.pid}")

    def _on_measured(self, result: LaunchResult) -> None:
        self.show_reconciliation(result.reconciliation, result.prediction_error)

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

    def show_reconciliation(self, rec: Reconciliation | None, error: str | None) -> None:
        self.memory.setRowCount(0)
        if rec is None:
            self.memory_label.setText(f"No prediction to compare with: {error or 'unknown'}")
            return
        text = (
            f"Predicted by the plan vs logged by the engine on {rec.device}: "
            f"{rec.predicted_total_mib:,.1f} MiB vs {rec.actual_total_mib:,.1f} MiB."
        )
        self.memory_label.setText(text + (f" ({error})" if error else ""))
        rows = [(r.segment, r.device, r.predicted_mib, r.actual_mib, r.delta_mib) for r in rec.rows]
        rows.append(
            (
                "total",
                "",
                rec.predicted_total_mib,
                rec.actual_total_mib,
                rec.actual_total_mib - rec.predicted_total_mib,
            )
        )
        self.memory.setRowCount(len(rows))
        for i, (segment, device, predicted, actual, delta) in enumerate(rows):
            cells = [segment, device, f"{predicted:,.2f}", f"{actual:,.2f}", f"{delta:+,.2f}"]
            for j, text_cell in enumerate(cells):
                item = QTableWidgetItem(text_cell)
                if j >= 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.memory.setItem(i, j, item)

    # -- diagnosis and fixes -----------------------------------------------------------------------

    def _show_diagnosis(self, diagnosis: Diagnosis, tone: Tone) -> None:
        self.last_diagnosis = diagnosis
        tail = "\n".join(self.server.log_lines()[-30:])
        details = diagnosis.render() + ("\n\nLast log lines:\n" + tail if tail else "")
        self.problem.show_problem(diagnosis.cause, details, tone)
        self._clear_fixes()
        for fix in diagnosis.fixes:
            self._add_fix_button(fix.title, fix.changes, fix.why)

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
        if self.server.phase is not ServerPhase.HEALTHY or prepared is None or base_url is None:
            self.problem.show_problem("Start the server first; the benchmark measures it.")
            return False
        target = bench_target(prepared, base_url)
        settings = BenchSettings(n_predict=self.n_predict.value(), repeats=self.repeats.value())
        cancel = self.bench_cancel = BenchCancelToken()
        relay = self._relay
        history = self.history
        wanted = set(categories) if categories is not None else None
        sampler_on = prepared.plan.device != "cpu"

        def job(token: CancelToken) -> BenchOutcome:
            run = run_benchmark(target, prompts_for(wanted), settings, history=history,
                                cancel=cancel, progress=relay.progressed.emit,
                                vram=vram_sampler(sampler_on))  # fmt: skip
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
        self.progress.setRange(0, total * settings.repeats)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.progress_label.setText("warming up…")
        self.tasks.run(job, self._on_bench_finished, self._on_bench_failed, key=BENCH_KEY)
        self._show_phase()
        return True

    def _on_bench_clicked(self) -> None:
        self.run_benchmark()

    def _on_cancel_clicked(self) -> None:
        if self.bench_cancel is not None:
            self.bench_cancel.cancel()
            self.progress_label.setText("cancelling after the current request…")

    def _on_bench_progressed(self, step: BenchProgress) -> None:
        if step.total:
            self.progress.setRange(0, step.total)
        self.progress.setValue(step.done)
        self.progress_label.setText(f"{step.phase}: {step.category}")

    def _on_bench_finished(self, outcome: BenchOutcome) -> None:
        self.bench_cancel = None
        self.show_bench(outcome)
        self._show_phase()

    def _on_bench_failed(self, exc: BaseException) -> None:
        self.bench_cancel = None
        self.problem.show_problem(f"The benchmark failed: {error_sentence(exc)}")
        self._show_phase()

    def show_bench(self, outcome: BenchOutcome) -> None:
        """Fill the table, the summary, the findings and the charts from a run."""
        self.bench = outcome
        self.shown_run_id = outcome.run_id
        report = outcome.report
        self._fill_rows([c.to_dict() for c in report.categories])
        accept = report.aggregate_accept_rate
        parts = [
            f"<b>{_cell(report.tok_s)} tok/s</b> over {report.n_requests} requests "
            f"({report.total_predicted} tokens)",
            "acceptance " + ("–" if accept is None else f"{accept * 100:.0f} %"),
        ]
        if report.cancelled:
            parts.append("cancelled: the finished categories are kept")
        elif report.error:
            parts.append(f"stopped early: {report.error}")
        if outcome.history_error:
            parts.append(f"not stored: {outcome.history_error}")
        elif outcome.run_id is not None:
            parts.append(f"stored as run {outcome.run_id}")
        self.summary.setText(" · ".join(parts))
        self.progress_label.setText("done" if not report.error else "stopped")
        self._show_findings(outcome.findings)
        if outcome.history:
            self.show_history(outcome.history)

    def show_stored(self, entry: HistoryEntry) -> None:
        """Show a run from the history (the page opens on the latest one)."""
        self.shown_run_id = entry.id
        self._show_phase()
        self._fill_rows(entry.rows)
        agg = entry.aggregate
        accept = _float(agg.get("aggregate_accept_rate"))
        self.summary.setText(
            f"Last stored run {entry.id} ({entry.label}, {entry.created_at[:16].replace('T', ' ')}"
            f"): <b>{_cell(_float(agg.get('tok_s')))} tok/s</b> over {agg.get('n_requests', 0)} "
            "requests · acceptance " + ("–" if accept is None else f"{accept * 100:.0f} %")
        )
        warning = entry.report.get("drafting_warning")
        self._show_findings([Finding("drafting-off", str(warning))] if warning else [])

    def _fill_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Table and per-category charts from rows shaped like ``CategoryResult.to_dict``."""
        self.results.setRowCount(len(rows))
        acceptance = [None if (a := _float(r.get("acceptance"))) is None else a * 100 for r in rows]
        for i, r in enumerate(rows):
            cells = [
                str(r["category"]),
                str(r.get("predicted", "")),
                _cell(_float(r.get("decode_tok_s"))),
                _cell(_float(r.get("prefill_tok_s"))),
                _cell(_float(r.get("ttft_ms")), "{:.0f}"),
                str(r.get("draft", "")),
                str(r.get("accepted", "")),
                _cell(acceptance[i], "{:.0f} %"),
            ]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.results.setItem(i, j, item)
        labels = [str(r["category"]) for r in rows]
        speeds = tuple(_float(r.get("decode_tok_s")) for r in rows)
        self.tok_chart.set_data(labels, [Series("tok/s", speeds)])
        self.accept_chart.set_data(labels, [Series("acceptance", tuple(acceptance))])

    def _show_findings(self, findings: Sequence[Finding]) -> None:
        """One row per finding: the sentence (red for 'drafting is off'), then its remedies."""
        for row in self.finding_rows:
            self.findings.removeWidget(row)
            row.deleteLater()
        self.finding_rows, self.finding_notices, self.remedy_buttons = [], [], []
        for finding in findings:
            row = QWidget(self)
            line = QHBoxLayout(row)
            line.setContentsMargins(0, 0, 0, 0)
            notice = Notice(row)
            tone = Tone.BAD if finding.code == "drafting-off" else Tone.WARN
            notice.show_text(finding.message, tone)
            line.addWidget(notice, 1)
            self.finding_notices.append(notice)
            for remedy in finding.remedies:
                button = QPushButton(remedy.label[:1].upper() + remedy.label[1:], row)
                button.setToolTip(
                    "Changes the plan: "
                    + ", ".join(f"{k} = {v}" for k, v in remedy.changes.items())
                )
                changes = dict(remedy.changes)
                label = remedy.label
                button.clicked.connect(lambda _=False, t=label, c=changes: self.apply_fix(t, c))
                line.addWidget(button)
                self.remedy_buttons.append(button)
            self.findings.addWidget(row)
            self.finding_rows.append(row)

    # -- history, A/B, export ----------------------------------------------------------------------

    def load_history(self) -> None:
        history = self.history

        def job(token: CancelToken) -> tuple[HistoryEntry, ...]:
            return _history_runs(history)

        self.tasks.run(job, self.show_history, lambda _: None, key=HISTORY_KEY)

    def show_history(self, runs: Sequence[HistoryEntry]) -> None:
        self.history_runs = tuple(runs)
        tok_s = tuple(_float(e.aggregate.get("tok_s")) for e in self.history_runs)
        dates = [e.created_at[:16].replace("T", " ") for e in self.history_runs]
        self.history_chart.set_data(dates, [Series("tok/s", tok_s)])
        latest = self._latest_id()
        self.compare_with.blockSignals(True)
        self.compare_with.clear()
        for entry in reversed(self.history_runs):
            if entry.id == latest:
                continue
            tok = _float(entry.aggregate.get("tok_s"))
            text = f"run {entry.id} · {entry.label} · {entry.created_at[:16]} · {_cell(tok)} tok/s"
            self.compare_with.addItem(text, entry.id)
        if self.compare_with.count():
            self.compare_with.setCurrentIndex(0)  # the newest other run
        self.compare_with.blockSignals(False)
        self._draw_ab()
        if self.bench is None and self.history_runs and self.results.rowCount() == 0:
            self.show_stored(self.history_runs[-1])

    def _latest_id(self) -> int | None:
        if self.bench is not None and self.bench.run_id is not None:
            return self.bench.run_id
        return self.history_runs[-1].id if self.history_runs else None

    def _draw_ab(self) -> None:
        by_id = {e.id: e for e in self.history_runs}
        latest = by_id.get(self._latest_id() or -1)
        other = by_id.get(self.compare_with.currentData() or -1)
        if latest is None:
            self.ab_chart.set_data([], [])
            return
        a = {r["category"]: _float(r["decode_tok_s"]) for r in latest.rows}
        series = [Series(f"run {latest.id}", tuple(a.values()))]
        labels = list(a)
        if other is not None:
            b = {r["category"]: _float(r["decode_tok_s"]) for r in other.rows}
            labels += [c for c in b if c not in a]
            series = [
                Series(f"run {latest.id}", tuple(a.get(c) for c in labels)),
                Series(f"run {other.id}", tuple(b.get(c) for c in labels)),
            ]
        self.ab_chart.set_data(labels, series)

    def ask_export_path(self, fmt: str) -> Path | None:
        """The save dialog (tests replace this method)."""
        start = str(Path.home() / f"mtpstudio-bench.{fmt}")
        name, _ = QFileDialog.getSaveFileName(
            self, "Export the results", start, EXPORT_FILTERS[fmt]
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
        fmt = str(self.export_format.currentData())
        path = self.ask_export_path(fmt)
        if path is not None:
            self.export_results(fmt, path)

    # -- log search --------------------------------------------------------------------------------

    def find_next(self) -> bool:
        """Select the next match of the search text in the log (wrapping around)."""
        text = self.search.text()
        if not text:
            return False
        if self.log_view.find(text):
            return True
        self.log_view.moveCursor(QTextCursor.MoveOperation.Start)
        return self.log_view.find(text)

    def _on_search_changed(self, text: str) -> None:
        self.log_view.moveCursor(QTextCursor.MoveOperation.Start)
        self._count_matches()
        if text:
            self.find_next()

    def _count_matches(self) -> int:
        text = self.search.text()
        if not text:
            self.search_label.setText("")
            return 0
        doc: QTextDocument = self.log_view.document()
        needle = text.lower()
        count = 0
        block = doc.begin()
        while block.isValid():
            if needle in block.text().lower():
                count += 1
            block = block.next()
        self.search_label.setText(f"{count} matching line{'s' if count != 1 else ''}")
        return count

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


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
