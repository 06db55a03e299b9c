"""The Budget page's controls decided without Qt, on the demo card and a CPU target."""

from __future__ import annotations

from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.usecases.workbench import Workbench


def _bench(plan: Plan) -> Workbench:
    bench = Workbench()
    bench.set_model(load_model_info(plan.model))
    return bench


def test_a_gpu_plan_enables_the_fit_buttons_and_the_margin() -> None:
    plan = Plan()
    bench = _bench(plan)
    controls = bench.budget_controls(plan, bench.evaluation(plan))
    assert controls.title == "VRAM budget" and controls.fit_enabled
    assert controls.margin.enabled and controls.margin.note == ""
    assert controls.cpu_layers.enabled  # the demo card is MoE
    assert controls.fit_offload_text == "Fit: fewest CPU expert layers"
    assert controls.fit_note is None
    assert bench.model is not None
    assert controls.ctx_note == f"native {bench.model.context_length:,}"


def test_a_cpu_plan_says_why_each_gpu_control_is_off() -> None:
    plan = plan_with(Plan(), {"device": "cpu"})
    bench = _bench(plan)
    controls = bench.budget_controls(plan, bench.evaluation(plan))
    assert controls.title == "Memory budget (CPU)" and not controls.fit_enabled
    assert controls.cpu_layers.reason == "this plan is for the CPU: every expert is there"
    assert controls.margin.reason is not None and "kept free on a GPU" in controls.margin.reason
    assert controls.fit_note is not None and "this plan is for the CPU" in controls.fit_note


def test_mtp_off_greys_the_draft_slider_and_nothing_evaluated_keeps_the_vram_title() -> None:
    plan = plan_with(Plan(), {"mtp.enabled": False})
    bench = _bench(plan)
    controls = bench.budget_controls(plan, None)
    assert controls.draft.reason == "MTP is off (Engine & options page)"
    assert controls.draft.note == controls.draft.reason
    assert controls.title == "VRAM budget" and not controls.fit_enabled
    assert controls.cpu_layers.note == "engine fit (drag to fix)"
