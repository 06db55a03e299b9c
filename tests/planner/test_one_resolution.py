"""One ResolvedPlan: the budget and the command line read the MTP it decided, never decide again."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from support.plans import demo_plan

from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_info
from mtpstudio.core.engines.build import MtpSupport
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.memory.budget import budget_of
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    budget_inputs,
    resolve,
)


def _context(can_draft: bool) -> PlanningContext:
    """The demo card with one probed upstream build that can (or cannot) draft with MTP."""
    up = documented_build(EngineFlavour.UPSTREAM, Path("/opt/up/llama-server"))
    build = replace(up, version="b1")
    if not can_draft:  # an older build: its --spec-type has no draft-mtp
        build = replace(build, spec_types=("none", "draft-simple"), mtp=MtpSupport.UNAVAILABLE)
    return PlanningContext(
        MachineFacts(HostSpec(), (), (build,)), model_card_info(DEFAULT_MODEL_CARD)
    )


@pytest.mark.parametrize(
    ("mtp", "can_draft", "active"),
    [(None, True, True), (True, True, True), (False, True, False), (None, False, False),
     (True, False, False)],
)  # fmt: skip
def test_the_budget_counts_mtp_exactly_as_resolved(
    mtp: bool | None, can_draft: bool, active: bool
) -> None:
    resolved = resolve(demo_plan(**{"mtp.enabled": mtp}), _context(can_draft))
    assert resolved.mtp.active is active
    budget = budget_for(resolved)
    assert budget.effective.mtp_active is active
    assert (budget.parts.get("mtp_kv_cache", 0) > 0) is active
    assert (budget.effective.n_rs_seq > 0) is active  # the recurrent-state rollback copies


def test_the_budget_is_computed_from_one_frozen_record_of_its_inputs() -> None:
    resolved = resolve(demo_plan(**{"mtp.enabled": True}), _context(True))
    inputs = budget_inputs(resolved)
    assert inputs.plan is resolved.effective and inputs.mtp_active is resolved.mtp.active
    assert inputs.target is resolved.target.device
    with pytest.raises(FrozenInstanceError):
        inputs.mtp_active = False  # type: ignore[misc]
    assert budget_of(inputs) == budget_for(resolved)
    without = budget_of(replace(inputs, mtp_active=False))
    card, card_without = budget_of(inputs).devices[0], without.devices[0]
    assert card_without.segments["mtp_kv_cache"] == 0 < card.segments["mtp_kv_cache"]
