"""Small QPainter charts (grouped bars, a line over time): QtCharts is not in PySide6-Essentials.

Both take plain numbers (``None`` for a missing value, drawn as a gap) and redraw on ``set_data``;
painting is proportional to the number of points, so a benchmark streaming into the page stays
cheap to draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

SERIES_COLOURS = ("#2563eb", "#f59e0b", "#10b981", "#ef4444")
AXIS_COLOUR = "#6b7280"
GRID_COLOUR = "#e5e7eb"


@dataclass(frozen=True)
class Series:
    """One named row of values, one per category (or per point in time)."""

    name: str
    values: tuple[float | None, ...]


def nice_max(value: float) -> float:
    """A round axis maximum at or above ``value`` (1, 2, 2.5, 5 × 10^n)."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * magnitude >= value:
            return step * magnitude
    return 10.0 * magnitude


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


class _Chart(QWidget):
    """The frame both charts share: title, y axis with a few grid lines, legend."""

    def __init__(self, title: str, unit: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.labels: tuple[str, ...] = ()
        self.series: tuple[Series, ...] = ()
        self.fixed_max: float | None = None
        self.setMinimumSize(QSize(260, 170))
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def set_data(self, labels: Sequence[str], series: Sequence[Series]) -> None:
        self.labels = tuple(labels)
        self.series = tuple(series)
        self.update()

    def values(self) -> list[float]:
        return [v for s in self.series for v in s.values if v is not None]

    def y_max(self) -> float:
        if self.fixed_max is not None:
            return self.fixed_max
        found = self.values()
        return nice_max(max(found)) if found else 1.0

    def _header(self, metrics: QFontMetrics) -> float:
        """Height of the title and legend lines."""
        return metrics.height() * (2 if len(self.series) > 1 else 1) + 6

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFont(self.font())
        metrics = QFontMetrics(font)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        bold = QFont(font)
        bold.setBold(True)
        painter.setFont(bold)
        painter.setPen(QColor("#111827"))
        painter.drawText(QPointF(4, metrics.ascent() + 2), f"{self.title} ({self.unit})")
        painter.setFont(font)
        self._draw_legend(painter, metrics)
        area = QRectF(0, self._header(metrics), self.width(), self.height())
        area.setBottom(self.height() - 2)
        if not self.values():
            painter.setPen(QColor(AXIS_COLOUR))
            painter.drawText(area, int(Qt.AlignmentFlag.AlignCenter), "no results yet")
        else:
            self._draw(painter, area, self.y_max(), metrics)
        painter.end()

    def _draw_legend(self, painter: QPainter, metrics: QFontMetrics) -> None:
        if len(self.series) < 2:
            return
        x = 4.0
        y = metrics.height() + 4
        for i, s in enumerate(self.series):
            painter.fillRect(QRectF(x, y + 3, 10, 10), QColor(SERIES_COLOURS[i % 4]))
            painter.setPen(QColor("#374151"))
            painter.drawText(QPointF(x + 14, y + metrics.ascent()), s.name)
            x += 24 + metrics.horizontalAdvance(s.name)

    def _draw(self, painter: QPainter, area: QRectF, top: float, metrics: QFontMetrics) -> None:
        raise NotImplementedError


def _value_grid(
    painter: QPainter, plot: QRectF, top: float, metrics: QFontMetrics, *, vertical: bool
) -> None:
    """Five grid lines with their values: along x (vertical lines) or along y."""
    for i in range(5):
        text = _fmt(top * i / 4)
        painter.setPen(QPen(QColor(GRID_COLOUR), 1))
        if vertical:
            x = plot.left() + plot.width() * i / 4
            painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
            painter.setPen(QColor(AXIS_COLOUR))
            painter.drawText(
                QRectF(x - 40, plot.bottom() + 2, 80, metrics.height()),
                int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
                text,
            )
        else:
            y = plot.bottom() - plot.height() * i / 4
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(QColor(AXIS_COLOUR))
            painter.drawText(
                QRectF(0, y - metrics.height() / 2, plot.left() - 4, metrics.height()),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                text,
            )


class BarChart(_Chart):
    """Horizontal grouped bars: one row per label (category names stay readable), one bar
    per series in each row (A/B side by side)."""

    def _draw(self, painter: QPainter, area: QRectF, top: float, metrics: QFontMetrics) -> None:
        widest = max((metrics.horizontalAdvance(label) for label in self.labels), default=0)
        left = min(widest + 8, area.width() * 0.4)
        right_pad = metrics.horizontalAdvance(_fmt(top)) / 2 + 6
        plot = QRectF(
            area.left() + left,
            area.top(),
            max(10.0, area.width() - left - right_pad),
            max(10.0, area.height() - metrics.height() - 4),
        )
        _value_grid(painter, plot, top, metrics, vertical=True)
        n = max(1, len(self.labels))
        group = plot.height() / n
        k = max(1, len(self.series))
        bar = max(1.0, group * 0.8 / k)
        for g, label in enumerate(self.labels):
            y0 = plot.top() + g * group + group * 0.1
            for i, s in enumerate(self.series):
                value = s.values[g] if g < len(s.values) else None
                if value is None:
                    continue
                w = plot.width() * min(value, top) / top
                painter.fillRect(
                    QRectF(plot.left(), y0 + i * bar, w, bar - 1), QColor(SERIES_COLOURS[i % 4])
                )
            painter.setPen(QColor("#374151"))
            shown = metrics.elidedText(label, Qt.TextElideMode.ElideRight, int(left) - 6)
            painter.drawText(
                QRectF(area.left(), plot.top() + g * group, left - 6, group),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                shown,
            )


class LineChart(_Chart):
    """One line per series over evenly spaced points (runs in the order they were made)."""

    def _draw(self, painter: QPainter, area: QRectF, top: float, metrics: QFontMetrics) -> None:
        left = metrics.horizontalAdvance(_fmt(top)) + 10
        plot = QRectF(
            area.left() + left,
            area.top() + 4,
            max(10.0, area.width() - left - 12),
            max(10.0, area.height() - metrics.height() - 8),
        )
        _value_grid(painter, plot, top, metrics, vertical=False)
        n = max((len(s.values) for s in self.series), default=0)
        step = plot.width() / max(1, n - 1) if n > 1 else 0.0

        def x_of(j: int) -> float:
            return plot.left() + (j * step if n > 1 else plot.width() / 2)

        for i, s in enumerate(self.series):
            colour = QColor(SERIES_COLOURS[i % 4])
            previous: QPointF | None = None
            for j, value in enumerate(s.values):
                if value is None:
                    previous = None
                    continue
                point = QPointF(x_of(j), plot.bottom() - plot.height() * min(value, top) / top)
                painter.setPen(QPen(colour, 2))
                if previous is not None:
                    painter.drawLine(previous, point)
                painter.setBrush(colour)
                painter.drawEllipse(point, 3, 3)
                previous = point
        painter.setPen(QColor(AXIS_COLOUR))
        if self.labels:
            ends = {0, len(self.labels) - 1}
            for j in sorted(ends):
                flag = Qt.AlignmentFlag.AlignLeft if j == 0 else Qt.AlignmentFlag.AlignRight
                box = QRectF(
                    x_of(j) - 120 if j else x_of(j), plot.bottom() + 2, 120, metrics.height()
                )
                painter.drawText(box, int(flag | Qt.AlignmentFlag.AlignTop), self.labels[j])
