"""The workbench without Qt: what both faces plan with, and the answers they show.

Each test drives ``Workbench`` as the window and ``mtpstudio plan`` do, on the demo card (no
detection: the catalogue card is the machine), and checks an answer against the planner run
directly on the same facts.
"""

from __future__ import annotations

from typing import Any

import pytest

import mtpstudio.core.usecases.workbench as workbench_module
from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import budget_for, machine_for, resolve
from mtpstudio.core.usecases.planning_context import planning_context_for
from mtpstudio.core.usecases.workbench import Workbench, evaluate_plan


def _bench(plan: Plan) -> Workbench:
    bench = Workbench()
    bench.set_model(load_model_info(plan.model))
    return bench


def test_nothing_is_planned_before_the_model_is_read() -> None:
    bench = Workbench()
    plan = Plan()
    assert bench.context(plan) is None
    assert bench.evaluation(plan) is None
    assert bench.levers(plan) == []
    assert bench.demo_defaults(plan, frozenset()) == (plan, "")


def test_an_evaluation_is_kept_for_its_plan_and_forgotten_with_the_facts() -> None:
    plan = Plan()
    bench = _bench(plan)
    first = bench.evaluation(plan)
    assert first is not None and first.error is None and first.budget is not None
    assert bench.evaluation(plan) is first  # the same Plan object: no second evaluation
    assert bench.cached(plan_with(plan, {"runtime.ctx": plan.runtime.ctx // 2})) is None
    bench.set_model(load_model_info(plan.model))  # a new fact plans anew
    assert bench.cached(plan) is None
    again = bench.evaluation(plan)
    assert again is not None and again is not first and again.argv == first.argv


def test_the_workbench_answers_what_the_planner_answers_on_the_same_facts() -> None:
    plan = Plan()
    bench = _bench(plan)
    evaluation = bench.evaluation(plan)
    assert evaluation is not None and evaluation.budget is not None
    pctx = planning_context_for(plan, machine_for(None), load_model_info(plan.model))
    direct = budget_for(resolve(plan, pctx))
    assert [d.segments for d in evaluation.budget.devices] == [d.segments for d in direct.devices]


def test_a_smaller_context_needs_a_smaller_kv_cache_on_the_workbench() -> None:
    plan = Plan()
    bench = _bench(plan)
    small = plan_with(plan, {"runtime.ctx": 4096})
    full, reduced = bench.evaluation(plan), bench.evaluation(small)
    assert full is not None and reduced is not None
    assert full.budget is not None and reduced.budget is not None
    # the fit may spend the freed room on weights, so the cache is what must shrink
    kv_full = full.budget.devices[0].segments["kv_cache"]
    kv_small = reduced.budget.devices[0].segments["kv_cache"]
    assert 0 < kv_small < kv_full


def test_a_plan_without_a_command_line_keeps_its_budget_and_says_why() -> None:
    plan = plan_with(Plan(), {"runtime.ctx": 4096, "device": "CUDA7"})
    bench = _bench(plan)
    pctx = bench.context(plan)
    assert pctx is not None
    evaluation = evaluate_plan(plan, pctx)
    assert evaluation.result is None and evaluation.argv is None
    assert evaluation.error  # one sentence for the user
    assert "\n" not in evaluation.error


def test_draft_settings_are_greyed_by_mtp_only_without_a_draft_model() -> None:
    plan = Plan()
    bench = _bench(plan)
    build = documented_build(EngineFlavour.UPSTREAM, None)
    reasons = bench.disabled_reasons(plan, build)
    assert reasons["draft.gpu_layers"] == "no draft model is chosen"
    if "mtp.enabled" in reasons:
        assert reasons["mtp.enabled=on"] == reasons["mtp.enabled"]


def test_the_demo_defaults_follow_the_published_setup_and_leave_given_settings() -> None:
    plan = Plan()
    bench = _bench(plan)
    changed, said = bench.demo_defaults(plan, frozenset())
    kept, _ = bench.demo_defaults(plan, frozenset({"runtime.ctx"}))
    assert kept.runtime.ctx == plan.runtime.ctx
    if changed != plan:
        assert said  # a change is explained


def test_one_lever_ranking_per_plan_and_set_of_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[Plan] = []
    real = workbench_module.fit_suggestions

    def counted(resolved: Any) -> Any:
        runs.append(resolved.plan)
        return real(resolved)

    monkeypatch.setattr(workbench_module, "fit_suggestions", counted)
    plan = Plan()
    bench = _bench(plan)
    assert bench.kept_levers(plan) is None
    first = bench.levers(plan)
    assert first and bench.levers(plan) == first and bench.kept_levers(plan) == first
    assert len(runs) == 1  # the Budget page, its menu and the Desktop page share it
    other = plan_with(plan, {"runtime.ctx": 8192})
    assert bench.kept_levers(other) is None
    bench.levers(other)
    assert len(runs) == 2
    # a ranking made on facts since replaced is not kept
    stale = bench.resolved(other)
    assert stale is not None
    bench.set_speed(bench.speed)
    bench.keep_levers(stale, first)
    assert bench.kept_levers(other) is None
