"""A spin box that reads what the command line reads: ``128k``, ``32 k``, ``1e6`` tokens,
``1.5G`` MiB; typing a size never turns into another number behind the user's back."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractSpinBox, QSpinBox, QWidget

from mtpstudio.core.errors import PlanError
from mtpstudio.core.usecases.words import parse_mib, parse_token_count


def _plain(text: str) -> int:
    value = int(text.replace(",", "").replace("_", "").strip())
    return value


PARSERS: dict[str, Callable[[str], int]] = {
    "tokens": parse_token_count,
    "mib": parse_mib,
    "count": _plain,
}


class NumberBox(QSpinBox):
    """``QSpinBox`` whose text is parsed like the CLI's option of the same kind.

    ``kind``: ``tokens`` (k = 1024, m = 1024²), ``mib`` (G = 1024 MiB) or ``count``. While the
    text does not parse yet (``128`` on the way to ``128k``) it is intermediate, never
    replaced; a text that never parses falls back to the last value when editing ends.
    """

    def __init__(self, kind: str = "count", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = kind
        self.widest: int | None = None
        self.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToPreviousValue)

    def size_for(self, widest: int) -> None:
        """Be as wide as ``widest`` needs rather than the maximum (a box whose range is far
        wider than the values people type keeps its width; a longer value still fits)."""
        self.widest = widest
        self.updateGeometry()

    def sizeHint(self) -> QSize:
        return self._narrowed(super().sizeHint())

    def minimumSizeHint(self) -> QSize:
        return self._narrowed(super().minimumSizeHint())

    def _narrowed(self, hint: QSize) -> QSize:
        if self.widest is None or self.widest >= self.maximum():
            return hint
        advance = self.fontMetrics().horizontalAdvance

        def width(value: int) -> int:
            return advance(f"{self.prefix()}{self.textFromValue(value)}{self.suffix()} ")

        others = max(width(self.minimum()), advance(self.specialValueText()))
        spare = max(width(self.maximum()), others) - max(width(self.widest), others)
        return QSize(hint.width() - spare, hint.height())

    def parse(self, text: str) -> int | None:
        """The value ``text`` (without prefix, suffix or special text) means, or None."""
        body = text
        if self.suffix() and body.endswith(self.suffix()):
            body = body[: -len(self.suffix())]
        if self.prefix() and body.startswith(self.prefix()):
            body = body[len(self.prefix()) :]
        if self.specialValueText() and text == self.specialValueText():
            return self.minimum()
        try:
            return PARSERS[self.kind](body.strip())
        except (PlanError, ValueError):
            return None

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        value = self.parse(text)
        if value is not None and self.minimum() <= value <= self.maximum():
            return (QValidator.State.Acceptable, text, pos)
        allowed = set("0123456789., _eEkKmMgGiIbB") | set(self.suffix()) | set(self.prefix())
        if self.specialValueText():
            allowed |= set(self.specialValueText())
        if all(ch in allowed for ch in text):
            return (QValidator.State.Intermediate, text, pos)
        return (QValidator.State.Invalid, text, pos)

    def valueFromText(self, text: str) -> int:
        value = self.parse(text)
        return self.value() if value is None else value
