"""The Compare & history tab of the Launch page: tok/s per run over time, and A/B per category."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QComboBox, QGridLayout, QLabel, QWidget

from mtpstudio.core.bench.history import HistoryEntry
from mtpstudio.ui.pages.launch_bench import cell, number
from mtpstudio.ui.widgets.charts import BarChart, LineChart, Series


class CompareTab(QWidget):
    """The stored runs as a line over time, and the latest run next to another one, per category."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runs: tuple[HistoryEntry, ...] = ()
        self.latest: int | None = None
        self.compare_with = QComboBox(self)
        self.compare_with.setToolTip("The stored run to put next to the latest one.")
        self.compare_with.setPlaceholderText("no other stored run yet")
        self.ab_chart = BarChart("A/B: decode speed per category", "tok/s", self)
        self.history_chart = LineChart("History: tokens per second per run", "tok/s", self)
        grid = QGridLayout(self)
        grid.addWidget(QLabel("Compare the latest run with", self), 0, 0)
        grid.addWidget(self.compare_with, 0, 1)
        grid.setColumnStretch(1, 1)
        grid.addWidget(self.ab_chart, 1, 0, 1, 2)
        grid.addWidget(self.history_chart, 2, 0, 1, 2)
        self.compare_with.currentIndexChanged.connect(lambda _: self._draw_ab())

    def show_runs(self, runs: Sequence[HistoryEntry], latest: int | None) -> None:
        """Every stored run over time; ``latest`` (a run id) against the newest other one."""
        self.runs, self.latest = tuple(runs), latest
        tok_s = tuple(number(e.aggregate.get("tok_s")) for e in self.runs)
        dates = [e.created_at[:16].replace("T", " ") for e in self.runs]
        self.history_chart.set_data(dates, [Series("tok/s", tok_s)])
        self.compare_with.blockSignals(True)
        self.compare_with.clear()
        for entry in reversed(self.runs):
            if entry.id == latest:
                continue
            tok = number(entry.aggregate.get("tok_s"))
            text = f"run {entry.id} · {entry.label} · {entry.created_at[:16]} · {cell(tok)} tok/s"
            self.compare_with.addItem(text, entry.id)
        if self.compare_with.count():
            self.compare_with.setCurrentIndex(0)  # the newest other run
        self.compare_with.blockSignals(False)
        self._draw_ab()

    def _draw_ab(self) -> None:
        by_id = {e.id: e for e in self.runs}
        latest = by_id.get(self.latest or -1)
        other = by_id.get(self.compare_with.currentData() or -1)
        if latest is None:
            self.ab_chart.set_data([], [])
            return
        a = {r["category"]: number(r["decode_tok_s"]) for r in latest.rows}
        series = [Series(f"run {latest.id}", tuple(a.values()))]
        labels = list(a)
        if other is not None:
            b = {r["category"]: number(r["decode_tok_s"]) for r in other.rows}
            labels += [c for c in b if c not in a]
            series = [
                Series(f"run {latest.id}", tuple(a.get(c) for c in labels)),
                Series(f"run {other.id}", tuple(b.get(c) for c in labels)),
            ]
        self.ab_chart.set_data(labels, series)
