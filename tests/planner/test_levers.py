"""The levers (core.levers): every answer judged by planning's one budget, and the moves the
planner, the doctor and the diagnosis share valid for every plan they are offered for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.levers import (
    FitSuggestion,
    PlanChange,
    draft_depth,
    fewest_cpu_expert_layers,
    fewest_cpu_layers,
    half_context,
    largest_context,
)
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    fit_suggestions,
    lever_bench,
    offload_and_context,
    resolve,
)

MOE = "qwen3.6-35b-a3b-iq4_xs"
HOST = HostSpec(64 << 30, 50 << 30)


def _free(s: FitSuggestion) -> list[int | None]:
    return [d.free_bytes for d in s.budget.devices]


def _judged_by_budget_for(s: FitSuggestion, pctx: PlanningContext) -> bool:
    """The answer's budget is planning's budget of the plan it makes."""
    again = budget_for(resolve(s.plan, pctx))
    return s.fits == (again.fits is not False) and _free(s) == [d.free_bytes for d in again.devices]


def test_every_lever_counts_the_separate_draft_model(tiny_model: Callable[..., Path]) -> None:
    """The experts, layers and context levers once planned with the memory model alone and
    left the draft model out that the other levers of the same list counted."""
    draft = tiny_model("draft")
    pctx = PlanningContext(MachineFacts(HOST, (), ()), model_card_info(MOE), read_model_info(draft))
    plan = plan_with(Plan(), {"model.card": MOE, "device": "rtx-4070-super",
                              "draft.path": str(draft), "runtime.ctx": 131072,
                              "runtime.moe": "gpu"})  # fmt: skip
    resolved = resolve(plan, pctx)
    assert budget_for(resolved).fits is False  # the levers have work to do
    ranked = fit_suggestions(resolved)
    levers = {s.lever for s in ranked}
    assert {"experts", "context", "cache", "engine-fit"} <= levers, levers
    for s in ranked:
        assert _judged_by_budget_for(s, pctx), s.message
    bench = lever_bench(resolved)
    searched = [fewest_cpu_expert_layers(bench), fewest_cpu_layers(bench)]
    searched += [largest_context(bench), *offload_and_context(resolved)]
    for s in searched:
        assert _judged_by_budget_for(s, pctx), s.message
    # and the draft model is really in those budgets: without it the figures differ
    plain = PlanningContext(pctx.machine, pctx.model)
    experts = fewest_cpu_expert_layers(bench)
    without = budget_for(resolve(experts.plan, plain))
    assert _free(experts) != [d.free_bytes for d in without.devices]


def test_a_fixed_draft_gets_a_valid_draft_lever() -> None:
    """A plan that drafts a fixed number of tokens (min = max, what the doctor proposes for
    steady CUDA graphs) once made the draft lever raise PlanError for the whole list."""
    pctx = PlanningContext(MachineFacts(HOST, (), ()), model_card_info(MOE))
    plan = plan_with(Plan(), {"model.card": MOE, "device": "rtx-3060-12gb",
                              "runtime.ctx": 131072, "mtp.enabled": True,
                              "mtp.draft_max": 3, "mtp.draft_min": 3})  # fmt: skip
    ranked = fit_suggestions(resolve(plan, pctx))
    draft = next(s for s in ranked if s.lever == "draft")
    if "mtp.draft_max" in draft.changes:
        depth = draft.changes["mtp.draft_max"]
        assert draft.changes == {"mtp.draft_max": depth, "mtp.draft_min": depth}
        assert draft.plan.mtp.draft_min == draft.plan.mtp.draft_max == depth
    else:
        assert draft.changes == {"mtp.enabled": False}


@pytest.mark.parametrize(("draft_min", "depth", "changes"), [
    (0, 2, {"mtp.draft_max": 2}),
    (3, 2, {"mtp.draft_max": 2, "mtp.draft_min": 2}),
    (2, 2, {"mtp.draft_max": 2}),
    (4, 1, {"mtp.draft_max": 1, "mtp.draft_min": 1}),
])  # fmt: skip
def test_draft_depth_keeps_the_plan_valid(
    draft_min: int, depth: int, changes: dict[str, int]
) -> None:
    plan = plan_with(Plan(), {"mtp.draft_max": 4, "mtp.draft_min": draft_min})
    assert draft_depth(plan, depth) == changes
    assert PlanChange("x", draft_depth(plan, depth)).apply(plan).mtp.draft_max == depth


def test_half_context_steps_by_256() -> None:
    assert [half_context(c) for c in (32768, 1000, 512, 256)] == [16384, 256, 256, 256]
