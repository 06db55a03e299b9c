"""Small shared widgets: a busy indicator, capability badges, notices."""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget


class BusyIndicator(QWidget):
    """An indeterminate progress bar with a sentence; hidden while nothing is running."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 0)  # indeterminate
        self.bar.setTextVisible(False)
        self.bar.setMaximumWidth(160)
        self.bar.setMaximumHeight(14)
        self.label = QLabel(text, self)
        layout.addWidget(self.bar)
        layout.addWidget(self.label, 1)
        self.setVisible(False)

    def set_busy(self, busy: bool, text: str | None = None) -> None:
        if text is not None:
            self.label.setText(text)
        self.setVisible(busy)

    @property
    def busy(self) -> bool:
        return not self.isHidden()


class Tone(StrEnum):
    """The colour of a notice or badge."""

    GOOD = "good"
    INFO = "info"
    WARN = "warn"
    BAD = "bad"
    OFF = "off"


_BADGE_COLORS = MappingProxyType(
    {  # background, text, border
        Tone.GOOD: ("#dcfce7", "#166534", "#86efac"),
        Tone.INFO: ("#dbeafe", "#1e40af", "#93c5fd"),
        Tone.WARN: ("#fef3c7", "#92400e", "#fcd34d"),
        Tone.BAD: ("#fee2e2", "#991b1b", "#fca5a5"),
        Tone.OFF: ("#f3f4f6", "#6b7280", "#d1d5db"),
    }
)


class Badge(QLabel):
    """A small rounded label saying what a build can do (green) or cannot (grey)."""

    def __init__(self, text: str, tone: Tone, tooltip: str = "", parent: QWidget | None = None):
        super().__init__(text, parent)
        self.tone = tone
        background, foreground, border = _BADGE_COLORS[tone]
        self.setStyleSheet(
            f"QLabel {{ background: {background}; color: {foreground}; border: 1px solid "
            f"{border}; border-radius: 8px; padding: 1px 7px; }}"
        )
        if tooltip:
            self.setToolTip(tooltip)


class Notice(QLabel):
    """A wrapping sentence in a tinted frame (info, warning or error); hidden when empty.

    Its room (``reserve_lines`` lines) stays in the layout while it is hidden, so a banner that
    comes and goes never moves the controls below it under the pointer.
    """

    PADDING_Y = 5

    def __init__(self, parent: QWidget | None = None, reserve_lines: int = 2) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tone = Tone.INFO
        policy = self.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.setSizePolicy(policy)
        self.reserve_lines = reserve_lines
        self.setMinimumHeight(self.reserved_height())
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.setVisible(False)

    def reserved_height(self) -> int:
        """The height kept for the notice: its lines, padding and border."""
        return self.fontMetrics().lineSpacing() * self.reserve_lines + 2 * self.PADDING_Y + 2

    def show_text(self, text: str | None, tone: Tone = Tone.INFO) -> None:
        self.tone = tone
        if not text:
            self.clear()
            self.setVisible(False)
            return
        background, foreground, border = _BADGE_COLORS[tone]
        self.setStyleSheet(
            f"QLabel {{ background: {background}; color: {foreground}; border: 1px solid "
            f"{border}; border-radius: 4px; padding: {self.PADDING_Y}px 8px; }}"
        )
        self.setText(text)
        self.setVisible(True)
