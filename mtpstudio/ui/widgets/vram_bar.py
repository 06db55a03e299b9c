"""The stacked memory bar: one horizontal bar per device (and host RAM), painted with QPainter.

Each row is a ``BarRow`` of ``BarSegment``s (bytes per kind); ``layout_row`` turns a row into
pixel spans (pure arithmetic, tested directly). The scale of a row is its total, or what is
used when that is more: the part beyond the total is painted red and a marker shows where the
total ends. The safety margin is hatched; free memory is a light, outlined span. Hovering a
segment shows its exact size in MiB and bytes and how sure the figure is (the plan report's
trust levels); the legend names that level beside each kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetrics,
    QHelpEvent,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPen,
)
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from mtpstudio.core.memory.budget_types import Budget, DeviceBudget, HostBudget
from mtpstudio.core.units import MIB
from mtpstudio.core.usecases.budget_words import mapped_in_ram
from mtpstudio.core.usecases.plan_text import budget_trust, combined_trust, trust_meaning


@dataclass(frozen=True)
class SegmentStyle:
    """How one kind of segment is named and drawn."""

    label: str
    color: str
    hatched: bool = False
    description: str = ""


SEGMENT_STYLES = MappingProxyType(
    {
        "weights": SegmentStyle("weights", "#4e79a7", description="Model weights on the device."),
        "kv_cache": SegmentStyle(
            "KV cache", "#f28e2b", description="Attention K/V cache, sized by the context."
        ),
        "recurrent_state": SegmentStyle(
            "recurrent state",
            "#59a14f",
            description="Recurrent (SSM) state: slots × (1 + draft depth) copies under MTP.",
        ),
        "mtp_draft": SegmentStyle(
            "MTP draft",
            "#b07aa1",
            description="The MTP draft context: its own KV cache and compute buffer.",
        ),
        "draft_weights": SegmentStyle(
            "draft model", "#6a3d9a", description="The draft model's weights (-ngld layers)."
        ),
        "draft_kv_cache": SegmentStyle(
            "draft KV cache",
            "#cab2d6",
            description="The draft model's own K/V cache (draft cache types, main context).",
        ),
        "draft_compute": SegmentStyle(
            "draft compute", "#17becf", description="The draft model's compute buffer."
        ),
        "moe_cache": SegmentStyle(
            "MoE cache",
            "#86bcb6",
            description="The GPU cache of the experts kept in RAM (--moe-cache-mib): the "
            "experts the last tokens used, read from the card instead of the CPU.",
        ),
        "compute": SegmentStyle(
            "compute", "#76b7b2", description="Compute and output buffers of the main context."
        ),
        "driver": SegmentStyle(
            "driver context",
            "#9c755f",
            description="The engine's own GPU runtime context (CUDA on NVIDIA, ROCm/HIP on AMD), "
            "outside its buffers.",
        ),
        "runtime_growth": SegmentStyle(
            "runtime growth",
            "#d4a373",
            description="What the engine process adds during its first prompts (kernels, "
            "memory pool, cuBLAS, CUDA graphs): not in its load log, and it cannot cap it.",
        ),
        "desktop": SegmentStyle(
            "desktop", "#edc948", description="The desktop (compositor, shell) on this GPU."
        ),
        "other_processes": SegmentStyle(
            "other processes", "#8c8c8c", description="Other programs holding memory here."
        ),
        "margin": SegmentStyle(
            "margin",
            "#e15759",
            hatched=True,
            description="Safety margin kept free (with the engine's fit: what is left of it "
            "once the process has grown after the load).",
        ),
        "host_other": SegmentStyle(
            "other programs", "#bab0ac", description="RAM in use by everything else now."
        ),
        "host_weights": SegmentStyle(
            "weights in RAM",
            "#1f4e79",
            description="Weights read into (or locked in) RAM: must fit in available RAM.",
        ),
        "host_buffers": SegmentStyle(
            "CPU buffers",
            "#ff9da7",
            description="KV cache, state, compute and output buffers kept in RAM.",
        ),
        "host_mapped": SegmentStyle(
            "mapped weights kept in RAM",
            "#a0cbe8",
            hatched=True,
            description="The CPU's weights (experts moved to the CPU, token embeddings …), "
            "memory-mapped from the file: they stay in RAM while the server runs. The GPU's "
            "weights also pass through the page cache at the load; the kernel drops those.",
        ),
        "free": SegmentStyle("free", "#f3f4f6", description="Not used."),
        "overflow": SegmentStyle(
            "beyond the total", "#d62728", description="What does not fit: it must go."
        ),
    }
)

LEGEND_ORDER = tuple(SEGMENT_STYLES)
DRAFT_SEGMENT_KEYS = ("draft_weights", "draft_kv_cache", "draft_compute")  # the budget's keys


@dataclass(frozen=True)
class BarSegment:
    """``n_bytes`` of one kind (a key of SEGMENT_STYLES); ``detail`` adds tooltip lines;
    ``trust`` is how sure the figure is (``exact``, ``source`` …; empty: not said)."""

    key: str
    n_bytes: int
    detail: str = ""
    trust: str = ""


@dataclass(frozen=True)
class BarRow:
    """One bar: a title, the size of the memory (None: unknown) and its segments in order."""

    title: str
    total_bytes: int | None
    segments: tuple[BarSegment, ...]

    @property
    def used_bytes(self) -> int:
        return sum(max(0, s.n_bytes) for s in self.segments)

    @property
    def free_bytes(self) -> int | None:
        return None if self.total_bytes is None else self.total_bytes - self.used_bytes

    @property
    def overflow_bytes(self) -> int:
        free = self.free_bytes
        return -free if free is not None and free < 0 else 0


@dataclass(frozen=True)
class SegmentSpan:
    """Where a segment lies on the bar, in pixels, and its bytes."""

    key: str
    x0: float
    x1: float
    n_bytes: int

    @property
    def width(self) -> float:
        return self.x1 - self.x0


def layout_row(row: BarRow, left: float, width: float) -> list[SegmentSpan]:
    """Pixel spans of a row on a bar from ``left`` that is ``width`` pixels wide.

    The scale is ``max(total, used)``. Segments come in order; then ``free`` (when something is
    left) or ``overflow`` (from the total's position to the end of what is used).
    """
    used = row.used_bytes
    total = row.total_bytes if row.total_bytes is not None else used
    scale = max(total, used, 1)

    def x(n_bytes: int) -> float:
        return left + width * n_bytes / scale

    spans: list[SegmentSpan] = []
    cursor = 0
    for seg in row.segments:
        if seg.n_bytes <= 0:
            continue
        spans.append(SegmentSpan(seg.key, x(cursor), x(cursor + seg.n_bytes), seg.n_bytes))
        cursor += seg.n_bytes
    if total > used:
        spans.append(SegmentSpan("free", x(used), x(total), total - used))
    elif used > total:
        spans.append(SegmentSpan("overflow", x(total), x(used), used - total))
    return spans


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / MIB:,.0f} MiB"


def draft_segments(s: Mapping[str, int]) -> tuple[BarSegment, ...]:
    """A separate draft model's weights, KV cache and compute (none without a draft model)."""
    return tuple(BarSegment(key, s[key]) for key in DRAFT_SEGMENT_KEYS if key in s)


def device_row(device: DeviceBudget, trust: Mapping[str, str] | None = None) -> BarRow:
    """A device budget as a bar: the budget's segments, MTP draft and compute merged.

    ``trust``: the budget's ``segment -> trust`` for this device; a merged segment is as sure
    as the least sure of its parts.
    """
    s = device.segments
    t = trust or {}
    mtp_kv, mtp_compute = s.get("mtp_kv_cache", 0), s.get("mtp_compute", 0)
    compute, output = s.get("compute", 0), s.get("output", 0)

    def sure(*names: str) -> str:
        levels = [t[n] for n in names if n in t and s.get(n, 0)]
        return combined_trust(*levels) if levels else ""

    segments = (
        BarSegment("weights", s.get("weights", 0), trust=sure("weights")),
        BarSegment("kv_cache", s.get("kv_cache", 0), trust=sure("kv_cache")),
        BarSegment("recurrent_state", s.get("recurrent_state", 0), trust=sure("recurrent_state")),
        BarSegment(
            "mtp_draft",
            mtp_kv + mtp_compute,
            f"draft KV cache {_mib(mtp_kv)} + draft compute {_mib(mtp_compute)}",
            trust=sure("mtp_kv_cache", "mtp_compute"),
        ),
        *(replace(seg, trust=sure(seg.key)) for seg in draft_segments(s)),
        *(
            (BarSegment("moe_cache", s["moe_cache"], trust=sure("moe_cache")),)
            if "moe_cache" in s
            else ()
        ),
        BarSegment(
            "compute",
            compute + output,
            f"compute {_mib(compute)} + output {_mib(output)}" if output else "",
            trust=sure("compute", "output"),
        ),
        BarSegment("driver", s.get("driver_overhead", 0), trust=sure("driver_overhead")),
        BarSegment("runtime_growth", s.get("runtime_growth", 0), trust=sure("runtime_growth")),
        BarSegment("desktop", s.get("desktop", 0), trust=sure("desktop")),
        BarSegment("other_processes", s.get("other_processes", 0), trust=sure("other_processes")),
        BarSegment("margin", s.get("margin", 0), trust=sure("margin")),
    )
    same = not device.name or device.name == device.id
    title = device.id if same else f"{device.id} · {device.name}"
    return BarRow(title, device.total_bytes, segments)


def host_row(host: HostBudget, parts: dict[str, int] | None = None) -> BarRow:
    """System RAM: what other programs use now, then the engine's CPU side (``parts``: the
    budget's totals, which say how much of the mapped range stays in RAM)."""
    s = host.segments
    kept, cache = mapped_in_ram(host, parts or {})
    experts = (parts or {}).get("weights_cpu_experts", 0)
    mapped_detail = []
    if experts:
        mapped_detail.append(f"experts {_mib(experts)}, other CPU tensors {_mib(kept - experts)}")
    if cache:
        mapped_detail.append(
            f"another {_mib(cache)} of the mapped range is page cache (not counted)"
        )
    other = 0
    if host.total_bytes is not None and host.available_bytes is not None:
        other = max(0, host.total_bytes - host.available_bytes)
    buffers = s["kv_cache"] + s["recurrent_state"] + s["mtp_kv_cache"] + s["compute"] + s["output"]
    segments = (
        BarSegment("host_other", other),
        BarSegment("host_weights", s["weights_resident"] + s["weights_locked"]),
        BarSegment(
            "host_buffers",
            buffers,
            f"KV cache {_mib(s['kv_cache'])}, recurrent state {_mib(s['recurrent_state'])}, "
            f"MTP KV {_mib(s['mtp_kv_cache'])}, compute {_mib(s['compute'])}, "
            f"output {_mib(s['output'])}; the prompt cache may grow to "
            f"{_mib(s['prompt_cache_max'])}",
        ),
        BarSegment("host_mapped", kept, "; ".join(mapped_detail)),
        *draft_segments(s),
    )
    return BarRow("System RAM", host.total_bytes, segments)


def budget_rows(budget: Budget, include_host: bool = True) -> list[BarRow]:
    """One row per device of the budget, then (optionally) the host RAM row."""
    rows = [device_row(d, budget_trust(budget, d)) for d in budget.devices]
    if include_host:
        rows.append(host_row(budget.host, budget.parts))
    return rows


def row_summary(row: BarRow) -> str:
    """``11,020 of 12,282 MiB · 1,262 MiB free`` / ``… · 8,943 MiB over``."""
    if row.total_bytes is None:
        return f"{_mib(row.used_bytes)} used (total unknown)"
    text = f"{row.used_bytes / MIB:,.0f} of {_mib(row.total_bytes)}"
    if row.overflow_bytes:
        return f"{text} · {_mib(row.overflow_bytes)} over"
    return f"{text} · {_mib(row.free_bytes or 0)} free"


def _text_color(background: QColor) -> QColor:
    luminance = 0.299 * background.red() + 0.587 * background.green() + 0.114 * background.blue()
    return QColor("#111111") if luminance > 150 else QColor("#ffffff")


class VramBar(QWidget):
    """Stacked bars with titles, in-segment labels, a legend and exact-size tooltips."""

    PADDING = 8
    BAR_HEIGHT = 30
    ROW_GAP = 12
    SWATCH = 12

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: list[BarRow] = []
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(360)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent, False)

    # -- data -----------------------------------------------------------------------------------

    @property
    def rows(self) -> list[BarRow]:
        return list(self._rows)

    def set_rows(self, rows: Sequence[BarRow]) -> None:
        old_count = len(self._rows)
        self._rows = list(rows)
        if len(self._rows) != old_count:
            self.updateGeometry()
        self.update()

    def set_budget(self, budget: Budget, include_host: bool = True) -> None:
        self.set_rows(budget_rows(budget, include_host))

    # -- geometry ---------------------------------------------------------------------------------

    def _title_height(self) -> int:
        return QFontMetrics(self.font()).height() + 4

    def bar_rect(self, index: int) -> QRectF:
        """The rectangle of row ``index``'s bar."""
        top = self.PADDING + index * (self._title_height() + self.BAR_HEIGHT + self.ROW_GAP)
        top += self._title_height()
        width = max(1.0, self.width() - 2.0 * self.PADDING)
        return QRectF(self.PADDING, top, width, self.BAR_HEIGHT)

    def segment_spans(self, index: int) -> list[SegmentSpan]:
        """Row ``index`` laid out on its bar at the widget's current width."""
        rect = self.bar_rect(index)
        return layout_row(self._rows[index], rect.left(), rect.width())

    def _legend_keys(self) -> list[str]:
        present: set[str] = set()
        for row in self._rows:
            present.update(s.key for s in row.segments if s.n_bytes > 0)
            if row.overflow_bytes:
                present.add("overflow")
            elif (row.free_bytes or 0) > 0:
                present.add("free")
        return [k for k in LEGEND_ORDER if k in present]

    def legend_text(self, key: str) -> str:
        """A legend entry: the segment's name and its size, so segments too small to carry a
        label on the bar are still named with their value (free/over: see each bar's title)."""
        label = SEGMENT_STYLES[key].label
        if key in {"free", "overflow"}:
            return label
        total = sum(s.n_bytes for row in self._rows for s in row.segments if s.key == key)
        trust = self.legend_trust(key)
        return f"{label} {_mib(total)}" + (f" · {trust}" if trust else "")

    def legend_trust(self, key: str) -> str:
        """How sure the figures of kind ``key`` are, over all rows (the least sure of them)."""
        levels = [
            s.trust for row in self._rows for s in row.segments if s.key == key and s.n_bytes > 0
        ]
        return combined_trust(*levels) if levels and all(levels) else ""

    def legend_entries(self) -> list[str]:
        """The legend's texts in order (what a reader sees under the bars)."""
        return [self.legend_text(k) for k in self._legend_keys()]

    def _legend_items(self, width: int) -> list[tuple[str, QRectF]]:
        """Each legend entry's key and rectangle (swatch + label), wrapped to ``width``."""
        fm = QFontMetrics(self.font())
        line_h = fm.height() + 6
        x, y = float(self.PADDING), self._legend_top()
        items: list[tuple[str, QRectF]] = []
        for key in self._legend_keys():
            w = self.SWATCH + 6 + fm.horizontalAdvance(self.legend_text(key)) + 16
            if x + w > width - self.PADDING and x > self.PADDING:
                x, y = float(self.PADDING), y + line_h
            items.append((key, QRectF(x, y, w, line_h)))
            x += w
        return items

    def heightForWidth(self, width: int) -> int:
        items = self._legend_items(width)
        legend_bottom = items[-1][1].bottom() if items else self._legend_top()
        return int(legend_bottom + self.PADDING)

    def hasHeightForWidth(self) -> bool:
        return True

    def _legend_top(self) -> float:
        return self.PADDING + len(self._rows) * (
            self._title_height() + self.BAR_HEIGHT + self.ROW_GAP
        )

    def sizeHint(self) -> QSize:
        width = max(self.width(), 640)
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:
        return QSize(360, self.heightForWidth(max(self.width(), 360)))

    def resizeEvent(self, event: object) -> None:  # legend may wrap differently
        self.updateGeometry()

    # -- tooltips ---------------------------------------------------------------------------------

    def tooltip_at(self, pos: QPointF) -> str | None:
        """The tooltip for a point: a segment's exact size, or a legend entry's meaning."""
        for index, row in enumerate(self._rows):
            rect = self.bar_rect(index)
            if not rect.contains(pos):
                continue
            spans = self.segment_spans(index)
            total_x = None
            overflow = next((s for s in spans if s.key == "overflow"), None)
            if overflow is not None:
                total_x = overflow.x0
            for span in spans:
                if span.key == "overflow" or not (span.x0 <= pos.x() <= span.x1):
                    continue
                text = self._segment_tooltip(row, span)
                if total_x is not None and pos.x() >= total_x:
                    text += (
                        f"\nThis part lies beyond the total: {row.overflow_bytes / MIB:,.1f} MiB "
                        "too much in all."
                    )
                return text
            return None
        for key, rect in self._legend_items(self.width()):
            if rect.contains(pos):
                style = SEGMENT_STYLES[key]
                text = f"{style.label}: {style.description}"
                trust = self.legend_trust(key)
                if trust:
                    text += f"\nHow sure: {trust} — {trust_meaning(trust)}"
                return text
        return None

    @staticmethod
    def _segment_tooltip(row: BarRow, span: SegmentSpan) -> str:
        style = SEGMENT_STYLES[span.key]
        text = f"{style.label}: {span.n_bytes / MIB:,.1f} MiB ({span.n_bytes:,} bytes)"
        detail = next((s.detail for s in row.segments if s.key == span.key and s.detail), "")
        if detail:
            text += f"\n{detail}"
        trust = next((s.trust for s in row.segments if s.key == span.key and s.trust), "")
        if trust:
            text += f"\nHow sure: {trust} — {trust_meaning(trust)}"
        if style.description:
            text += f"\n{style.description}"
        return text

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            assert isinstance(event, QHelpEvent)
            text = self.tooltip_at(QPointF(event.pos()))
            if text:
                QToolTip.showText(event.globalPos(), text, self)
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().event(event)

    # -- painting ---------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = QFontMetrics(self.font())
        for index, row in enumerate(self._rows):
            self._paint_row(painter, fm, index, row)
        self._paint_legend(painter, fm)
        painter.end()

    def _paint_row(self, painter: QPainter, fm: QFontMetrics, index: int, row: BarRow) -> None:
        rect = self.bar_rect(index)
        text_color = self.palette().windowText().color()
        title_rect = QRectF(
            rect.left(), rect.top() - self._title_height(), rect.width(), fm.height()
        )
        bold = QFont(self.font())
        bold.setBold(True)
        summary = row_summary(row)
        painter.setPen(QColor("#d62728") if row.overflow_bytes else text_color)
        painter.drawText(
            title_rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, summary
        )
        painter.setFont(bold)
        painter.setPen(text_color)
        title_width = rect.width() - fm.horizontalAdvance(summary) - 16
        title = QFontMetrics(bold).elidedText(
            row.title, Qt.TextElideMode.ElideRight, int(title_width)
        )
        painter.drawText(
            title_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, title
        )
        painter.setFont(self.font())

        clip = QPainterPath()
        clip.addRoundedRect(rect, 4, 4)
        painter.save()
        painter.setClipPath(clip)
        spans = layout_row(row, rect.left(), rect.width())
        for span in spans:
            if span.key == "overflow":
                continue
            self._paint_span(painter, fm, rect, span)
        overflow = next((s for s in spans if s.key == "overflow"), None)
        if overflow is not None:
            red = QRectF(overflow.x0, rect.top(), overflow.width, rect.height())
            painter.fillRect(red, QColor(214, 39, 40, 220))
            painter.fillRect(red, QBrush(QColor(120, 0, 0, 120), Qt.BrushStyle.DiagCrossPattern))
            label = f"+{overflow.n_bytes / MIB:,.0f} MiB over"
            if fm.horizontalAdvance(label) + 8 <= red.width():
                painter.setPen(QColor("#ffffff"))
                painter.drawText(red, Qt.AlignmentFlag.AlignCenter, label)
        painter.restore()

        painter.setPen(QPen(QColor("#6b7280"), 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRoundedRect(rect.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
        if overflow is not None:  # where the memory ends
            painter.setPen(QPen(QColor("#111111"), 2))
            painter.drawLine(
                QPointF(overflow.x0, rect.top() - 3), QPointF(overflow.x0, rect.bottom() + 3)
            )

    def _paint_span(
        self, painter: QPainter, fm: QFontMetrics, rect: QRectF, span: SegmentSpan
    ) -> None:
        style = SEGMENT_STYLES[span.key]
        area = QRectF(span.x0, rect.top(), span.width, rect.height())
        color = QColor(style.color)
        if style.hatched:
            painter.fillRect(area, color.lighter(135))
            painter.fillRect(area, QBrush(color.darker(130), Qt.BrushStyle.BDiagPattern))
        else:
            painter.fillRect(area, color)
        if span.key == "free":
            painter.setPen(QPen(QColor("#9ca3af"), 1, Qt.PenStyle.DashLine))
            painter.drawRect(area.adjusted(1, 1, -1, -1))
        elif span.width >= 2:
            painter.setPen(QPen(QColor(255, 255, 255, 160), 1))
            painter.drawLine(QPointF(span.x1, rect.top()), QPointF(span.x1, rect.bottom()))
        long_text = f"{style.label} {span.n_bytes / MIB:,.0f}"
        short_text = f"{span.n_bytes / MIB:,.0f}"
        for text in (long_text, short_text):
            if fm.horizontalAdvance(text) + 8 <= area.width():
                background = color.lighter(135) if style.hatched else color
                painter.setPen(_text_color(background))
                painter.drawText(area, Qt.AlignmentFlag.AlignCenter, text)
                break

    def _paint_legend(self, painter: QPainter, fm: QFontMetrics) -> None:
        text_color = self.palette().windowText().color()
        for key, rect in self._legend_items(self.width()):
            style = SEGMENT_STYLES[key]
            swatch = QRectF(
                rect.left(), rect.center().y() - self.SWATCH / 2, self.SWATCH, self.SWATCH
            )
            color = QColor(style.color)
            if style.hatched:
                painter.fillRect(swatch, color.lighter(135))
                painter.fillRect(swatch, QBrush(color.darker(130), Qt.BrushStyle.BDiagPattern))
            else:
                painter.fillRect(swatch, color)
            painter.setPen(QPen(QColor("#6b7280"), 1))
            painter.drawRect(swatch)
            painter.setPen(text_color)
            text_rect = QRectF(
                swatch.right() + 6, rect.top(), rect.width() - self.SWATCH - 6, rect.height()
            )
            painter.drawText(
                text_rect,
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                self.legend_text(key),
            )
