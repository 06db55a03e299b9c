"""Long actions on a page: progress with Cancel while running, then the outcome in one sentence
with the details (output, hint, error type) behind a "Details" button.

Threading: ``ActionPanel.run`` is called on the GUI thread and starts the work through the
page's ``TaskManager``; the work itself never touches widgets. Its result or error comes back
on the GUI thread, where the panel shows it and calls the page's callback. Cancel stops
waiting for the work (``TaskHandle.cancel``): its result is dropped, nothing is half-applied
on the page, and the panel says so.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.usecases.words import visible
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.tasks import CancelToken, TaskHandle, TaskManager
from mtpstudio.ui.widgets.common import Notice, Tone


def error_details(exc: BaseException) -> str:
    """What 'Details' shows for an error: the type, the message, the hint, and for a bug
    (not one of mtpstudio's own errors) the traceback."""
    lines = [f"{type(exc).__name__}: {exc}"]
    if isinstance(exc, MtpStudioError):
        if exc.hint:
            lines.append(f"What to do: {exc.hint}")
    else:
        lines += ["", *traceback.format_exception(exc)]
    return "\n".join(visible(line.rstrip("\n"), keep_tabs=True) for line in lines)


class OutcomeView(QWidget):
    """One sentence (good, warning or error) and its details, folded away until asked for."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.notice = Notice(self)
        self.toggle = QToolButton(self)
        self.toggle.setText("Details")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.details = QPlainTextEdit(self)
        self.details.setReadOnly(True)
        self.details.setMaximumHeight(140)
        self.details.setVisible(False)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.notice, 1)
        row.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.details)
        self.toggle.toggled.connect(self._on_toggled)
        self.clear()

    @property
    def sentence(self) -> str:
        return self.notice.text() if self.notice.isVisibleTo(self) else ""

    @property
    def tone(self) -> Tone:
        return self.notice.tone

    def show_outcome(self, sentence: str, tone: Tone, details: str = "") -> None:
        self.notice.show_text(sentence, tone)
        self.details.setPlainText(details)
        self.toggle.setVisible(bool(details))
        self.toggle.setChecked(False)
        self.setVisible(True)

    def show_error(self, exc: BaseException, prefix: str = "") -> None:
        sentence = error_sentence(exc)
        self.show_outcome(f"{prefix}{sentence}", Tone.BAD, error_details(exc))

    def clear(self) -> None:
        self.notice.show_text(None)
        self.details.clear()
        self.toggle.setChecked(False)
        self.toggle.setVisible(False)
        self.setVisible(False)

    def _on_toggled(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)


class ActionPanel(QWidget):
    """Progress + Cancel while one action runs, then its outcome.

    ``idle`` is emitted when the action ends (done, failed or cancelled), before the page's
    callback runs, so pages re-enable their buttons in one place.
    """

    idle = Signal()

    def __init__(self, tasks: TaskManager, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tasks = tasks
        self.handle: TaskHandle | None = None
        self.what = ""
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 0)
        self.bar.setTextVisible(False)
        self.bar.setMaximumWidth(160)
        self.bar.setMaximumHeight(14)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel", self)
        self.progress = QWidget(self)
        row = QHBoxLayout(self.progress)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.bar)
        row.addWidget(self.label, 1)
        row.addWidget(self.cancel_button)
        self.progress.setVisible(False)
        self.outcome = OutcomeView(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.progress)
        layout.addWidget(self.outcome)
        self.cancel_button.clicked.connect(self.cancel)

    @property
    def running(self) -> bool:
        return self.handle is not None and self.handle.running

    def run(
        self,
        what: str,
        work: Callable[[CancelToken], Any],
        on_done: Callable[[Any], None],
        *,
        key: str,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> TaskHandle:
        """Start ``work`` in the background, saying ``what`` ("Installing …") meanwhile."""
        self.what = what
        self.outcome.clear()
        self.label.setText(what)
        self.progress.setVisible(True)

        def done(result: Any) -> None:
            self._finish()
            on_done(result)

        def failed(exc: BaseException) -> None:
            self._finish()
            self.outcome.show_error(exc)
            if on_error is not None:
                on_error(exc)

        self.handle = self.tasks.run(work, done, failed, key=key)
        return self.handle

    def cancel(self) -> None:
        """Stop waiting for the running action; its result will be dropped."""
        if self.handle is None or not self.handle.running:
            return
        self.handle.cancel()
        self._finish()
        self.outcome.show_outcome(
            f"Cancelled: {self.what.rstrip('…. ').lower()} was stopped; nothing on this page "
            "changed.",
            Tone.WARN,
            "A step already handed to the privileged helper still completes or rolls back "
            "as a whole (its writes are atomic); Refresh shows what is installed.",
        )

    def _finish(self) -> None:
        self.progress.setVisible(False)
        self.handle = None
        self.idle.emit()
