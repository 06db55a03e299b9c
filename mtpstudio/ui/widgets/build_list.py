"""The Engine page's list of builds: one card per build (its title, where it is, its badges),
painted from ``core.usecases.engine_controls.build_card``."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.planner.resolve import BuildChoice
from mtpstudio.core.usecases.engine_controls import build_card
from mtpstudio.ui.widgets.common import Badge, Tone


class BuildList(QListWidget):
    """The builds a plan can run on, one selectable card each."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.choices: list[BuildChoice] = []
        self._badged_for: tuple[str, bool] | None = None  # the model the MTP badges speak of
        self.setSpacing(2)
        self.setSelectionMode(QListWidget.SelectionMode.SingleSelection)
        self.setStyleSheet(
            "QListWidget::item:selected { background: #dbeafe; border: 1px solid #3b82f6; "
            "border-radius: 4px; }"
        )

    def fill(self, choices: Sequence[BuildChoice], model: ModelInfo | None) -> None:
        """The cards of ``choices`` (rebuilt only when the builds or the model changed)."""
        badged = (model.architecture, model.has_mtp) if model is not None else None
        if list(choices) == self.choices and badged == self._badged_for:
            return
        self.choices = list(choices)
        self._badged_for = badged
        self.clear()
        for choice in choices:
            item = QListWidgetItem(self)
            widget = self._card(choice, model)
            item.setSizeHint(widget.sizeHint())
            self.setItemWidget(item, widget)
        rows = sum(self.sizeHintForRow(i) + 6 for i in range(len(choices)))
        self.setFixedHeight(min(max(rows, 60), 220))

    def select(self, row: int) -> None:
        if self.currentRow() != row:
            self.setCurrentRow(row)

    def _card(self, choice: BuildChoice, model: ModelInfo | None) -> QWidget:
        card = build_card(choice, model)
        box = QWidget(self)
        layout = QVBoxLayout(box)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        where = QLabel(card.where, box)
        where.setStyleSheet("color: #6b7280;")
        badges = QHBoxLayout()
        badges.setSpacing(4)
        for badge in card.badges:
            badges.addWidget(Badge(badge.text, Tone(badge.tone), badge.tip, box))
        badges.addStretch()
        layout.addWidget(QLabel(card.title, box))
        layout.addWidget(where)
        layout.addLayout(badges)
        return box
