"""The wizard goes idle: no endless relayout of the command line once a real GGUF is open
(issue 25 item 1: the wrap toggled a scroll bar, which changed the width, which re-wrapped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.widgets.command_box import CommandBox

from .conftest import FULLSIZE_NAME, WizardFactory, go_to

# A budget-page command line of the 35B card with a short model path.
ARGV = [
    "/usr/local/bin/llama-server", "-m", "/h/QQQQQQQQQQ.gguf", "--host", "127.0.0.1", "--port",
    "8080", "-c", "32768", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "2048", "-ub", "512",
    "--parallel", "1", "--fit", "on", "--fit-target", "1024", "--spec-type", "draft-mtp",
    "--spec-draft-n-max", "2", "--spec-draft-p-min", "0.75", "--spec-draft-type-k", "f16",
    "--spec-draft-type-v", "f16",
]  # fmt: skip
LOOP_GUARD = 200  # relayouts between two checks that count as "endless" (and are cut off)


class Counter(QObject):
    """Counts relayouts of every CommandBox and paint events of every widget."""

    def __init__(self) -> None:
        super().__init__()
        self.relayouts = 0
        self.paints = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    """Counts relayouts; past LOOP_GUARD in a row the relayout is skipped so a loop ends."""
    counter = Counter()
    relayout = CommandBox._relayout
    streak = {"n": 0}

    def counted(self: CommandBox) -> None:
        counter.relayouts += 1
        streak["n"] += 1
        if streak["n"] <= LOOP_GUARD:
            relayout(self)

    def settle() -> int:
        """Process pending events; the relayouts they caused."""
        before = counter.relayouts
        streak["n"] = 0
        for _ in range(3):
            QApplication.processEvents()
            streak["n"] = 0
        return counter.relayouts - before

    monkeypatch.setattr(CommandBox, "_relayout", counted)
    counter.settle = settle  # type: ignore[attr-defined]
    app = QApplication.instance()
    assert app is not None
    app.installEventFilter(counter)
    yield counter
    app.removeEventFilter(counter)


def quiet(counter: Counter, qtbot: QtBot, ms: int = 300) -> tuple[int, int]:
    """Relayouts and paints while nobody touches anything for ``ms``."""
    relayouts, paints = counter.relayouts, counter.paints
    qtbot.wait(ms)
    return counter.relayouts - relayouts, counter.paints - paints


def test_the_command_box_settles_at_every_width(qtbot: QtBot, counter: Counter) -> None:
    box = CommandBox()
    qtbot.addWidget(box)
    box.setFixedHeight(84)  # as on the budget page
    box.show()
    box.set_argv(ARGV)
    restless = []
    for width in range(400, 900):
        box.setFixedWidth(width)
        QApplication.processEvents()  # the resize and the one relayout it needs
        if counter.settle() > 0:  # type: ignore[attr-defined]
            restless.append(width)
    assert restless == [], f"relayout keeps going at widths {restless[:10]}"
    assert quiet(counter, qtbot) == (0, 0)


@pytest.fixture
def desktop_font() -> Iterator[None]:
    """An 11 pt font, as Plasma's defaults on a 1366x768 laptop."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    old = app.font()
    font = QFont(old)
    font.setPointSize(11)
    app.setFont(font)
    yield
    app.setFont(old)


def _padded_home(home: Path, length: int) -> Path:
    """The model at ~/models/… under a folder name making its path ``length`` characters."""
    model = home / "models" / FULLSIZE_NAME
    pad = length - len(str(model)) - 1
    assert pad > 0
    target = home / ("u" * pad) / "models" / FULLSIZE_NAME
    target.parent.mkdir(parents=True)
    model.rename(target)
    return target


def test_the_budget_page_goes_idle_with_a_full_size_model_open(
    make_wizard: WizardFactory,
    fullsize_home: Path,
    counter: Counter,
    desktop_font: None,
    qtbot: QtBot,
) -> None:
    model = _padded_home(fullsize_home, 72)  # a path like /home/someone/models/…, fixed length
    plan = plan_with(Plan(device="rtx-4070-super"), {"model.path": str(model), "model.card": None})
    wizard = make_wizard(plan, DetectionReport(), remember=False)  # no GPU here: a catalogue card
    wizard.resize(1366, 768)
    go_to(wizard, 3)
    assert wizard.state.model_info is not None and wizard.state.model_info.file_size > 17 * 2**30
    assert str(model) in wizard.budget_page.command_line()
    restless = []
    for width in range(1200, 1400):  # dragging the window's edge
        wizard.resize(width, 768)
        QApplication.processEvents()
        if counter.settle() > 0:  # type: ignore[attr-defined]
            restless.append(width)
    assert restless == [], f"relayout keeps going at window widths {restless[:10]}"
    wizard.resize(1366, 768)
    counter.settle()  # type: ignore[attr-defined]
    assert quiet(counter, qtbot, 500) == (0, 0)  # nothing moves while nobody touches it
