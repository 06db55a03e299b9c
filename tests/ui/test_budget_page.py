"""VRAM budget page: the bar follows the sliders, overflow, Fit buttons, the command line."""

from __future__ import annotations

import re
import shlex

from PySide6.QtCore import QPointF
from PySide6.QtGui import QGuiApplication

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD, gpu_card
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import evaluate, fit_suggestions, offload_and_context, resolve
from mtpstudio.core.planner.text import budget_trust
from mtpstudio.ui.pages.budget import lever_entry
from mtpstudio.ui.widgets.common import Tone
from mtpstudio.ui.widgets.vram_bar import device_row

from .conftest import WizardFactory, go_to

MIB = 1024 * 1024


def _demo(**runtime: object) -> Plan:
    plan = Plan(device=DEFAULT_GPU_CARD)
    return plan_with(plan, {f"runtime.{k}": v for k, v in runtime.items()}) if runtime else plan


def _segment(wizard, key: str) -> int:  # type: ignore[no-untyped-def]
    row = wizard.budget_page.bar.rows[0]
    return next(s.n_bytes for s in row.segments if s.key == key)


def test_bar_shows_the_planners_budget_per_device_and_host(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(_demo())
    go_to(wizard, 3)
    page = wizard.budget_page
    pctx = wizard.state.context()
    assert pctx is not None
    expected = evaluate(wizard.plan, pctx, suggest=False)
    rows = page.bar.rows
    assert [r.title for r in rows] == [
        "CUDA0 · NVIDIA GeForce RTX 4070 SUPER (catalogue)",
        "System RAM",
    ]
    device = expected.budget.devices[0]
    assert rows[0] == device_row(device, budget_trust(expected.budget, device))
    assert rows[0].total_bytes == gpu_card(DEFAULT_GPU_CARD).vram_bytes
    assert page.target_label.text() == f"Planning for {expected.target.source}."
    assert page.host_label.text().startswith("System RAM: the engine needs ")
    assert page.command_line() == shlex.join(expected.argv)


def test_dragging_the_context_slider_updates_plan_and_bar_at_every_step(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(_demo(moe="n_cpu_moe", n_cpu_moe=30))
    go_to(wizard, 3)
    page = wizard.budget_page
    slider = page.ctx.slider
    assert slider.value() == 32768 // 256
    slider.setSliderDown(True)
    kv_sizes = []
    for step in (64, 128, 256, 512):
        slider.setValue(step)
        assert wizard.plan.runtime.ctx == step * 256
        assert page.ctx.spin.value() == step * 256
        # while dragging, the evaluation runs in the background; the bar follows it
        assert wizard.tasks.wait_idle(30)
        kv_sizes.append(_segment(wizard, "kv_cache"))
        assert f"-c {step * 256}" in page.command_line()
    slider.setValue(600)
    assert wizard.plan.runtime.ctx == 600 * 256  # the plan follows the hand at once
    slider.setSliderDown(False)  # released: the dragged value is evaluated at once
    assert f"-c {600 * 256}" in page.command_line()
    assert kv_sizes == sorted(kv_sizes) and len(set(kv_sizes)) == 4
    page.ctx.spin.setValue(20000)  # a value between slider steps
    assert wizard.plan.runtime.ctx == 20000
    assert slider.value() == round(20000 / 256)


def test_overflow_is_red_and_the_fit_buttons_apply_the_planners_answers(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(_demo(moe="n_cpu_moe", n_cpu_moe=0))
    go_to(wizard, 3)
    page = wizard.budget_page
    assert page.bar.rows[0].overflow_bytes > 0
    assert page.verdict.tone is Tone.BAD and "short" in page.verdict.text()
    pctx = wizard.state.context()
    assert pctx is not None
    expected = offload_and_context(resolve(wizard.plan, pctx))

    page.fit_offload_button.click()
    assert wizard.plan == expected[0].plan
    assert wizard.plan.runtime.moe is MoePlacement.N_CPU_MOE
    assert page.cpu_layers.spin.value() == expected[0].plan.runtime.n_cpu_moe > 0
    assert page.bar.rows[0].overflow_bytes == 0
    assert page.verdict.tone is Tone.GOOD
    assert page.fit_label.text().startswith("Fewest expert layers on the CPU")

    again = offload_and_context(resolve(wizard.plan, pctx))
    page.fit_context_button.click()
    assert wizard.plan.runtime.ctx == again[1].plan.runtime.ctx >= 32768
    assert page.ctx.spin.value() == wizard.plan.runtime.ctx
    assert page.bar.rows[0].overflow_bytes == 0
    assert page.fit_label.text().startswith("Largest context that fits")


def test_every_lever_menu_lists_the_ranked_answers_and_applies_one(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(_demo(moe="n_cpu_moe", n_cpu_moe=0))
    go_to(wizard, 3)
    page = wizard.budget_page
    assert page.bar.rows[0].overflow_bytes > 0 and page.levers_button.isEnabled()
    pctx = wizard.state.context()
    assert pctx is not None
    expected = fit_suggestions(resolve(wizard.plan, pctx))
    page.levers_menu.aboutToShow.emit()  # the user opens the menu
    actions = page.levers_menu.actions()
    assert [a.text() for a in actions] == [lever_entry(s) for s in expected]
    assert [a.toolTip() for a in actions] == [s.message for s in expected]
    llvmpipe = next(a for a in actions if a.text().startswith("with the llvmpipe session"))
    llvmpipe.trigger()
    assert wizard.plan.desktop.value == "llvmpipe"
    assert page.fit_label.text().startswith(f"Applied {llvmpipe.toolTip()}. Now: experts of ")
    # the desktop's bar segment is the llvmpipe session's now
    assert _segment(wizard, "desktop") < gpu_card(DEFAULT_GPU_CARD).desktop_vram_bytes


def test_draft_layers_and_margin_sliders(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(_demo())
    go_to(wizard, 3)
    page = wizard.budget_page
    mtp_before = _segment(wizard, "recurrent_state")
    page.draft.slider.setValue(4)
    assert wizard.plan.mtp.draft_max == 4
    assert _segment(wizard, "recurrent_state") > mtp_before  # a state copy per drafted token
    page.margin.slider.setValue(8)
    assert wizard.plan.runtime.fit_margin_mib == 512
    # the engine's fit leaves 512 MiB free at the load; the process grows into it afterwards
    budget = wizard.state.evaluation().budget
    grown = budget.growth.load_bytes + budget.growth.bytes
    assert _segment(wizard, "margin") == 512 * MIB - grown
    assert _segment(wizard, "runtime_growth") == budget.growth.bytes > 0
    assert wizard.plan.runtime.moe is MoePlacement.FIT
    page.cpu_layers.slider.setValue(25)
    assert (wizard.plan.runtime.moe, wizard.plan.runtime.n_cpu_moe) == (MoePlacement.N_CPU_MOE, 25)


def test_draft_depth_is_disabled_with_the_reason_when_mtp_is_off(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(plan_with(_demo(), {"mtp.enabled": False}))
    go_to(wizard, 3)
    page = wizard.budget_page
    assert not page.draft.slider.isEnabled() and not page.draft.spin.isEnabled()
    assert page.draft.slider.toolTip().startswith("Not available: MTP is off")
    assert _segment(wizard, "mtp_draft") == 0


def test_the_command_line_is_copyable(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(_demo())
    go_to(wizard, 3)
    page = wizard.budget_page
    page.copy_button.click()
    assert QGuiApplication.clipboard().text() == page.command_line()
    assert page.command_line().startswith("/opt/llama.cpp/build/bin/llama-server -m ")


def test_system_ram_agrees_with_the_experts_in_ram_warning(make_wizard: WizardFactory) -> None:
    """Issue 25 item 6: the RAM bar counted the whole mapped file (17,877 MiB) as used while
    the warning said 10,744 MiB of experts stay in RAM."""
    wizard = make_wizard(_demo())  # the engine's fit: experts of many layers on the CPU
    go_to(wizard, 3)
    page = wizard.budget_page
    evaluation = wizard.state.evaluation()
    budget = evaluation.budget
    experts = budget.parts["weights_cpu_experts"]
    assert experts > 5000 * MIB
    warning = next(w for w in evaluation.warnings if "of experts stay in system RAM" in w)
    assert f"{experts / MIB:,.0f} MiB of experts" in warning
    mapped = budget.host.segments["weights_mapped"]  # the engine's CPU_Mapped range
    shown = next(s for s in page.bar.rows[-1].segments if s.key == "host_mapped")
    assert shown.n_bytes == budget.parts["weights_cpu_tensors"]
    assert experts <= shown.n_bytes < mapped  # what stays in RAM, not the whole range
    assert f"experts {experts / MIB:,.0f} MiB" in shown.detail
    assert f"{(mapped - shown.n_bytes) / MIB:,.0f} MiB of the mapped range is page cache" in (
        shown.detail
    )
    text = page.host_label.text()
    assert f"keeps {shown.n_bytes / MIB:,.0f} MiB of memory-mapped weights in RAM" in text
    assert f"({experts / MIB:,.0f} MiB of them experts)" in text
    assert "page cache" in text


def test_the_legend_says_how_sure_each_figure_is(make_wizard: WizardFactory) -> None:
    """On a consumer CUDA card the weights follow rules the GPU kit measured on a Hopper card
    (``measured on CUDA``), the KV cache is an exact formula, the MTP draft and compute buffers
    and the runtime growth follow the engine's source for such a card (``source``: its
    attention kernel and cuBLAS workspace differ); the page explains the words."""
    wizard = make_wizard(plan_with(_demo(), {"mtp.enabled": True}))
    go_to(wizard, 3)
    page = wizard.budget_page
    legend = page.bar.legend_entries()
    cuda = " · measured on CUDA (sm_90, b11434)"
    assert next(e for e in legend if e.startswith("weights ")).endswith(cuda)
    assert next(e for e in legend if e.startswith("KV cache ")).endswith(" · exact")
    assert next(e for e in legend if e.startswith("MTP draft ")).endswith(" · source")
    assert next(e for e in legend if e.startswith("compute ")).endswith(" · source")
    assert next(e for e in legend if e.startswith("runtime growth ")).endswith(" · source")
    assert "source: follows the engine's source for this backend" in page.trust_label.text()
    assert "measured on CUDA (sm_90, b11434): checked against" in page.trust_label.text()
    bar = page.bar
    compute = next(s for s in bar.segment_spans(0) if s.key == "compute")
    tip = bar.tooltip_at(QPointF((compute.x0 + compute.x1) / 2, bar.bar_rect(0).center().y()))
    assert tip is not None and "How sure: source — follows the engine's source" in tip


# -- issue 34: advice ranked by what the user came for --------------------------------------------


SEEDS = {"runtime.ctx": 131072, "runtime.cache_type_k": "q8_0", "runtime.cache_type_v": "q8_0",
         "mtp.draft_max": 3}  # fmt: skip


def test_the_seeds_setup_ranks_the_reclaim_that_moves_experts_first(
    make_wizard: WizardFactory,
) -> None:
    """35B IQ4_XS on the RTX 4070 SUPER at 128k, q8_0, MTP 3: it fits with experts in RAM; the
    levers are ranked by the speed estimate (issue 37), each saying its expert layers and its
    gain in tok/s; memory spare is the second column and decides only between equal speeds."""
    wizard = make_wizard(plan_with(Plan(device=DEFAULT_GPU_CARD), SEEDS))
    go_to(wizard, 3)
    page = wizard.budget_page
    assert page.fit_label.text().startswith("Now: experts of ")
    assert " of 40 layers on the GPU" in page.fit_label.text()
    assert wizard.tasks.wait_idle(30)
    said = page.faster_label.text()  # shown on the page, without opening the menu
    assert page.faster_label.isVisibleTo(page)
    assert said.startswith("Faster for this plan, best first: 1. with the ")
    assert re.search(
        r"with the llvmpipe session: \d+ more expert layers? on the GPU, MTP kept, "
        r"≈ \+[\d.]+ % tok/s",
        said,
    )
    ranked = page.fill_levers_menu()
    fitting = [s for s in ranked if s.fits]
    assert all(s.tok_s is not None for s in fitting)
    speeds = [round(s.tok_s or 0.0, 1) for s in fitting]
    assert speeds == sorted(speeds, reverse=True)  # the estimate ranks them
    llvmpipe = next(s for s in ranked if s.lever == "desktop:llvmpipe")
    assert llvmpipe.faster and re.fullmatch(
        r"\d+ more expert layers? on the GPU, MTP kept, ≈ \+[\d.]+ % tok/s", llvmpipe.buys
    )
    first = page.levers_menu.actions()[0].text()
    assert first.endswith("MiB spare") and "\tfits, " in first  # spare: the second column
    assert "% tok/s" in first


def test_the_speed_estimate_stands_beside_the_bar(make_wizard: WizardFactory) -> None:
    """The page says the plan's tokens/s under the bar, what it rests on in the tooltip, and
    follows the plan: more experts in RAM (fewer on the card) read slower."""
    wizard = make_wizard(plan_with(Plan(device=DEFAULT_GPU_CARD), SEEDS))
    go_to(wizard, 3)
    page = wizard.budget_page
    text = page.speed_label.text()
    found = re.search(r"Speed \(estimate\):</b> ≈ ([\d.,]+) tok/s decoding with MTP", text)
    assert found, text
    tip = page.speed_label.toolTip()
    assert "assumed: an 8-core desktop" in tip and "MTP draft depth 3" in tip
    assert "RTX 4070 SUPER: 192-bit GDDR6X" in tip and "Not known to the estimate" in tip
    before = float(found[1].replace(",", ""))
    page.cpu_layers.spin.setValue(40)  # every expert layer in RAM
    after = re.search(r"≈ ([\d.,]+) tok/s", page.speed_label.text())
    assert after and float(after[1].replace(",", "")) < before


def test_the_text_beside_the_menu_is_always_the_current_plans(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(plan_with(Plan(device=DEFAULT_GPU_CARD), SEEDS))
    go_to(wizard, 3)
    page = wizard.budget_page
    ranked = page.fill_levers_menu()
    page.apply_lever(next(s for s in ranked if s.lever == "desktop:llvmpipe"))
    assert page.fit_label.text().startswith("Applied with the llvmpipe session: ")
    applied = page.fit_label.text()
    page.ctx.spin.setValue(262144)  # the user moves on: fewer experts fit on the card
    text = page.fit_label.text()
    assert text.startswith("Now: experts of ") and text not in applied
    assert "14 MiB spare" not in text


def test_the_lever_menu_fits_a_laptop_screen(make_wizard: WizardFactory) -> None:
    """The dense 27B's menu was ~1,100 px wide: the entries are short now, the detail is in
    each entry's tooltip."""
    dense = {"model.card": "qwen3.6-27b-iq4_xs", "runtime.ctx": 131072}
    wizard = make_wizard(plan_with(Plan(device="rtx-4060-ti-16gb"), dense))
    go_to(wizard, 3)
    page = wizard.budget_page
    assert page.fill_levers_menu()
    assert page.levers_menu.sizeHint().width() <= min(900, 0.7 * wizard.width())
