"""Preparing a launch refuses a resolved plan that would need replanning; replanning is its own
step (``replan_for_here``), taken before it. Real tiny model, real upstream build, no Qt."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.plans import cpu_plan

from mtpstudio.core.detect.engines import probe_engine_file
from mtpstudio.core.errors import ServerError
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import ResolvedPlan, machine_for, resolve
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.server.launch import preflight
from mtpstudio.core.usecases.launch import (
    launch_machine,
    prepare_resolved_launch,
    replan_for_here,
)
from mtpstudio.core.usecases.planning_context import planning_context_for


def _resolved_without_gpu(plan: Plan, binary: Path, *, probed: bool = True) -> ResolvedPlan:
    """``plan`` resolved as the pages resolve it on a computer with no GPU (the build probed,
    or none found)."""
    build = probe_engine_file(binary, SubprocessRunner()).to_build()
    assert build is not None
    _path, model, draft = preflight(plan, build)
    machine = launch_machine(build, machine_for(None)) if probed else machine_for(None)
    return resolve(plan, planning_context_for(plan, machine, model, draft=draft))


def test_a_plan_for_a_card_not_here_is_refused_until_it_is_replanned(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path]
) -> None:
    binary = engine("upstream")
    plan = cpu_plan(binary, tiny_model("dense"), device="rtx-4070-super")
    shown = _resolved_without_gpu(plan, binary)
    assert shown.target.device.is_gpu  # the pages planned for the catalogue card
    with pytest.raises(ServerError) as refused:
        prepare_resolved_launch(shown)
    assert "RTX 4070 SUPER, which is not in this computer" in str(refused.value)
    assert "Replan first" in (refused.value.hint or "")

    here = replan_for_here(shown)
    assert here.plan.device == "auto" and not here.target.device.is_gpu
    prepared = prepare_resolved_launch(here)
    assert prepared.prediction is not None
    assert prepared.prediction()[1] == "CPU"
    assert replan_for_here(here) == here  # nothing left to replan


def test_a_named_build_never_probed_is_refused_until_it_is_replanned(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path]
) -> None:
    binary = engine("upstream")
    plan = cpu_plan(binary, tiny_model("dense"))
    shown = _resolved_without_gpu(plan, binary, probed=False)
    assert not shown.build.probed  # planned with the documented flags
    with pytest.raises(ServerError) as refused:
        prepare_resolved_launch(shown)
    assert str(binary) in str(refused.value)
    assert "Replan first" in (refused.value.hint or "")

    here = replan_for_here(shown)
    assert here.build.probed and here.build.build.binary == binary
    prepared = prepare_resolved_launch(here)
    assert Path(prepared.spec.argv[0]) == binary
