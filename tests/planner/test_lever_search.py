"""The levers' searches ask for fewer budgets than a plain bisection and answer as it does: the
context lever looks at the step below the plan's context first, the experts and layers levers
start where the bytes per layer put the answer, and the bench computes each plan's budget once
(``core.levers``, ``planning.lever_bench``)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory.budget import device_fits
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.levers import (
    CTX_STEP,
    FitSuggestion,
    LeverBench,
    PlanChange,
    context_lever,
    experts_on_cpu,
    fewest_cpu_expert_layers,
    fewest_cpu_layers,
    gpu_layers,
    largest_where,
    smallest_where,
)
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    fit_suggestions,
    lever_bench,
    resolve,
)

MOE = "qwen3.6-35b-a3b-iq4_xs"
DENSE = "qwen3.6-27b-iq4_xs"
HOST = HostSpec(64 << 30, 50 << 30)


def _counted(card: str, changes: dict[str, Any]) -> tuple[LeverBench, list[PlanChange]]:
    """The plan's bench, with every change it evaluates listed."""
    pctx = PlanningContext(MachineFacts(HOST, (), ()), model_card_info(card))
    bench = lever_bench(resolve(plan_with(Plan(), {"model.card": card, **changes}), pctx))
    asked: list[PlanChange] = []

    def evaluate(change: PlanChange) -> FitSuggestion:
        asked.append(change)
        return bench.evaluate(change)

    return replace(bench, evaluate=evaluate), asked


def _good(s: FitSuggestion) -> bool:
    return s.fits and not s.cpu_layers


def _plain_context_step(bench: LeverBench) -> int | None:
    """The largest good step below the plan's context by the bisection alone."""
    ctx = bench.plan.runtime.ctx
    lo, hi = 1, ctx // CTX_STEP - (1 if ctx % CTX_STEP == 0 else 0)
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if _good(bench.evaluate(PlanChange("", {"runtime.ctx": mid * CTX_STEP}, "context"))):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


@pytest.mark.parametrize(
    "card, changes, runs",
    [
        (MOE, {"device": "rtx-4070-super", "runtime.ctx": 131072}, True),  # the demo's plan
        (MOE, {"device": "rtx-4070-super", "runtime.ctx": 262144, "runtime.moe": "n_cpu_moe",
               "runtime.n_cpu_moe": 24}, False),
        (DENSE, {"device": "rtx-4090", "runtime.ctx": 262144, "runtime.moe": "gpu"}, False),
        (DENSE, {"device": "rtx-4060-ti-16gb", "runtime.ctx": 65536, "runtime.moe": "gpu"},
         False),
    ],
)  # fmt: skip
def test_the_context_lever_answers_as_the_bisection(
    card: str, changes: dict[str, Any], runs: bool
) -> None:
    """Same answer (the context and its whole budget) as the step-by-step bisection; a plan
    that already runs gets it from one budget instead of the bisection's nine."""
    bench, asked = _counted(card, changes)
    got = context_lever(bench)
    fast = len(asked)
    plain = _plain_context_step(bench)
    if plain is None:
        assert got is None or not _good(got)
    else:
        assert got is not None and _good(got)
        assert got.plan.runtime.ctx == plain * CTX_STEP
        again = bench.evaluate(PlanChange("", {"runtime.ctx": plain * CTX_STEP}, "context"))
        assert got.budget.to_json() == again.budget.to_json()
    if runs:
        assert plain == bench.plan.runtime.ctx // CTX_STEP - 1
        assert (fast, len(asked) - fast - 1) == (1, 9)


