"""Inputs that keep faith with the user (issue 34 item 4): number boxes read what the command
line reads, auto stays auto across a restart, another model gets its own placement, and a plan
for a card this computer lacks says so before launch and is compared with the device used."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.core.planner.resolve import machine_for
from mtpstudio.core.usecases.launch import card_not_here, find_build, prepare_launch
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.widgets.number_box import NumberBox
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import WizardFactory, go_to, no_gpu_report


def type_into(box: NumberBox, text: str) -> None:
    """What a user does: select the text, type, press Enter."""
    box.setFocus()
    box.lineEdit().selectAll()
    QTest.keyClicks(box.lineEdit(), text)
    QTest.keyClick(box.lineEdit(), Qt.Key.Key_Return)


@pytest.mark.parametrize(
    ("typed", "tokens"), [("128k", 131072), ("32 k", 32768), ("1e5", 100000), ("65536", 65536)]
)
def test_the_context_box_takes_what_the_cli_takes(
    make_wizard: WizardFactory, typed: str, tokens: int
) -> None:
    wizard = make_wizard(Plan(device="rtx-4070-super"))
    go_to(wizard, PageId.BUDGET)
    type_into(wizard.budget_page.ctx.spin, typed)
    assert wizard.plan.runtime.ctx == tokens  # not 256, not 128


def test_the_engine_pages_boxes_take_sizes_and_keep_a_half_typed_value(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan(device="rtx-4070-super"))
    go_to(wizard, PageId.ENGINE)
    page = wizard.engine_page
    type_into(page.margin, "1.5G")
    assert wizard.plan.runtime.fit_margin_mib == 1536
    type_into(page.ctx, "128k")
    assert wizard.plan.runtime.ctx == 131072
    type_into(page.ctx, "lots")  # letters that are no size never get in
    assert wizard.plan.runtime.ctx == 131072
    page.ctx.lineEdit().selectAll()
    QTest.keyClicks(page.ctx.lineEdit(), "12")  # below the minimum: not clamped to 256
    page.ctx.clearFocus()
    page.ctx.interpretText()
    assert wizard.plan.runtime.ctx == 131072


def test_auto_stays_auto_after_a_fit_and_a_restart(
    qtbot: QtBot, make_wizard: WizardFactory, store: StateStore
) -> None:
    wizard = make_wizard(Plan(device="rtx-4070-super"))
    assert wizard.plan.mtp.enabled is None
    go_to(wizard, PageId.BUDGET)
    wizard.budget_page.apply_suggestion(0)  # Fit: fewest CPU expert layers
    ranked = wizard.budget_page.fill_levers_menu()
    wizard.budget_page.apply_lever(next(s for s in ranked if s.lever == "context"))
    assert wizard.plan.mtp.enabled is None  # the user never chose: still auto
    wizard.save_state()
    again = MtpWizard(store=store, remember=True, detector=no_gpu_report)
    qtbot.addWidget(again)
    assert again.tasks.wait_idle(30)
    assert again.plan.mtp.enabled is None
    go_to(again, PageId.ENGINE)
    assert again.engine_page.mtp_enabled.currentText().lower().startswith("auto")
    again.tasks.shutdown()


def test_another_model_gets_its_own_placement(make_wizard: WizardFactory) -> None:
    """The 35B's --n-cpu-moe 24 means nothing to the dense 27B: opening it plans anew."""
    plan = plan_with(Plan(device="rtx-4060-ti-16gb"),
                     {"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 24,
                      "runtime.n_gpu_layers": 999})  # fmt: skip
    wizard = make_wizard(plan)
    go_to(wizard, PageId.MODEL)
    wizard.state.load_model(ModelChoice(card="qwen3.6-27b-iq4_xs"))
    assert wizard.tasks.wait_idle(60)
    assert wizard.plan.model.card == "qwen3.6-27b-iq4_xs"
    assert wizard.plan.runtime.moe is Plan().runtime.moe is MoePlacement.FIT
    assert wizard.plan.runtime.n_cpu_moe == 0 and wizard.plan.runtime.n_gpu_layers is None
    evaluation = wizard.state.evaluation()
    assert evaluation is not None and evaluation.argv is not None
    assert "--n-cpu-moe" not in evaluation.argv and "999" not in evaluation.argv


def test_a_card_this_computer_lacks_is_said_before_launch_and_compared_with_the_cpu(
    make_wizard: WizardFactory,
    tiny_model: Callable[..., Path],
    engine: Callable[[str], Path],
) -> None:
    model = tiny_model("hybrid-mtp", dtype="q8_0")
    plan = plan_with(Plan(), {"model.path": str(model), "model.card": None,
                              "device": "rtx-4070-super", "runtime.ctx": 2048,
                              "engine.binary": str(engine("upstream"))})  # fmt: skip
    wizard = make_wizard(plan, report=no_gpu_report())
    go_to(wizard, PageId.LAUNCH)
    note = wizard.launch_page.note.text()
    assert "catalogue NVIDIA GeForce RTX 4070 SUPER, which is not in this computer" in note
    assert "runs on the CPU" in note  # before anything was launched
    machine = machine_for(no_gpu_report())
    assert card_not_here(plan, machine) is not None
    build = find_build(plan)
    prepared = prepare_launch(plan, build, machine=machine)
    assert prepared.prediction is not None
    _budget, device = prepared.prediction()
    assert device == "CPU"  # compared with the device the engine really uses
