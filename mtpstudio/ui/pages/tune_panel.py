"""The Tune tab of the Launch page: the tuner's constraints, its live table, and "Use the best".

The search is core's ``run_tune`` run through the task manager with the tuner's own CancelToken
(Cancel keeps every row measured so far); its progress, carrying a snapshot of each row as it
finishes, crosses to the GUI thread by a queued signal. "Use the best" writes the best row's
changes into the wizard's Plan through ``WizardState.update``, as every page does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.results import BenchSettings
from mtpstudio.core.bench.target import CancelToken as TuneCancelToken
from mtpstudio.core.bench.tune import TuneConstraints, TuneProgress, TuneResult, TuneRow
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.memory.machine import MachineFacts
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import CacheType
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import MIN_CTX
from mtpstudio.core.speed.inputs import SpeedInputs
from mtpstudio.core.units import MIB
from mtpstudio.core.usecases.bench import prompts_for
from mtpstudio.core.usecases.tune import TuneOutcome, run_tuning, tune_setup
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.tasks import CancelToken, TaskManager
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.error_details import DetailsNotice
from mtpstudio.ui.widgets.number_box import NumberBox

TUNE_KEY = "tune-run"
DEFAULT_N_PREDICT = 64  # short requests: a quick search; the community's runs use 192
DEFAULT_MAX_CANDIDATES = 6
TABLE_COLUMNS = (
    "Candidate",
    "Fits",
    "tok/s",
    "Estimate",
    "Accept",
    "VRAM peak",
    "Stage",
    "Status",
    "Why",
)


class LinkedCancel(TuneCancelToken):
    """The tuner's token, also set when the task manager cancels the task (window closing)."""

    def __init__(self) -> None:
        super().__init__()
        self.task: CancelToken | None = None

    @property
    def cancelled(self) -> bool:
        return super().cancelled or (self.task is not None and self.task.cancelled)

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            self.cancel()
        super().raise_if_cancelled()


class _ProgressRelay(QObject):
    """Emitted from the tuner's pool thread; connected slots run on the GUI thread."""

    progressed = Signal(object)  # TuneProgress


def _num(value: object, fmt: str) -> str:
    return "–" if not isinstance(value, int | float) else format(value, fmt)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(seconds)
    return f"{s // 60}:{s % 60:02d}"


def row_cells(row: dict[str, Any]) -> list[str]:
    """The table's cells for a row snapshot (``TuneRow.to_dict``)."""
    runs = row.get("runs") or []
    stage = runs[-1]["stage"] if runs else "–"
    peak = row.get("vram_peak_bytes")
    why = str(row.get("reason") or "")
    diagnosis = row.get("diagnosis")
    if isinstance(diagnosis, dict) and diagnosis.get("kind"):
        why = f"{why} [{diagnosis['kind']}]"
    return [
        str(row.get("label", "")),
        {True: "yes", False: "no", None: "?"}[row.get("fits")],
        _num(row.get("tok_s"), ".2f"),
        _num(row.get("predicted_tok_s"), ".2f"),
        _num(row.get("acceptance"), ".3f"),
        "–" if peak is None else f"{peak / MIB:,.0f} MiB",
        stage,
        str(row.get("status", "")),
        why,
    ]


def describe_changes(changes: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in changes.items())


