"""core.planning: which build a plan runs on, and the budget alone when the command line fails."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.plans import demo_plan

from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_info
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    build_choices,
    effective_build,
    evaluate,
    machine_for,
    resolve,
)

PROBED_IK = replace(
    documented_build(EngineFlavour.IK, Path("/opt/ik/llama-server")), version="b4242"
)


def test_effective_build_prefers_the_probed_build_then_the_documented_flags() -> None:
    machine = MachineFacts(HostSpec(), (), (PROBED_IK,))
    ik = effective_build(demo_plan(**{"engine.flavour": "ik"}), machine)
    assert (ik.build, ik.probed, ik.binary) == (PROBED_IK, True, "/opt/ik/llama-server")
    up = effective_build(demo_plan(**{"engine.flavour": "upstream"}), machine)
    assert (up.flavour, up.probed, up.binary) == (EngineFlavour.UPSTREAM, False, None)
    assert up.build.version == "documented"
    named = effective_build(
        demo_plan(**{"engine.flavour": "ik", "engine.binary": "/elsewhere/llama-server"}), machine
    )
    assert not named.probed and named.build.binary == Path("/elsewhere/llama-server")


def test_build_choices_list_probed_builds_then_missing_flavours() -> None:
    choices = build_choices(MachineFacts(HostSpec(), (), (PROBED_IK,)))
    assert [(c.flavour, c.probed) for c in choices] == [
        (EngineFlavour.IK, True),
        (EngineFlavour.UPSTREAM, False),
    ]
    assert [c.probed for c in build_choices(machine_for(None))] == [False, False]


def test_budget_for_matches_evaluate_and_survives_a_command_line_error() -> None:
    pctx = PlanningContext(machine_for(None), model_card_info(DEFAULT_MODEL_CARD))
    plan = demo_plan()
    result = evaluate(plan, pctx, suggest=False)
    resolved = resolve(plan, pctx)
    target, budget = resolved.target, budget_for(resolved)
    assert target == result.target and budget == result.budget
    # A probed build without any spelling of the context size: no command line, same budget.
    up = documented_build(EngineFlavour.UPSTREAM, Path("/opt/up/llama-server"))
    no_ctx = replace(up, version="b1", accepted_flags=up.accepted_flags - {"-c", "--ctx-size"})
    crippled = PlanningContext(MachineFacts(HostSpec(), (), (no_ctx,)), pctx.model)
    with pytest.raises(AdapterError):
        evaluate(plan, crippled, suggest=False)
    again = resolve(plan, crippled)
    assert (again.target, budget_for(again)) == (target, budget)


@pytest.mark.parametrize("flavour", list(EngineFlavour))
def test_without_a_probed_build_the_result_says_so(flavour: EngineFlavour) -> None:
    pctx = PlanningContext(machine_for(None), model_card_info(DEFAULT_MODEL_CARD))
    result = evaluate(demo_plan(**{"engine.flavour": flavour.value}), pctx, suggest=False)
    assert any("documented flags" in w for w in result.warnings)
    assert result.spec.flavour is flavour
