"""The argv builder called as the planner calls it, for tests that build one command.

``build_launch_spec`` takes the planner's decisions; a test that has no resolved plan makes
them here the way ``planner.resolve`` makes them for a single-device plan: MTP by
``decide_mtp``, the CPU as the target when the plan names it.
"""

from __future__ import annotations

from typing import Any

from mtpstudio.core.engines.argv import build_launch_spec
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.mtp import MtpDecision, decide_mtp
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan


def launch_spec(
    plan: Plan,
    build: EngineBuild,
    model: ModelInfo | None = None,
    *,
    mtp: MtpDecision | None = None,
    cpu_only: bool | None = None,
    **options: Any,
) -> LaunchSpec:
    """``build_launch_spec`` with MTP decided and the CPU target read from the plan unless
    the test passes its own."""
    decision = mtp if mtp is not None else decide_mtp(plan, build, model)
    cpu = plan.device == "cpu" if cpu_only is None else cpu_only
    return build_launch_spec(plan, build, model, mtp=decision, cpu_only=cpu, **options)
