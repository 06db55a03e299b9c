"""The Launch & benchmark page until its issue lands.

Each says plainly what it will offer and shows only real, read-only information; no control
here pretends to change anything.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.reports import plan_option_lines
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.widgets.common import Notice, Tone


def _bullets(title: str, items: list[str]) -> str:
    rows = "".join(f"<li>{item}</li>" for item in items)
    return f"<p><b>{title}</b></p><ul style='margin-top:0'>{rows}</ul>"


class _LaterPage(PlanPage):
    """A page that lists what it will offer, under a 'not available yet' notice."""

    offers: tuple[str, ...] = ()

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.notice = Notice(self)
        self.notice.show_text(
            "Not available yet: this step arrives in a later release. Nothing on this page "
            "changes your system.",
            Tone.INFO,
        )
        self.offers_label = QLabel(_bullets("This page will offer:", list(self.offers)), self)
        self.offers_label.setWordWrap(True)
        self.offers_label.setTextFormat(Qt.TextFormat.RichText)
        self.body = QVBoxLayout(self)
        self.body.addWidget(self.notice)
        self.body.addWidget(self.offers_label)


class LaunchPage(_LaterPage):
    """Launch & benchmark: the plan's options as a recap, and what will come."""

    slug = "launch"
    offers = (
        "launch the server with a live log and health check",
        "predicted versus actual memory, and a diagnosis when it runs out",
        "the nine-category MTP benchmark: tokens/s and draft acceptance, in a table and charts",
        "A/B comparison across engines and settings, and tuning for the most tokens/s",
    )

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("Launch & benchmark")
        self.setSubTitle("Start the server, check the real allocation, and measure tokens/s.")
        self.body.addWidget(QLabel("<b>The plan</b> (Finish saves it for next time)", self))
        self.recap = QPlainTextEdit(self)
        self.recap.setReadOnly(True)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.recap.setFont(mono)
        self.body.addWidget(self.recap, 1)

    def _refresh(self) -> None:
        plan = self.state.plan
        lines = [f"Model: {plan.model.label}", "", "Options:", *plan_option_lines(plan)]
        self.recap.setPlainText("\n".join(lines))
