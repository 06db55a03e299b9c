"""Tune: the search space for a plan on this machine, the search, and the stored result.

One implementation for ``mtpstudio tune`` and the GUI's Tune tab: ``tune_setup`` probes the
plan's build, resolves the plan on this machine (is the target a GPU?) and picks the knobs;
``run_tuning`` runs the search through the plan-server launcher and stores it in the history.
The tuner's plain types are re-exported here for the GUI.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.prompts import BenchPrompt, load_prompts, select
from mtpstudio.core.bench.results import BenchSettings
from mtpstudio.core.bench.target import CancelToken, ServerLauncher
from mtpstudio.core.bench.tune import (
    TuneConstraints,
    TuneProgress,
    TuneResult,
    TuneRow,
    run_tune,
)
from mtpstudio.core.bench.tune_space import TuneSpace, default_space
from mtpstudio.core.bench.tune_text import render_tune_text, save_tune
from mtpstudio.core.bench.vram import VramSampler
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import CacheType
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts, PlanningContext, SpeedInputs, resolve
from mtpstudio.core.usecases.launch import find_build, launch_machine
from mtpstudio.core.usecases.plan_server import PlanServerLauncher
from mtpstudio.core.usecases.planning_context import planning_context_for

__all__ = [
    "DRAFTING_KNOBS",
    "BenchHistory",
    "BenchSettings",
    "CancelToken",
    "TuneConstraints",
    "TuneOutcome",
    "TuneProgress",
    "TuneResult",
    "TuneRow",
    "TuneSetup",
    "load_prompts",
    "render_tune_text",
    "run_tuning",
    "select",
    "tune_setup",
]

DRAFTING_KNOBS = ("draft_max", "p_min", "draft_cache")
"""Space fields that only make sense when the plan drafts."""


@dataclass(frozen=True)
class TuneSetup:
    """What the search starts from: the plan, where it runs, and the knobs to turn.

    ``ignored`` says which asked-for knobs were dropped, and why (None: none were).
    """

    plan: Plan
    pctx: PlanningContext
    space: TuneSpace
    gpu: bool
    ignored: str | None = None


@dataclass(frozen=True)
class TuneOutcome:
    """A finished (or cancelled) search: the result and why it was not stored, if it was not."""

    result: TuneResult
    history_error: MtpStudioError | None = None


def tune_setup(
    plan: Plan,
    *,
    model: ModelInfo | None = None,
    machine: MachineFacts | None = None,
    kv_types: tuple[CacheType, ...] = (),
    overrides: Mapping[str, Any] | None = None,
    speed: SpeedInputs | None = None,
) -> TuneSetup:
    """Probe the plan's build, resolve the plan here and pick the search space.

    ``overrides`` replace the default values of space fields (``draft_max``, ``p_min``,
    ``draft_cache``, ``threads`` …); drafting knobs are dropped when the plan does not draft.
    ``speed``: this computer's rates and stored runs for the speed estimate that orders and
    skips candidates (default: the stated desktop, no runs).

    Raises:
        MtpStudioError: no build, an unreadable model, or a plan that cannot be resolved.
    """
    build = find_build(plan)
    pctx = planning_context_for(plan, launch_machine(build, machine), model, speed=speed)
    info = pctx.model
    gpu = not resolve(plan, pctx).cpu_only
    space = default_space(plan, info, gpu=gpu, cpu_count=os.cpu_count(), kv_types=kv_types)
    wanted = dict(overrides or {})
    ignored = None
    if not space.draft_max and any(k in wanted for k in DRAFTING_KNOBS):
        wanted = {k: v for k, v in wanted.items() if k not in DRAFTING_KNOBS}
        ignored = "the plan does not draft, so the draft options are ignored"
    return TuneSetup(plan, pctx, dataclasses.replace(space, **wanted), gpu, ignored)


def run_tuning(
    setup: TuneSetup,
    prompts: Sequence[BenchPrompt],
    *,
    launcher: ServerLauncher | None = None,
    constraints: TuneConstraints | None = None,
    settings: BenchSettings | None = None,
    cancel: CancelToken | None = None,
    progress: Callable[[TuneProgress], None] | None = None,
    history: BenchHistory | None = None,
    timeout: float | None = None,
) -> TuneOutcome:
    """Run the search (servers started by ``launcher``, by default a plan-server launcher that
    skips the reconciliation) and store it in ``history`` (None: not stored)."""
    if launcher is None:  # candidates launch on the machine they were planned for
        launcher = PlanServerLauncher(measure=False, machine=setup.pctx.machine)
        if timeout is not None:
            launcher.timeout = timeout
    result = run_tune(
        setup.plan,
        setup.pctx,
        setup.space,
        prompts,
        launcher,
        constraints=constraints,
        settings=settings,
        cancel=cancel,
        progress=progress or (lambda _: None),
        vram=VramSampler if setup.gpu else VramSampler.disabled,
    )
    if history is None:
        return TuneOutcome(result)
    try:
        save_tune(result, history)
    except MtpStudioError as exc:
        return TuneOutcome(result, exc)
    return TuneOutcome(result)
