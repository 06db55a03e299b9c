"""GUI polish (issue 11 item 14): command lines wrap between words, distinct legend colours,
banners that do not move the layout, and small segments named with their sizes."""

from __future__ import annotations

import shlex

from PySide6.QtWidgets import QApplication, QLabel, QPlainTextEdit, QVBoxLayout, QWidget
from pytestqt.qtbot import QtBot

from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.widgets.command_box import CommandBox, wrap_argv
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.vram_bar import (
    SEGMENT_STYLES,
    BarRow,
    BarSegment,
    VramBar,
    layout_row,
)

from .conftest import WizardFactory, go_to

MIB = 1024 * 1024
ARGV = [
    "/opt/llama.cpp/build/bin/llama-server", "-m", "/models/My Model (1).gguf", "--host",
    "127.0.0.1", "--port", "8080", "-c", "131072", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on",
    "--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-p-min", "0.75",
    "--spec-draft-type-k", "q8_0", "--spec-draft-type-v", "q8_0",
]  # fmt: skip


def _words_on_lines(lines: list[str]) -> list[str]:
    return shlex.split(" ".join(line.removesuffix(" \\") for line in lines))


def test_wrap_breaks_only_between_argv_words_at_every_width() -> None:
    for width in range(20, 200, 7):
        lines = wrap_argv(ARGV, width)
        assert _words_on_lines(lines) == ARGV  # every word whole, the same command
        assert all(line.endswith(" \\") for line in lines[:-1])
        for line in lines:  # each line starts with a whole word of the command
            assert shlex.split(line.removesuffix(" \\"))[0] in ARGV
        flat = "\n".join(lines)
        assert "--spec-draft-p-min" in flat  # never split


def test_command_box_rewraps_on_resize_and_copies_one_line(qtbot: QtBot) -> None:
    box = CommandBox()
    qtbot.addWidget(box)
    box.resize(360, 120)
    box.show()
    box.set_argv(ARGV)
    narrow = box.toPlainText().splitlines()
    assert len(narrow) > 3 and _words_on_lines(narrow) == ARGV
    assert all(len(line) <= box.columns() for line in narrow if " " in line.strip())
    box.resize(1400, 120)
    QApplication.processEvents()
    assert len(box.toPlainText().splitlines()) < len(narrow)
    assert box.command_line() == shlex.join(ARGV)


def visual_lines(edit: QPlainTextEdit) -> list[str]:
    """The lines as drawn (after the widget's own wrapping), from the text layouts."""
    lines: list[str] = []
    block = edit.document().firstBlock()
    while block.isValid():
        layout = block.layout()
        text = block.text()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            lines.append(text[line.textStart() : line.textStart() + line.textLength()])
        block = block.next()
    return lines


def test_the_budget_page_command_never_splits_a_flag(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 3)
    page = wizard.budget_page
    argv = list(wizard.state.evaluation().argv)
    words = set(argv) | {shlex.quote(w) for w in argv}
    for width in (360, 420, 520, 700):
        page.command.setFixedWidth(width)
        for _ in range(3):
            QApplication.processEvents()
        shown = visual_lines(page.command)
        assert len(shown) > 1
        for line in shown:  # every drawn line starts and ends on a whole argv word
            parts = line.removesuffix(" \\").split()
            assert parts[0] in words and parts[-1] in words, line
    assert page.command_line() == shlex.join(argv)


def test_every_legend_colour_is_distinct() -> None:
    colours = [s.color.lower() for s in SEGMENT_STYLES.values()]
    assert len(set(colours)) == len(colours)
    assert SEGMENT_STYLES["kv_cache"].color != SEGMENT_STYLES["host_buffers"].color


def test_small_segments_are_named_with_their_size_in_the_legend(qtbot: QtBot) -> None:
    bar = VramBar()
    qtbot.addWidget(bar)
    bar.resize(640, 200)
    row = BarRow(
        "GPU",
        12000 * MIB,
        (
            BarSegment("weights", 9000 * MIB),
            BarSegment("recurrent_state", 60 * MIB),
            BarSegment("mtp_draft", 40 * MIB),
            BarSegment("compute", 98 * MIB),
        ),
    )
    bar.set_rows([row])
    rect = bar.bar_rect(0)
    spans = {s.key: s for s in layout_row(row, rect.left(), rect.width())}
    fm = bar.fontMetrics()
    too_small = [k for k in ("recurrent_state", "mtp_draft", "compute")
                 if fm.horizontalAdvance("98") + 8 > spans[k].width]  # fmt: skip
    assert too_small  # these get no label on the bar ...
    entries = bar.legend_entries()
    for key in too_small:  # ... so the legend names them with their size
        seg = next(s for s in row.segments if s.key == key)
        assert f"{SEGMENT_STYLES[key].label} {seg.n_bytes / MIB:,.0f} MiB" in entries


def test_a_banner_keeps_its_room_so_nothing_moves(qtbot: QtBot) -> None:
    host = QWidget()
    qtbot.addWidget(host)
    layout = QVBoxLayout(host)
    notice = Notice(host)
    below = QLabel("a control below the banner", host)
    layout.addWidget(QLabel("above", host))
    layout.addWidget(notice)
    layout.addWidget(below)
    layout.addStretch()
    host.resize(500, 300)
    host.show()
    qtbot.waitExposed(host)
    y = below.geometry().y()
    notice.show_text("The engine cannot run this plan: the reason, in one sentence.", Tone.BAD)
    QApplication.processEvents()
    assert below.geometry().y() == y
    notice.show_text(None)
    QApplication.processEvents()
    assert below.geometry().y() == y


def test_the_engine_page_does_not_shift_when_a_refusal_appears(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 2)
    page = wizard.engine_page
    QApplication.processEvents()
    before = page.ctx.mapTo(page, page.ctx.rect().topLeft())
    page.notice.show_text("A refused edit, said in one sentence.", Tone.BAD)
    QApplication.processEvents()
    assert page.ctx.mapTo(page, page.ctx.rect().topLeft()) == before


def test_the_gui_demo_uses_the_published_setup_and_says_so(make_wizard: WizardFactory) -> None:
    from mtpstudio.ui.app import demo_plan

    plan = demo_plan()
    assert (plan.runtime.ctx, plan.mtp.draft_max, plan.mtp.draft_p_min) == (131072, 3, 0.75)
    assert plan.mtp.cache_type_k.value == plan.mtp.cache_type_v.value == "q8_0"
    wizard = make_wizard(plan)
    go_to(wizard, 3)
    text = wizard.budget_page.target_label.text()
    assert "Demo defaults: the published setup (ctx 131,072" in text
    assert text.endswith("which fits this card.")
    wizard.budget_page.ctx.spin.setValue(32768)  # no longer the published setup: not claimed
    assert "published setup" not in wizard.budget_page.target_label.text()
