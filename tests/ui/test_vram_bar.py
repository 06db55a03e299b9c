"""The stacked bar: segment geometry from byte values, overflow in red, hatched margin, tooltips."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor
from pytestqt.qtbot import QtBot

from mtpstudio.core.memory.budget_types import DeviceBudget, HostBudget
from mtpstudio.ui.widgets.vram_bar import (
    SEGMENT_STYLES,
    BarRow,
    BarSegment,
    VramBar,
    device_row,
    host_row,
    layout_row,
    row_summary,
)

MIB = 1024 * 1024


def _row(total: int | None, **segments: int) -> BarRow:
    return BarRow("GPU", total, tuple(BarSegment(k, v) for k, v in segments.items()))


def test_segments_are_proportional_to_bytes_and_free_fills_the_rest() -> None:
    row = _row(1000, weights=500, kv_cache=200, margin=100)
    spans = layout_row(row, 10.0, 400.0)
    assert [(s.key, s.x0, s.x1, s.n_bytes) for s in spans] == [
        ("weights", 10.0, 210.0, 500),
        ("kv_cache", 210.0, 290.0, 200),
        ("margin", 290.0, 330.0, 100),
        ("free", 330.0, 410.0, 200),
    ]


def test_empty_segments_take_no_room_and_a_full_bar_has_no_free_span() -> None:
    spans = layout_row(_row(600, weights=600, kv_cache=0), 0.0, 300.0)
    assert [(s.key, s.x0, s.x1) for s in spans] == [("weights", 0.0, 300.0)]


def test_overflow_rescales_to_what_is_used_and_marks_the_part_beyond_the_total() -> None:
    row = _row(1000, weights=900, kv_cache=300, margin=50)  # 1250 used of 1000
    spans = layout_row(row, 0.0, 500.0)
    by_key = {s.key: s for s in spans}
    assert by_key["weights"].x1 == pytest.approx(360.0)  # 900/1250 of 500
    assert by_key["kv_cache"].x1 == pytest.approx(480.0)
    assert by_key["margin"].x1 == pytest.approx(500.0)
    overflow = by_key["overflow"]
    assert (overflow.x0, overflow.x1, overflow.n_bytes) == (pytest.approx(400.0), 500.0, 250)
    assert "free" not in by_key
    assert row.overflow_bytes == 250


def test_unknown_total_scales_to_the_used_bytes() -> None:
    spans = layout_row(_row(None, weights=300, compute=100), 0.0, 400.0)
    assert [(s.key, s.x1) for s in spans] == [("weights", 300.0), ("compute", 400.0)]


def test_device_row_merges_the_mtp_draft_and_compute_segments() -> None:
    device = DeviceBudget(
        "CUDA0",
        "RTX",
        12000 * MIB,
        {
            "weights": 8000 * MIB,
            "kv_cache": 400 * MIB,
            "recurrent_state": 200 * MIB,
            "mtp_kv_cache": 64 * MIB,
            "mtp_compute": 60 * MIB,
            "compute": 100 * MIB,
            "output": 2 * MIB,
            "desktop": 1000 * MIB,
            "other_processes": 250 * MIB,
            "driver_overhead": 400 * MIB,
            "runtime_growth": 0,
            "margin": 1024 * MIB,
        },
    )
    row = device_row(device)
    sizes = {s.key: s.n_bytes // MIB for s in row.segments}
    assert sizes == {
        "weights": 8000,
        "kv_cache": 400,
        "recurrent_state": 200,
        "mtp_draft": 124,
        "compute": 102,
        "driver": 400,
        "runtime_growth": 0,
        "desktop": 1000,
        "other_processes": 250,
        "margin": 1024,
    }
    assert row.used_bytes == device.used_bytes
    assert row.free_bytes == device.free_bytes
    assert "draft KV cache 64 MiB + draft compute 60 MiB" in row.segments[3].detail
    assert row_summary(row) == "11,500 of 12,000 MiB · 500 MiB free"


def test_host_row_counts_other_programs_and_the_engines_cpu_side() -> None:
    host = HostBudget(
        64 * 1024 * MIB,
        50 * 1024 * MIB,
        {
            "weights_mapped": 9000 * MIB,
            "weights_resident": 0,
            "weights_locked": 0,
            "kv_cache": 10 * MIB,
            "recurrent_state": 0,
            "mtp_kv_cache": 0,
            "compute": 5 * MIB,
            "output": 2 * MIB,
            "prompt_cache_max": 8192 * MIB,
        },
    )
    row = host_row(host)
    sizes = {s.key: s.n_bytes // MIB for s in row.segments}
    assert sizes == {"host_other": 14 * 1024, "host_weights": 0, "host_buffers": 17,
                     "host_mapped": 9000}  # fmt: skip
    assert row.title == "System RAM"


def _bar(qtbot: QtBot, rows: list[BarRow], width: int = 616) -> VramBar:
    bar = VramBar()
    qtbot.addWidget(bar)
    bar.set_rows(rows)
    bar.resize(width, bar.heightForWidth(width))
    bar.show()
    return bar


def test_widget_spans_follow_its_width(qtbot: QtBot) -> None:
    bar = _bar(qtbot, [_row(1000, weights=500, margin=250)])
    rect = bar.bar_rect(0)
    assert (rect.left(), rect.width()) == (VramBar.PADDING, 600.0)
    spans = bar.segment_spans(0)
    assert [(s.key, s.x0, s.x1) for s in spans] == [
        ("weights", 8.0, 308.0),
        ("margin", 308.0, 458.0),
        ("free", 458.0, 608.0),
    ]
    bar.resize(416, bar.heightForWidth(416))
    assert bar.segment_spans(0)[0].x1 == pytest.approx(208.0)


def _pixel(bar: VramBar, x: float, y: float) -> QColor:
    return bar.grab().toImage().pixelColor(int(x), int(y))


def test_overflow_is_painted_red_and_the_margin_is_hatched(qtbot: QtBot) -> None:
    row = _row(1000 * MIB, weights=900 * MIB, margin=200 * MIB, kv_cache=100 * MIB)
    bar = _bar(qtbot, [row])
    spans = {s.key: s for s in bar.segment_spans(0)}
    rect = bar.bar_rect(0)
    overflow = spans["overflow"]
    red = _pixel(bar, (overflow.x0 + overflow.x1) / 2, rect.top() + 4)
    assert red.red() > 150 and red.green() < 90 and red.blue() < 90
    weights = _pixel(bar, spans["weights"].x0 + 20, rect.center().y())
    assert weights == QColor(SEGMENT_STYLES["weights"].color)
    # the margin lies before the total here: its pixels alternate (hatching), not one flat colour
    margin = spans["margin"]
    xs = range(int(margin.x0) + 3, int(margin.x0) + 20)
    colours = {_pixel(bar, x, rect.center().y()).rgb() for x in xs}
    assert len(colours) >= 2


def test_tooltips_give_exact_sizes(qtbot: QtBot) -> None:
    row = BarRow(
        "CUDA0 · RTX",
        1000 * MIB,
        (BarSegment("weights", 600 * MIB), BarSegment("kv_cache", 300 * MIB + 512 * 1024)),
    )
    bar = _bar(qtbot, [row])
    spans = {s.key: s for s in bar.segment_spans(0)}
    y = bar.bar_rect(0).center().y()
    kv = bar.tooltip_at(QPointF((spans["kv_cache"].x0 + spans["kv_cache"].x1) / 2, y))
    assert kv is not None
    assert kv.startswith("KV cache: 300.5 MiB (315,097,088 bytes)")
    free = bar.tooltip_at(QPointF(spans["free"].x1 - 2, y))
    assert free is not None and free.startswith("free: 99.5 MiB")
    assert bar.tooltip_at(QPointF(2, 2)) is None


def test_tooltip_says_when_a_segment_lies_beyond_the_total(qtbot: QtBot) -> None:
    bar = _bar(qtbot, [_row(1000 * MIB, weights=800 * MIB, margin=400 * MIB)])
    spans = {s.key: s for s in bar.segment_spans(0)}
    text = bar.tooltip_at(QPointF(spans["overflow"].x1 - 3, bar.bar_rect(0).center().y()))
    assert text is not None
    assert text.startswith("margin: 400.0 MiB")
    assert "beyond the total: 200.0 MiB" in text


def test_legend_lists_only_what_is_there(qtbot: QtBot) -> None:
    bar = _bar(qtbot, [_row(1000, weights=400, margin=100), _row(100, weights=200)])
    keys = [key for key, _ in bar._legend_items(bar.width())]
    assert keys == ["weights", "margin", "free", "overflow"]
    assert bar.heightForWidth(616) > bar.bar_rect(1).bottom()
