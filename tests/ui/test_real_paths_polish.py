"""Smaller things a new user hit (issue 25 item 8): CPU-target wording, the native context, the
CPU expert layers count, Enter in a box, the Fit message, PrivateTmp, AMD wording, laptop
screens."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QApplication, QScrollArea, QWizard
from pytestqt.qtbot import QtBot
from support.tiny_models import make_model

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.desktop.reclaim import reclaim_options
from mtpstudio.core.desktop.session_files import SessionSettings
from mtpstudio.core.detect.models import DetectionReport, GpuInfo, GpuVendor
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.core.planner.resolve import PlanningContext, machine_for, resolve
from mtpstudio.core.service.render import UnitScope
from mtpstudio.core.service.service_files import export_files
from mtpstudio.ui.widgets.vram_bar import SEGMENT_STYLES
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import WizardFactory, go_to, no_gpu_report


def test_a_cpu_target_is_not_worded_as_a_gpu(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(device="cpu"), report=no_gpu_report())
    go_to(wizard, PageId.BUDGET)
    page = wizard.budget_page
    assert page.title() == "Memory budget (CPU)"
    assert page.bar.rows[0].title == "CPU"  # not "CPU · CPU"
    assert page.verdict.text().startswith("The CPU fits, with ")
    assert "margin" not in page.verdict.text()
    assert (
        not page.margin.slider.isEnabled() and "VRAM kept free on a GPU" in page.margin.note.text()
    )
    assert not page.cpu_layers.slider.isEnabled()
    assert "this plan is for the CPU" in page.cpu_layers.note.text()


def test_cli_cpu_target_wording() -> None:
    from support.cli import run_cli

    out = run_cli("plan", "--demo", "--gpu", "cpu").stdout
    assert "Memory budget (the CPU: system RAM):" in out and "VRAM budget" not in out
    assert "\n  CPU  total " in out and "CPU  CPU" not in out
    assert "GPU layers       none (CPU target)" in out
    assert "the engine's fit decides" not in out


def test_a_model_with_a_small_native_context_gets_a_default_within_it(
    make_wizard: WizardFactory, tmp_path: Path, qtbot: QtBot
) -> None:
    model = make_model("dense", tmp_path / "tiny 4k.gguf")  # trained for 4,096 tokens
    from support.cli import run_cli

    cli = run_cli("plan", "--model", str(model), "--gpu", "cpu")
    assert cli.returncode == 0, cli.stderr
    assert "context          4,096 tokens" in cli.stdout
    assert "native" not in "\n".join(line for line in cli.stdout.splitlines() if "- " in line)
    chosen = run_cli("plan", "--model", str(model), "--gpu", "cpu", "--ctx", "8192")
    assert "context          8,192 tokens" in chosen.stdout  # a choice is kept

    wizard = make_wizard(Plan(), report=no_gpu_report())
    go_to(wizard, PageId.MODEL)
    assert wizard.plan.runtime.ctx == 32768
    wizard.model_page.open_path(model)
    qtbot.waitUntil(lambda: wizard.plan.model.path == model, timeout=10000)
    assert wizard.plan.runtime.ctx == 4096


def test_the_cpu_expert_layers_slider_counts_trunk_layers_like_the_text(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))  # the engine's fit, MTP on
    go_to(wizard, PageId.BUDGET)
    page = wizard.budget_page
    evaluation = wizard.state.evaluation()
    assert wizard.plan.runtime.moe is MoePlacement.FIT
    layers = evaluation.budget.effective.cpu_expert_layers
    assert 40 in layers  # the MTP block's experts go to the CPU too ...
    placement = next(w for w in evaluation.warnings if "of 40)" in w)
    trunk = len([n for n in layers if n < 40])
    assert f"({trunk} of 40)" in placement
    assert page.cpu_layers.spin.value() == trunk == page.cpu_layers.slider.value()  # ... not here


def test_enter_in_the_context_box_commits_and_stays_on_the_page(
    make_wizard: WizardFactory, qtbot: QtBot
) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))
    go_to(wizard, PageId.BUDGET)
    spin = wizard.budget_page.ctx.spin
    spin.setFocus()
    spin.selectAll()
    qtbot.keyClicks(spin, "8192")
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert wizard.plan.runtime.ctx == 8192
    assert wizard.currentId() == PageId.BUDGET
    wizard.setFocus()  # elsewhere, Enter still presses Next
    qtbot.keyClick(wizard, Qt.Key.Key_Return)
    assert wizard.currentId() == PageId.DESKTOP


def test_largest_context_says_which_offload_it_means(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD, runtime={"moe": "n_cpu_moe"}))
    go_to(wizard, PageId.BUDGET)
    page = wizard.budget_page
    suggestion = page.apply_suggestion(1)
    assert suggestion is not None
    assert "suggested above" not in page.fit_label.text()
    assert "with the offload of the other Fit (" in page.fit_label.text()


def test_a_model_under_tmp_is_warned_for_a_private_tmp_unit(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/")
    model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", tmp_path / "q.gguf")
    plan = Plan(model=ModelChoice(path=model, card=None))
    from mtpstudio.core.model.gguf import read_model_info

    pctx = PlanningContext(machine_for(DetectionReport()), read_model_info(model))
    resolved = resolve(plan, pctx)
    session = SessionSettings(igpu_card=None)
    system = export_files(resolved, UnitScope.SYSTEM, "bob", session=session, preview=True)
    assert "PrivateTmp=yes" in system.files["unit"].text
    (note,) = [m for m in system.messages if "PrivateTmp" in m]
    assert f"the model {model} is under /tmp, which this system unit cannot see" in note
    user = export_files(resolved, UnitScope.USER, session=session, preview=True)
    assert "PrivateTmp=yes" not in user.files["unit"].text
    assert not [m for m in user.messages if "PrivateTmp" in m]


def test_amd_cards_get_no_cuda_or_nvidia_wording() -> None:
    assert "CUDA" not in SEGMENT_STYLES["driver"].label
    amd = GpuInfo(id="card1", vendor=GpuVendor.AMD, name="AMD Radeon RX 7800 XT", integrated=False)
    igpu = GpuInfo(id="card2", vendor=GpuVendor.AMD, name="AMD Raphael", integrated=True)
    options = reclaim_options(DetectionReport(gpus=[amd, igpu]))
    text = " ".join(o.cost + " " + o.detail for o in options if o.available)
    assert "NVIDIA" not in text


@pytest.mark.parametrize("screen", [(1280, 800), (1366, 768)], ids=["1280x800", "1366x768"])
def test_the_window_fits_a_laptop_screen_and_every_page_scrolls(
    make_wizard: WizardFactory, screen: tuple[int, int]
) -> None:
    width, height = screen
    available = QRect(0, 0, width, height - 32)  # a panel at the bottom
    wizard = make_wizard(plan_with(Plan(), {"device": DEFAULT_GPU_CARD}))
    wizard.fit_to(available)
    wizard.show()
    QApplication.processEvents()
    assert wizard.width() <= available.width()
    assert wizard.height() + 40 <= available.height()  # and room for the title bar
    for page_id in PageId:
        go_to(wizard, page_id)
        QApplication.processEvents()
        page = wizard.currentPage()
        for kind in (QWizard.WizardButton.BackButton, QWizard.WizardButton.CancelButton,
                     QWizard.WizardButton.NextButton if page_id < PageId.LAUNCH
                     else QWizard.WizardButton.FinishButton):  # fmt: skip
            button = wizard.button(kind)
            if button.isVisible():
                corner = button.mapTo(wizard, QPoint(button.width(), button.height()))
                assert wizard.rect().contains(corner), (page_id, kind)
        scroll = page.findChild(QScrollArea, "page_scroll")
        assert scroll is not None and scroll.widget() is not None
        body = scroll.widget()
        # everything on the page is inside the scrolled body: reachable by scrolling
        needed = body.minimumSizeHint().height()
        bar = scroll.verticalScrollBar()
        assert needed <= scroll.viewport().height() or bar.maximum() > 0, page_id
    assert isinstance(wizard, MtpWizard)
