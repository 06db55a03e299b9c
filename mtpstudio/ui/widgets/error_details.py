"""A problem said in one sentence, with the details (log lines, evidence) behind a toggle."""

from __future__ import annotations

from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from mtpstudio.ui.widgets.common import Notice, Tone


class DetailsNotice(QWidget):
    """A ``Notice`` sentence plus a "Details" button that shows the text behind it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.notice = Notice(self)
        self.toggle = QPushButton("Details", self)
        self.toggle.setCheckable(True)
        self.toggle.setVisible(False)
        self.details = QPlainTextEdit(self)
        self.details.setReadOnly(True)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.details.setFont(mono)
        self.details.setMaximumHeight(140)
        self.details.setVisible(False)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.notice, 1)
        row.addWidget(self.toggle)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.details)
        self.toggle.toggled.connect(self._on_toggled)
        self.setVisible(False)

    @property
    def sentence(self) -> str:
        """The sentence shown now ('' when hidden)."""
        return "" if self.isHidden() else self.notice.text()

    def show_problem(self, sentence: str | None, details: str = "", tone: Tone = Tone.BAD) -> None:
        """Show ``sentence`` (None hides everything); ``details`` go behind the toggle."""
        self.notice.show_text(sentence, tone)
        self.details.setPlainText(details)
        self.toggle.setChecked(False)
        self.toggle.setVisible(bool(sentence and details))
        self.details.setVisible(False)
        self.setVisible(bool(sentence))

    def _on_toggled(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.toggle.setText("Hide details" if shown else "Details")
