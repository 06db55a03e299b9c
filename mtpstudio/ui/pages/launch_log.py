"""The Server log tab of the Launch page: the live log, its file, and a search over it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QTextCursor, QTextDocument
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QVBoxLayout, QWidget

from mtpstudio.core.usecases.words import visible

LOG_BLOCKS = 5000


class ServerLogTab(QWidget):
    """The server's log as it is written, with "find next" and a count of matching lines."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search the log (Enter: next match)")
        self.search.setClearButtonEnabled(True)
        self.search_label = QLabel(self)
        self.log_path_label = QLabel(self)
        self.log_path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.log_view = QPlainTextEdit(self)
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_BLOCKS)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.log_view.setFont(mono)
        row = QHBoxLayout()
        row.addWidget(self.search, 1)
        row.addWidget(self.search_label)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.log_path_label)
        layout.addWidget(self.log_view, 1)
        self.search.returnPressed.connect(self.find_next)
        self.search.textChanged.connect(self._on_search_changed)

    def clear(self) -> None:
        self.log_view.clear()

    def append(self, lines: list[str]) -> None:
        """New log lines at the end (the match count follows a search in progress)."""
        self.log_view.appendPlainText("\n".join(visible(line, keep_tabs=True) for line in lines))
        if self.search.text():
            self._count_matches()

    def show_path(self, path: Path) -> None:
        self.log_path_label.setText(f"Log file: {path}")

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
