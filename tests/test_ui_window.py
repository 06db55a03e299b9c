"""The first window shows the demo plan (offscreen Qt)."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from mtpstudio.core.plan import plan_from_dict
from mtpstudio.ui.app import PlanWindow


def test_window_shows_demo_plan(qtbot: QtBot) -> None:
    window = PlanWindow(plan_from_dict({"runtime": {"ctx": 8192}}))
    qtbot.addWidget(window)
    text = window.report.toPlainText()
    assert "qwen35moe" in text
    assert "8,192 tokens" in text
    assert window.windowTitle() == "mtpstudio"
    assert not window.windowIcon().isNull()


def test_window_explains_an_unreadable_model(qtbot: QtBot, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"nope")
    window = PlanWindow(plan_from_dict({"model": {"path": str(broken), "card": None}}))
    qtbot.addWidget(window)
    assert window.report.toPlainText().startswith("Cannot read the model:")