class TunePanel(QWidget):
    """Constraints, Start/Cancel, progress, the live table, the result and "Use the best"."""

    finished = Signal(object)  # TuneOutcome, after the table shows it

    def __init__(
        self,
        state: WizardState,
        tasks: TaskManager,
        parent: QWidget | None = None,
        *,
        history: BenchHistory | None = None,
    ) -> None:
        super().__init__(parent)
        self.state = state
        self.tasks = tasks
        self.history = history or BenchHistory()
        self.cancel_token: LinkedCancel | None = None
        self.outcome: TuneOutcome | None = None
        self.live_rows: dict[str, dict[str, Any]] = {}
        self.applied: str | None = None
        self._started_at = 0.0
        self._relay = _ProgressRelay(self)
        self._relay.progressed.connect(self._on_progressed)

        # -- constraints
        self.ctx_floor = NumberBox("tokens", self)
        self.ctx_floor.setRange(0, 1 << 20)
        self.ctx_floor.setSingleStep(4096)
        self.ctx_floor.setSpecialValueText("the plan's")
        self.ctx_floor.setToolTip("Every candidate keeps at least this many tokens of context.")
        self.kv_boxes: dict[CacheType, QCheckBox] = {}
        kv_row = QHBoxLayout()
        for ct in (CacheType.F16, CacheType.Q8_0, CacheType.Q4_0):
            box = QCheckBox(ct.value, self)
            box.setToolTip(f"Also try the {ct.value} K/V cache (none ticked: the plan's own).")
            self.kv_boxes[ct] = box
            kv_row.addWidget(box)
        kv_row.addStretch(1)
        self.minutes = QDoubleSpinBox(self)
        self.minutes.setRange(0.0, 24 * 60.0)
        self.minutes.setDecimals(1)
        self.minutes.setSpecialValueText("no limit")
        self.minutes.setToolTip("Stop launching candidates when this time budget would be passed.")
        self.max_candidates = QSpinBox(self)
        self.max_candidates.setRange(0, 999)
        self.max_candidates.setSpecialValueText("no limit")
        self.max_candidates.setValue(DEFAULT_MAX_CANDIDATES)
        self.max_candidates.setToolTip(
            "Launch at most this many candidates (besides the plan): those the speed model "
            "estimates fastest."
        )
        self.skip_slower = QCheckBox("Skip what the estimate calls slower", self)
        self.skip_slower.setChecked(True)
        self.skip_slower.setToolTip(
            "After the plan's own run, do not launch a candidate whose speed estimate "
            "(calibrated by that run) is more than 15 % below the best measured."
        )
        self.n_predict = QSpinBox(self)
        self.n_predict.setRange(1, 4096)
        self.n_predict.setValue(DEFAULT_N_PREDICT)
        self.n_predict.setToolTip("Tokens per request: small for a quick search, 192 to compare.")
        grid = QGridLayout()
        grid.addWidget(QLabel("Context at least", self), 0, 0)
        grid.addWidget(self.ctx_floor, 0, 1)
        grid.addWidget(QLabel("Minutes", self), 0, 2)
        grid.addWidget(self.minutes, 0, 3)
        grid.addWidget(QLabel("K/V cache types", self), 1, 0)
        grid.addLayout(kv_row, 1, 1)
        grid.addWidget(QLabel("Candidates at most", self), 1, 2)
        grid.addWidget(self.max_candidates, 1, 3)
        grid.addWidget(QLabel("Tokens per request", self), 2, 0)
        grid.addWidget(self.n_predict, 2, 1)
        grid.addWidget(self.skip_slower, 2, 2, 1, 2)
        grid.setColumnStretch(4, 1)

        # -- actions and progress
        self.start_button = QPushButton("Start tuning", self)
        self.start_button.setToolTip(
            "Launch and benchmark the candidates that fit, one at a time; the plan's own server "
            "is measured first as the baseline."
        )
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip("Stop after the current request; measured rows are kept.")
        self.use_best_button = QPushButton("Use the best", self)
        self.use_best_button.setToolTip("Put the best candidate's settings into the plan.")
        self.progress = QProgressBar(self)
        self.progress.setVisible(False)
        self.progress_label = QLabel(self)
        actions = QHBoxLayout()
        actions.addWidget(self.start_button)
        actions.addWidget(self.cancel_button)
        actions.addWidget(self.progress, 1)
        actions.addWidget(self.use_best_button)

        self.table = QTableWidget(0, len(TABLE_COLUMNS), self)
        self.table.setHorizontalHeaderLabels(list(TABLE_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.problem = DetailsNotice(self)
        self.note = Notice(self)

        body = QVBoxLayout(self)
        body.addLayout(grid)
        body.addLayout(actions)
        body.addWidget(self.progress_label)
        body.addWidget(self.problem)
        body.addWidget(self.table, 1)
        body.addWidget(self.summary)
        body.addWidget(self.note)

        self.start_button.clicked.connect(lambda: self.start_tuning())
        self.cancel_button.clicked.connect(self.cancel)
        self.use_best_button.clicked.connect(self.use_best)
        self.show_state()

    # -- state ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.tasks.is_running(TUNE_KEY)

    def show_state(self) -> None:
        running = self.running
        has_file = self.state.plan.model.path is not None
        self.start_button.setEnabled(not running and has_file)
        self.start_button.setToolTip(
            self.start_button.toolTip() if has_file
            else "The plan uses a demo card: choose your GGUF file on the Model page first."
        )  # fmt: skip
        self.cancel_button.setEnabled(running)
        best = self.outcome.result.best if self.outcome is not None else None
        self.use_best_button.setEnabled(not running and best is not None and bool(best.changes))

    def constraints(self) -> TuneConstraints:
        minutes = self.minutes.value()
        return TuneConstraints(
            ctx_floor=self.ctx_floor.value() or None,
            time_budget_s=minutes * 60.0 if minutes > 0 else None,
            max_candidates=self.max_candidates.value() or None,
            skip_slower=self.skip_slower.isChecked(),
        )

    def kv_types(self) -> tuple[CacheType, ...]:
        return tuple(ct for ct, box in self.kv_boxes.items() if box.isChecked())

    # -- the search ------------------------------------------------------------------------------

    def start_tuning(self, categories: Sequence[str] | None = None) -> bool:
        """Start the search from the current Plan (``categories``: only these); False: refused."""
        self.problem.show_problem(None)
        plan = self.state.plan
        info = self.state.model_info
        floor = self.ctx_floor.value()
        if plan.model.path is None or info is None:
            self.problem.show_problem(
                "Open your GGUF file on the Model page first; the tuner launches it."
            )
            return False
        if floor and floor < MIN_CTX:
            self.problem.show_problem(f"The context floor must be at least {MIN_CTX} tokens.")
            return False
        if plan.engine.binary is None:
            shown = self.state.build()  # the build the Engine page shows for this flavour
            if shown.probed:
                plan = plan_with(plan, {"engine.binary": str(shown.build.binary)})
        machine = self.state.machine()
        constraints = self.constraints()
        kv_types = self.kv_types()
        settings = BenchSettings(n_predict=self.n_predict.value())
        wanted = list(categories) if categories is not None else None
        cancel = self.cancel_token = LinkedCancel()
        relay = self._relay
        history = self.history
        job = _tune_job(plan, info, machine, constraints, kv_types, settings, wanted, cancel,
                        relay, history, self.state.speed_inputs)  # fmt: skip
        self.outcome = None
        self.applied = None
        self.live_rows = {}
        self.table.setRowCount(0)
        self.summary.setText("")
        self.note.show_text(None)
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.progress_label.setText("probing the engine and launching the starting plan…")
        self._started_at = time.monotonic()
        self.tasks.run(job, self._on_finished, self._on_failed, key=TUNE_KEY)
        self.show_state()
        return True

    def cancel(self) -> None:
        """Stop after the current request; what was measured is kept and shown."""
        if self.cancel_token is not None:
            self.cancel_token.cancel()
            self.progress_label.setText("cancelling after the current request…")

    def _on_progressed(self, step: TuneProgress) -> None:
        total = step.done + step.left
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(step.done)
        self.progress_label.setText(
            f"{step.done} done, {step.left} left · {_duration(step.elapsed_s)} elapsed · "
            f"~{_duration(step.remaining_s)} to go — {step.stage}: {step.label}"
        )
        if step.row is not None:
            self.live_rows[step.label] = step.row
            self._fill(list(self.live_rows.values()))

    def _on_finished(self, outcome: TuneOutcome) -> None:
        self.cancel_token = None
        self.show_outcome(outcome)
        self.finished.emit(outcome)

    def _on_failed(self, exc: BaseException) -> None:
        self.cancel_token = None
        self.progress.setVisible(False)
        self.progress_label.setText("")
        details = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, MtpStudioError) and exc.hint:
            details += f"\n{exc.hint}"
        self.problem.show_problem(f"The tuner stopped: {error_sentence(exc)}", details)
        self.show_state()

    # -- showing ---------------------------------------------------------------------------------

    def _fill(self, rows: Sequence[dict[str, Any]]) -> None:
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row_cells(row)):
                item = QTableWidgetItem(text)
                if c == len(TABLE_COLUMNS) - 1:
                    item.setToolTip(text)
                self.table.setItem(r, c, item)

    def show_outcome(self, outcome: TuneOutcome) -> None:
        """The whole table (untried candidates too), the best and its gain."""
        self.outcome = outcome
        result = outcome.result
        self.progress.setVisible(False)
        self.progress_label.setText(
            f"{'Cancelled' if result.cancelled else 'Finished'} after "
            f"{_duration(result.seconds)}: {len(result.rows)} candidates, "
            f"{result.skipped_by_memory} skipped by the memory model, "
            f"{result.skipped_by_speed} by the speed model, "
            f"{result.launched} launched (the starting plan included)"
            + (", time budget reached" if result.budget_reached else "")
            + "."
        )
        self._fill([r.to_dict() for r in result.all_rows])
        self.summary.setText(summary_text(result))
        if outcome.history_error is not None:
            why = error_sentence(outcome.history_error)
            self.note.show_text(f"Not stored in the history: {why}", Tone.WARN)
        self.show_state()

    # -- use the best ----------------------------------------------------------------------------

    def use_best(self) -> bool:
        """Write the best candidate's changes into the Plan and say what changed."""
        best = self.outcome.result.best if self.outcome is not None else None
        if best is None:
            self.note.show_text("Nothing was measured, so there is no best plan to use.")
            return False
        if not best.changes:
            self.note.show_text("The starting plan is already the best: nothing to change.")
            return False
        try:
            self.state.update(dict(best.changes))
        except MtpStudioError as exc:
            self.note.show_text(
                f"The plan did not take the best settings: {error_sentence(exc)}", Tone.BAD
            )
            return False
        self.applied = describe_changes(best.changes)
        self.note.show_text(
            f"Plan changed to the best candidate ({best.label}): {self.applied}. Start the "
            "server again to use it.",
            Tone.GOOD,
        )
        self.show_state()
        return True


