"""What the Budget page says, decided without Qt, on the demo card: the verdict, the system RAM
line, the speed line and the faster levers."""

from __future__ import annotations

from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.usecases.budget_words import (
    faster_line,
    fit_line,
    gib,
    host_line,
    mapped_in_ram,
    mib,
    speed_line,
    target_line,
    verdict,
)
from mtpstudio.core.usecases.workbench import Evaluation, Workbench


def _evaluated(plan: Plan) -> Evaluation:
    bench = Workbench()
    bench.set_model(load_model_info(plan.model))
    evaluation = bench.evaluation(plan)
    assert evaluation is not None and evaluation.budget is not None
    return evaluation


def test_a_plan_that_fits_says_each_device_and_its_spare() -> None:
    evaluation = _evaluated(Plan())
    budget = evaluation.budget
    assert budget is not None
    said = verdict(budget, evaluation.result, moe=True)
    gpu = budget.devices[0]
    assert said.tone == "good" and gpu.free_bytes is not None and gpu.free_bytes >= 0
    assert f"{gpu.id} fits with {mib(gpu.free_bytes)} to spare beyond the" in said.text


def test_a_plan_that_is_short_names_the_shortfall_and_the_way_out() -> None:
    evaluation = _evaluated(plan_with(Plan(), {"runtime.moe": "gpu", "runtime.ctx": 262144}))
    budget = evaluation.budget
    assert budget is not None
    said = verdict(budget, evaluation.result, moe=True)
    short = next(d for d in budget.devices if d.free_bytes is not None and d.free_bytes < 0)
    assert said.tone == "bad"
    assert f"{short.id} is {mib(-short.free_bytes)} short" in said.text  # type: ignore[operator]
    assert "move expert layers to the CPU" in said.text
    assert "move layers to the CPU" in verdict(budget, evaluation.result, moe=False).text


def test_the_ram_line_splits_what_stays_mapped_from_page_cache() -> None:
    evaluation = _evaluated(Plan())
    budget = evaluation.budget
    assert budget is not None
    kept, cache = mapped_in_ram(budget.host, budget.parts)
    said = host_line(budget)
    assert said.text.startswith(f"System RAM: the engine needs {mib(budget.host.needed_bytes)}")
    assert (f"keeps {mib(kept)} of memory-mapped weights" in said.text) == bool(kept)
    assert (f"the other {mib(cache)} it maps are page cache" in said.text) == bool(cache)
    assert said.tone == ("bad" if budget.host.fits is False else "info")
    assert gib(None) == "unknown" and gib(3 * 1024**3) == "3.00 GiB"


def test_the_speed_line_and_its_basis() -> None:
    evaluation = _evaluated(Plan())
    speed = evaluation.result.speed if evaluation.result is not None else None
    assert speed is not None
    line, tip = speed_line(speed)
    assert line.startswith("<b>Speed (estimate):</b>") and "tok/s" in line
    assert tip.startswith("One decoding step: ") and "Not known to the estimate:" in tip
    assert speed_line(None) == ("", "")
    assert faster_line([]) == ""


def test_the_fit_line_says_what_the_lever_did_then_where_the_plan_stands() -> None:
    plan = Plan()
    bench = Workbench()
    bench.set_model(load_model_info(plan.model))
    evaluation = bench.evaluation(plan)
    assert evaluation is not None
    now = bench.standing(evaluation)
    assert now is not None and now.fits
    said = fit_line(now, "Applied 2 fewer expert layers on the CPU.")
    assert said.text.startswith("Applied 2 fewer expert layers on the CPU. Now: ")
    assert said.text.endswith(f"{mib(now.spare_bytes)} spare.") and said.tone == "info"
    assert fit_line(now, None).text.startswith("Now: ")


def test_the_target_line_says_whether_the_published_setup_fits() -> None:
    evaluation = _evaluated(Plan())
    budget = evaluation.budget
    assert budget is not None
    text = target_line("the RTX 4070 SUPER (catalogue)", True, budget)
    assert text.startswith("Planning for the RTX 4070 SUPER (catalogue). Demo defaults: ")
    fits = all(d.fits for d in budget.devices)
    assert text.endswith("fits this card." if fits else "does NOT fit this card.")
    assert target_line(None, False, budget) == ""
