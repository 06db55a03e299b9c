"""The Memory tab of the Launch page: the planned memory next to what the engine logged."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.memory.measured import Reconciliation
from mtpstudio.core.usecases.prestart import load_mark
from mtpstudio.ui.formatting import signed_mib

MEMORY_COLUMNS = ("Segment", "Device", "Predicted MiB", "Logged MiB", "Difference")


class MemoryTab(QWidget):
    """One row per segment and device: predicted, logged, difference; then the totals."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.memory_label = QLabel(
            "Start the server to compare the planned memory with what the engine reports.", self
        )
        self.memory_label.setWordWrap(True)
        self.memory = QTableWidget(0, len(MEMORY_COLUMNS), self)
        self.memory.setHorizontalHeaderLabels(list(MEMORY_COLUMNS))
        self.memory.verticalHeader().setVisible(False)
        self.memory.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.memory.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.unit_label = QLabel(self)  # the installed unit's own comparison after its load
        self.unit_label.setWordWrap(True)
        self.unit_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.unit_label.setVisible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.memory_label)
        layout.addWidget(self.memory, 1)
        layout.addWidget(self.unit_label)

    def show_unit_load(self, service: str, lines: list[str]) -> None:
        """What the installed unit ``service`` wrote to its journal after its last load (the
        line's own prefix dropped); hidden when there is nothing."""
        prefix = load_mark(f"{service}.service") + " "
        shown = [line.removeprefix(prefix) for line in lines]
        self.unit_label.setText(
            f"The installed service {service}, after its last start (from its journal):\n"
            + "\n".join(f"• {line}" for line in shown)
        )
        self.unit_label.setVisible(bool(lines))

    def clear(self) -> None:
        self.memory.setRowCount(0)

    def show_computing(self) -> None:
        self.memory_label.setText("Computing the prediction for this machine…")

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
            cells = [segment, device, f"{predicted:,.2f}", f"{actual:,.2f}", signed_mib(delta)]
            for j, text_cell in enumerate(cells):
                item = QTableWidgetItem(text_cell)
                if j >= 2:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.memory.setItem(i, j, item)
