"""The plan's text bar: ``!`` only for what really lies beyond the card."""

from __future__ import annotations

from mtpstudio.core.memory.budget_types import DeviceBudget
from mtpstudio.core.planner.text import text_bar
from mtpstudio.core.units import MIB


def test_a_card_that_fits_by_a_hair_shows_no_overflow() -> None:
    # per-segment rounding of these widths adds up to one cell more than the card
    names = [
        "weights",
        "kv_cache",
        "recurrent_state",
        "mtp_kv_cache",
        "mtp_compute",
        "compute",
        "desktop",
        "driver_overhead",
        "margin",
    ]
    sizes = [8043, 514, 6436, 7140, 84, 7347, 4413, 3798, 1724]
    segments = {n: v * MIB for n, v in zip(names, sizes, strict=True)}  # fmt: skip
    total = sum(segments.values()) + 57 * MIB
    device = DeviceBudget("CUDA0", "card", total, segments)
    assert device.fits
    bar = text_bar(device)
    assert "!" not in bar and len(bar) == 62  # 60 cells between the brackets


def test_what_does_not_fit_is_marked() -> None:
    device = DeviceBudget("CUDA0", "card", 1000 * MIB, {"weights": 1500 * MIB})
    bar = text_bar(device)
    assert bar.count("!") == 20 and bar.count("W") == 40


def test_the_ram_report_says_what_of_the_mapped_range_stays_in_ram() -> None:
    from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
    from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_info
    from mtpstudio.core.detect.models import DetectionReport
    from mtpstudio.core.plan.schema import Plan
    from mtpstudio.core.planner.resolve import PlanningContext, evaluate, machine_for
    from mtpstudio.core.planner.text import budget_report

    pctx = PlanningContext(machine_for(DetectionReport()), model_card_info(DEFAULT_MODEL_CARD))
    result = evaluate(Plan(device=DEFAULT_GPU_CARD), pctx, suggest=False)
    parts = result.budget.parts
    text = budget_report(result.budget)
    kept, experts = parts["weights_cpu_tensors"], parts["weights_cpu_experts"]
    mapped = result.budget.host.segments["weights_mapped"]
    assert f"of them kept in RAM (CPU tensors) {kept / MIB:,.0f} MiB ({experts / MIB:,.0f}" in text
    assert f"the rest is page cache            {(mapped - kept) / MIB:,.0f} MiB" in text