def _plain_experts(bench: LeverBench) -> int | None:
    def fits(n: int) -> bool:
        return device_fits(bench.evaluate(PlanChange("", experts_on_cpu(n), "experts")).budget)

    if fits(0):
        return 0
    lo, hi = 1, bench.model.block_count
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _plain_layers(bench: LeverBench) -> int | None:
    moe = MoePlacement.ALL_CPU if bench.model.is_moe else MoePlacement.GPU

    def fits(n: int) -> bool:
        return device_fits(bench.evaluate(PlanChange("", gpu_layers(n, moe), "layers")).budget)

    lo, hi = 0, bench.model.block_count + 1
    if not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@pytest.mark.parametrize(
    "card, changes",
    [
        (MOE, {"device": "rtx-4070-super", "runtime.ctx": 131072, "runtime.moe": "gpu"}),
        (MOE, {"device": "rtx-3060-12gb", "runtime.ctx": 262144, "runtime.moe": "gpu",
               "runtime.cache_type_k": "f16", "runtime.cache_type_v": "f16"}),
        (DENSE, {"device": "rtx-3060-12gb", "runtime.ctx": 32768, "runtime.moe": "gpu"}),
        (DENSE, {"device": "rtx-4060-ti-16gb", "runtime.ctx": 131072, "runtime.moe": "gpu"}),
    ],
)  # fmt: skip
def test_the_experts_and_layers_levers_answer_as_the_bisection(
    card: str, changes: dict[str, Any]
) -> None:
    """The fewest expert layers and the fewest whole layers on the CPU: the answer the plain
    bisection finds, with its budget, from fewer budgets."""
    bench, asked = _counted(card, changes)
    if bench.model.is_moe:
        experts = fewest_cpu_expert_layers(bench)
        fast = _budgets(asked)
        del asked[:]
        plain = _plain_experts(bench)
        assert plain is not None and 0 < plain < bench.model.block_count
        assert experts.plan.runtime.n_cpu_moe == plain
        assert fast < len(asked)
        again = bench.evaluate(PlanChange("", experts_on_cpu(plain), "experts"))
        assert experts.budget.to_json() == again.budget.to_json()
    del asked[:]
    layers = fewest_cpu_layers(bench)
    fast = _budgets(asked)
    del asked[:]
    best = _plain_layers(bench)
    assert layers.changes["runtime.n_gpu_layers"] == (0 if best is None else best)
    assert fast <= len(asked)


def _budgets(asked: list[PlanChange]) -> int:
    """The budgets the changes asked for cost (the bench computes each plan's once)."""
    return len({repr(sorted(c.changes.items())) for c in asked})


def test_the_guided_searches_find_every_threshold_from_every_guess() -> None:
    """``smallest_where``/``largest_where`` against every monotone answer and every guess
    (outside the range too), never asking outside the range."""
    for lo, hi in ((1, 1), (1, 2), (1, 9), (0, 12)):
        for answer, guess in itertools.product(range(lo, hi + 1), range(lo - 2, hi + 3)):
            seen: list[int] = []

            def from_answer(n: int, t: int = answer, seen: list[int] = seen) -> bool:
                seen.append(n)
                return n >= t

            assert smallest_where(lo, hi, from_answer, guess) == answer
            assert all(lo <= n <= hi for n in seen)

        for answer, guess in itertools.product(range(lo - 1, hi + 1), range(lo - 2, hi + 3)):

            def up_to(n: int, t: int = answer) -> bool:
                return n <= t

            expected = None if answer < lo else answer
            assert largest_where(lo, hi, up_to, lambda g=guess: g) == expected
            assert largest_where(lo, hi, up_to) == expected


@pytest.mark.parametrize(
    "changes",
    [
        {"device": "rtx-4070-super", "runtime.ctx": 131072},
        {"device": "rtx-3060-12gb", "runtime.ctx": 65536, "runtime.moe": "gpu"},
    ],
)
def test_the_bench_reuses_a_budget_only_for_its_own_plan(changes: dict[str, Any]) -> None:
    """Each ranked answer's budget, computed once per plan on the bench, is the whole budget
    ``budget_for`` gives its plan afresh (not another plan's kept under a like key)."""
    pctx = PlanningContext(MachineFacts(HOST, (), ()), model_card_info(MOE))
    resolved = resolve(plan_with(Plan(), {"model.card": MOE, **changes}), pctx)
    ranked = fit_suggestions(resolved, budget_for(resolved))
    assert len({s.plan.to_json() for s in ranked}) == len(ranked) > 4
    for s in ranked:
        assert s.budget.to_json() == budget_for(resolve(s.plan, pctx)).to_json(), s.message
