"""A read-only box for a command line that breaks lines only between argv words."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from PySide6.QtGui import QFont, QFontMetricsF, QResizeEvent
from PySide6.QtWidgets import QPlainTextEdit, QStyle, QWidget

CONTINUATION = " \\"
INDENT = "    "


def wrap_argv(argv: Sequence[str], fits: int) -> list[str]:
    """Lines of the quoted command, each at most ``fits`` characters where a word allows.

    Lines break only between argv words (a flag and its value stay together when they fit),
    and every line but the last ends in `` \\``, so the lines pasted into a shell are still
    one command. A single word longer than a line is kept whole.
    """
    words = [shlex.quote(str(w)) for w in argv]
    groups: list[str] = []
    for word in words:  # keep "--flag value" together
        last = groups[-1] if groups else ""
        if last.startswith("-") and " " not in last and not word.startswith("-"):
            groups[-1] += " " + word
        else:
            groups.append(word)
    lines: list[str] = []
    current = ""
    for group in groups:
        prefix = INDENT if lines else ""
        candidate = f"{current} {group}" if current else prefix + group
        if current and len(candidate) + len(CONTINUATION) > fits:
            lines.append(current)
            current = INDENT + group
        else:
            current = candidate
    if current:
        lines.append(current)
    return [line + CONTINUATION for line in lines[:-1]] + lines[-1:]


class CommandBox(QPlainTextEdit):
    """Shows ``argv`` wrapped at word boundaries for the box's width (never inside a flag).

    The wrap width follows the box's own width only, never its scroll bars: the room of a
    vertical scroll bar is always kept free and a line is measured with the font's exact
    advance, so showing or hiding a scroll bar cannot change the wrap (which would show or hide
    a scroll bar again, for ever).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.setFont(mono)
        self._argv: tuple[str, ...] | None = None
        self._message = ""
        self._wrapped: tuple[tuple[str, ...], int] | None = None  # what the text shows now

    def set_argv(self, argv: Sequence[str] | None) -> None:
        self._argv = tuple(argv) if argv is not None else None
        self._message = ""
        self._relayout()

    def set_message(self, text: str) -> None:
        """Show a sentence instead of a command (it wraps like prose)."""
        self._argv = None
        self._wrapped = None
        self._message = text
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setPlainText(text)

    def command_line(self) -> str:
        """The command on one line (what Copy puts on the clipboard)."""
        return shlex.join(self._argv) if self._argv is not None else self._message

    def columns(self) -> int:
        """How many characters fit on one line of the box, with a vertical scroll bar shown."""
        scroll_bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        margin = self.document().documentMargin()
        cursor = max(1, self.cursorWidth())
        width = self.contentsRect().width() - scroll_bar - 2 * margin - cursor
        advance = QFontMetricsF(self.font()).horizontalAdvance("M") or 1.0
        return max(20, int(width // advance))

    def _relayout(self) -> None:
        if self._argv is None:
            self._wrapped = None
            if not self._message:
                self.setPlainText("")
            return
        columns = self.columns()
        if self._wrapped == (self._argv, columns):
            return  # a scroll bar came or went: the width of the box, and so the wrap, did not
        self._wrapped = (self._argv, columns)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        text = "\n".join(wrap_argv(self._argv, columns))
        if text != self.toPlainText():
            self.setPlainText(text)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._relayout()