def summary_text(result: TuneResult) -> str:
    """``Best: dmax=2 (12.40 tok/s over 4 categories), +8.5% over the starting plan``."""
    best: TuneRow | None = result.best
    if best is None:
        text = "No plan was measured: nothing to recommend."
    else:
        run = best.full or best.last
        evidence = ""
        if run is not None and run.tok_s is not None:
            evidence = f" ({run.tok_s:.2f} tok/s over {len(run.categories)} categories)"
        text = f"Best: {best.label}{evidence}"
        if result.gain is not None:
            text += f", {result.gain * 100:+.1f}% over the starting plan ({result.gain_basis})"
        text += "."
    if result.note:
        text += f" {result.note[:1].upper()}{result.note[1:]}."
    return text


def _tune_job(
    plan: Plan,
    info: ModelInfo,
    machine: MachineFacts,
    constraints: TuneConstraints,
    kv_types: tuple[CacheType, ...],
    settings: BenchSettings,
    categories: list[str] | None,
    cancel: LinkedCancel,
    relay: _ProgressRelay,
    history: BenchHistory,
    speed: SpeedInputs,
) -> Callable[[CancelToken], TuneOutcome]:
    """The task: the tune use case (probe, resolve, search, store), no widgets."""

    def job(token: CancelToken) -> TuneOutcome:
        cancel.task = token
        setup = tune_setup(plan, model=info, machine=machine, kv_types=kv_types, speed=speed)
        return run_tuning(setup, prompts_for(categories), constraints=constraints,
                          settings=settings, cancel=cancel, progress=relay.progressed.emit,
                          history=history)  # fmt: skip

    return job
