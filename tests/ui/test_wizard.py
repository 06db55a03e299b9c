"""The app shell: seven pages in order, a full walk on the demo default, remembered state, File."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QMessageBox, QWizard

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.plan.io import load_plan, plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.wizard import PAGE_TITLES, PageId

from .conftest import WizardFactory, go_to, no_gpu_report


def test_seven_pages_in_order_with_title_icon_and_minimum_size(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard()
    assert wizard.pageIds() == list(range(7))
    titles = [wizard.page(i).title() for i in wizard.pageIds()]
    assert titles == [
        "Hardware",
        "Model",
        "Engine & options",
        "VRAM budget",
        "Desktop VRAM",
        "Service",
        "Launch & benchmark",
    ]
    assert titles == list(PAGE_TITLES.values())
    assert wizard.windowTitle() == "mtpstudio"
    assert not wizard.windowIcon().isNull()
    # small enough for a 1280x800 or 1366x768 laptop screen (the pages scroll)
    assert wizard.minimumSize().width() <= 800 and wizard.minimumSize().height() <= 520
    assert "4. VRAM budget" in wizard.steps.text()


def test_pages_five_to_seven_show_the_demo_plan(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard()
    go_to(wizard, PageId.LAUNCH)
    compositor = wizard.desktop_page.holders.topLevelItem(0)
    assert (compositor.text(0), compositor.child(0).text(0)) == ("compositor", "kwin_wayland")
    assert "ExecStart=/opt/llama.cpp/build/bin/" in wizard.service_page.views["unit"].toPlainText()
    # The demo card has no file to run: the Launch page cannot start a server for it.
    assert not wizard.launch_page.start_button.isEnabled()
    assert "GGUF" in wizard.launch_page.start_button.toolTip()
    assert "demo card" in wizard.launch_page.note.text()


def test_walk_through_the_demo_default_then_restore_it(
    make_wizard: WizardFactory, store: StateStore
) -> None:
    """Next, next, … finish on a machine without GPU or engine; the next start restores it."""
    wizard = make_wizard(report=no_gpu_report())
    wizard.show()
    assert wizard.plan.device == DEFAULT_GPU_CARD  # no GPU: the catalogue card is preselected
    visited = [wizard.currentId()]
    while wizard.currentId() != PageId.LAUNCH:
        wizard.next()
        wizard.tasks.wait_idle(30)
        visited.append(wizard.currentId())
    assert visited == list(range(7))
    wizard.budget_page.ctx.spin.setValue(16384)  # pages can still change the plan
    finish = wizard.button(QWizard.WizardButton.FinishButton)
    assert finish.isVisible() and finish.isEnabled()
    wizard.resize(QSize(960, 700))
    plan = wizard.plan
    finish.click()
    assert wizard.result() == QWizard.DialogCode.Accepted
    assert store.plan_path.is_file() and store.window_path.is_file()
    assert load_plan(store.plan_path) == plan
    assert store.load_geometry()

    restored = make_wizard(report=no_gpu_report(), default_size=False)
    assert restored.plan == plan
    assert restored.plan.runtime.ctx == 16384
    # the saved 960 x 700, not the default 1180 x 820, kept inside the 800 px offscreen screen
    assert restored.size() == QSize(800, 700)
    assert restored.last_finished is None
    assert wizard.last_finished is not None
    assert f"The plan is saved in {store.plan_path}" in wizard.last_finished


def test_a_damaged_saved_plan_is_ignored(make_wizard: WizardFactory, store: StateStore) -> None:
    store.folder.mkdir(parents=True)
    store.plan_path.write_text("{ not json", encoding="utf-8")
    store.window_path.write_text("[]", encoding="utf-8")
    wizard = make_wizard(report=no_gpu_report())
    assert wizard.plan == Plan(device=DEFAULT_GPU_CARD)


def test_file_save_open_and_new(make_wizard: WizardFactory, tmp_path: Path) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, PageId.ENGINE)
    wizard.engine_page.ctx.setValue(49152)
    target = tmp_path / "plans" / "mine.json"
    wizard.ask_save_path = lambda: target  # type: ignore[method-assign]
    wizard.action_save.trigger()  # no file yet: asks where
    assert load_plan(target) == wizard.plan
    assert wizard.windowTitle() == "mtpstudio — mine.json"

    other = plan_with(Plan(), {"runtime.ctx": 8192, "mtp.draft_max": 3})
    other_file = tmp_path / "other.json"
    save_plan(other, other_file)
    wizard.ask_open_path = lambda: other_file  # type: ignore[method-assign]
    wizard.action_open.trigger()
    assert wizard.plan == other
    assert wizard.engine_page.ctx.value() == 8192  # the page on screen shows the opened plan
    assert wizard.engine_page.draft_max.value() == 3

    wizard.action_new.trigger()
    assert wizard.plan == Plan()
    assert wizard.currentId() == PageId.HARDWARE
    assert wizard.windowTitle() == "mtpstudio"


def test_file_errors_are_one_sentence_message_boxes(
    make_wizard: WizardFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(
        QMessageBox, "warning", lambda parent, title, text, *a: shown.append((title, text))
    )
    wizard = make_wizard(Plan())
    broken = tmp_path / "broken.json"
    broken.write_text('{"runtime": {"ctx": 12}}', encoding="utf-8")
    assert not wizard.open_plan(broken)
    title, text = shown[-1]
    assert title == "Cannot open the plan"
    assert text == "Invalid plan: runtime.ctx: ctx must be at least 256"
    assert wizard.plan == Plan()

    assert not wizard.open_plan(tmp_path / "missing.json")
    assert "does not exist" in shown[-1][1] and "\n" not in shown[-1][1]

    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    assert not wizard.save_plan_to(blocker / "plan.json")
    assert shown[-1][0] == "Cannot save the plan"
    assert shown[-1][1].startswith("Cannot write ")
    assert "Traceback" not in shown[-1][1]
