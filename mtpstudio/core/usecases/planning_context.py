"""The one recipe for what a plan is planned with: the machine, the model, its draft model, the
stored measurements and the speed inputs (every face builds its ``PlanningContext`` here)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Literal

from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.memory.measured import Reconciliation
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts, PlanningContext
from mtpstudio.core.server.reconcile import load_measurements
from mtpstudio.core.speed.inputs import SpeedInputs


class _Read(Enum):
    """Read it from the plan's file (the default for ``draft``)."""

    FROM_PLAN = "from the plan"


FROM_PLAN: Literal[_Read.FROM_PLAN] = _Read.FROM_PLAN


def planning_context_for(
    plan: Plan,
    machine: MachineFacts,
    model: ModelInfo | None = None,
    *,
    draft: ModelInfo | Literal[_Read.FROM_PLAN] | None = FROM_PLAN,
    measurements: Mapping[tuple[str, str], Reconciliation] | None = None,
    speed: SpeedInputs | None = None,
) -> PlanningContext:
    """What ``plan`` is planned with on ``machine``, the same for the CLI and the GUI.

    ``model``: the model's header when the caller has read it already (else read from the
    plan's file or card); ``draft``: the separate draft model's header (by default read from
    the plan's ``draft.path`` when it names one; None: plan without it); ``measurements``: the
    stored launches (by default every one stored on this computer, so the budget marks the
    figures a launch of the same build on the same device confirmed); ``speed``: the rates and
    stored runs of the speed estimate (default: the stated desktop, no runs).

    Raises:
        MtpStudioError: the model or the draft model cannot be read.
    """
    info = model if model is not None else load_model_info(plan.model)
    if draft is FROM_PLAN:
        draft = read_model_info(plan.draft.path) if plan.draft.path is not None else None
    return PlanningContext(
        machine,
        info,
        draft,
        measurements=load_measurements() if measurements is None else measurements,
        speed=speed if speed is not None else SpeedInputs(),
    )
