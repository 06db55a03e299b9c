"""The Benchmark tab of the Launch page: settings, progress, the table, charts and findings.

The tab shows runs; the page runs them (through the benchmark use case) and stores them.
A remedy button emits ``remedy_chosen(label, changes)``; the page puts it into the Plan.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
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

from mtpstudio.core.bench.doctor import Finding
from mtpstudio.core.bench.history import HistoryEntry
from mtpstudio.core.bench.results import BenchReport
from mtpstudio.core.bench.target import BenchProgress
from mtpstudio.ui.widgets.charts import BarChart, Series
from mtpstudio.ui.widgets.common import Notice, Tone

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
EXPORT_FORMATS = {
    "md": "Markdown (*.md)",
    "csv": "CSV, one row per category (*.csv)",
    "json": "JSON, everything (*.json)",
}


def cell(value: float | int | None, fmt: str = "{:.1f}") -> str:
    if value is None:
        return "–"
    return fmt.format(value)


def number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def estimate_words(estimate: object) -> str | None:
    """``decoding 45.1 tok/s measured, 47.3 estimated (+4.9 %)`` from a run's stored estimate
    (None when the run has none, or it is out of shape)."""
    if not isinstance(estimate, dict):
        return None
    est, got, err = (number(estimate.get(k)) for k in ("decode_tok_s", "measured_tok_s", "error"))
    if est is None or got is None:
        return None
    error = f" ({err * 100:+.1f} %)" if err is not None else ""
    return f"decoding {got:,.1f} tok/s measured, {est:,.1f} estimated{error}"


def _clock(seconds: float) -> str:
    """``42 s`` or ``4 min 05 s``."""
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


class BenchTab(QWidget):
    """Settings, Run/Cancel/Export, progress, summary, findings, the table and the charts."""

    remedy_chosen = Signal(str, object)  # label, the Plan changes (dict)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.n_predict = QSpinBox(self)
        self.n_predict.setRange(1, 4096)
        self.n_predict.setValue(DEFAULT_N_PREDICT)
        self.n_predict.setToolTip("Tokens generated per request (the community's runs use 192).")
        self.repeats = QSpinBox(self)
        self.repeats.setRange(1, 20)
        self.repeats.setValue(1)
        self.repeats.setToolTip("Requests per category; the table shows medians.")
        self.bench_button = QPushButton("Run benchmark", self)
        self.cancel_button = QPushButton("Cancel", self)
        self.export_button = QPushButton("Export…", self)
        self.export_format = QComboBox(self)
        for fmt in EXPORT_FORMATS:
            self.export_format.addItem(fmt, fmt)
        self._ticker = QTimer(self)  # the elapsed time while a run waits
        self._ticker.setInterval(1000)
        self._ticker.timeout.connect(self._show_waiting)
        self._step: BenchProgress | None = None
        self._started = self._phase_started = 0.0
        self.progress = QProgressBar(self)
        self.progress.setFormat("%v / %m requests")
        self.progress_label = QLabel(self)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Tokens per request", self))
        controls.addWidget(self.n_predict)
        controls.addWidget(QLabel("Repeats", self))
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
            self,
        )
        self.summary.setWordWrap(True)
        self.findings = QVBoxLayout()
        self.finding_rows: list[QWidget] = []
        self.finding_notices: list[Notice] = []
        self.remedy_buttons: list[QPushButton] = []
        self.results = QTableWidget(0, len(RESULT_COLUMNS), self)
        self.results.setHorizontalHeaderLabels(list(RESULT_COLUMNS))
        self.results.verticalHeader().setVisible(False)
        self.results.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.results.horizontalHeader().setStretchLastSection(True)
        self.results.verticalHeader().setDefaultSectionSize(22)
        self.results.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.tok_chart = BarChart("Decode speed per category", "tok/s", self)
        self.accept_chart = BarChart("Draft acceptance per category", "%", self)
        self.accept_chart.fixed_max = 100.0
        charts = QWidget(self)
        charts.setMaximumWidth(300)
        column = QVBoxLayout(charts)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.tok_chart)
        column.addWidget(self.accept_chart)
        lower = QHBoxLayout()
        lower.addWidget(self.results, 1)
        lower.addWidget(charts)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addLayout(progress_row)
        layout.addWidget(self.summary)
        layout.addLayout(self.findings)
        layout.addLayout(lower, 1)

    # -- progress ----------------------------------------------------------------------------------

    def start_progress(self, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self._step = None
        self._started = time.monotonic()
        self._phase_started = self._started
        self._ticker.start()
        self._show_waiting()

    def show_progress(self, step: BenchProgress) -> None:
        if step.total:
            self.progress.setRange(0, step.total)
        self.progress.setValue(step.done)
        if self._step is None or (step.phase, step.category) != (
            self._step.phase,
            self._step.category,
        ):
            self._phase_started = time.monotonic()
        self._step = step
        self._show_waiting()

    def stop_progress(self) -> None:
        """The run ended (finished, cancelled or failed): the clock stops."""
        self._ticker.stop()

    def _show_waiting(self) -> None:
        """What the run waits for and for how long (ticks every second)."""
        now = time.monotonic()
        total = _clock(now - self._started)
        step = self._step
        if step is None or step.phase == "warmup":
            what = (
                "warm-up: waiting for the server's first answer (it reads the weights into "
                "memory; on a slow disk this takes minutes)"
            )
        else:
            what = f"{step.phase}: {step.category}, waiting for its answer"
        self.progress_label.setText(
            f"{what} · {_clock(now - self._phase_started)} ({total} in all)"
        )

    # -- runs --------------------------------------------------------------------------------------

    def show_report(
        self,
        report: BenchReport,
        findings: Sequence[Finding],
        run_id: int | None,
        history_error: str | None,
    ) -> None:
        """Fill the table, the summary, the findings and the charts from a run."""
        self._fill_rows([c.to_dict() for c in report.categories])
        accept = report.aggregate_accept_rate
        parts = [
            f"<b>{cell(report.tok_s)} tok/s</b> over {report.n_requests} requests "
            f"({report.total_predicted} tokens)",
            "acceptance " + ("–" if accept is None else f"{accept * 100:.0f} %"),
        ]
        if (estimate := estimate_words(report.speed_estimate)) is not None:
            parts.append(estimate)
        if report.cancelled:
            parts.append("cancelled: the finished categories are kept")
        elif report.error:
            parts.append(f"stopped early: {report.error}")
        if history_error:
            parts.append(f"not stored: {history_error}")
        elif run_id is not None:
            parts.append(f"stored as run {run_id}")
        self.summary.setText(" · ".join(parts))
        self.progress_label.setText("done" if not report.error else "stopped")
        self._show_findings(findings)

    def show_stored(self, entry: HistoryEntry) -> None:
        """A run from the history (the page opens on the latest one)."""
        self._fill_rows(entry.rows)
        agg = entry.aggregate
        accept = number(agg.get("aggregate_accept_rate"))
        estimate = estimate_words(entry.report.get("speed_estimate"))
        self.summary.setText(
            f"Last stored run {entry.id} ({entry.label}, {entry.created_at[:16].replace('T', ' ')}"
            f"): <b>{cell(number(agg.get('tok_s')))} tok/s</b> over {agg.get('n_requests', 0)} "
            "requests · acceptance "
            + ("–" if accept is None else f"{accept * 100:.0f} %")
            + (f" · {estimate}" if estimate else "")
        )
        warning = entry.report.get("drafting_warning")
        self._show_findings([Finding("drafting-off", str(warning))] if warning else [])

    def _fill_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Table and per-category charts from rows shaped like ``CategoryResult.to_dict``."""
        self.results.setRowCount(len(rows))
        acceptance = [None if (a := number(r.get("acceptance"))) is None else a * 100 for r in rows]
        for i, r in enumerate(rows):
            cells = [
                str(r["category"]),
                str(r.get("predicted", "")),
                cell(number(r.get("decode_tok_s"))),
                cell(number(r.get("prefill_tok_s"))),
                cell(number(r.get("ttft_ms")), "{:.0f}"),
                str(r.get("draft", "")),
                str(r.get("accepted", "")),
                cell(acceptance[i], "{:.0f} %"),
            ]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.results.setItem(i, j, item)
        labels = [str(r["category"]) for r in rows]
        speeds = tuple(number(r.get("decode_tok_s")) for r in rows)
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
                button.clicked.connect(
                    lambda _=False, t=label, c=changes: self.remedy_chosen.emit(t, c)
                )
                line.addWidget(button)
                self.remedy_buttons.append(button)
            self.findings.addWidget(row)
            self.finding_rows.append(row)
