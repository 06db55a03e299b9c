"""The speed estimate's inputs on this computer: its probed rates and its stored benchmarks."""

from __future__ import annotations

import logging
from pathlib import Path

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.results import BenchReport
from mtpstudio.core.detect.gather import detect_for
from mtpstudio.core.engines.profiles import documented_profile
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_from_json
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    PlanningContext,
    SpeedEstimate,
    machine_for,
    resolve,
    speed_for,
)
from mtpstudio.core.speed.acceptance import Acceptance, from_counters
from mtpstudio.core.speed.estimate import DEFAULT_DEPTH
from mtpstudio.core.speed.host_rates import ASSUMED_HOST, load_host_rates
from mtpstudio.core.speed.inputs import SpeedInputs, runs_from_history
from mtpstudio.core.usecases.planning_context import planning_context_for

log = logging.getLogger(__name__)


def load_speed_inputs(*, probe: bool = True, history: BenchHistory | None = None) -> SpeedInputs:
    """This computer's rates (probed once, cached; ``probe=False``: only a cached probe) and
    its stored benchmark runs (a history that cannot be read counts as none, said once)."""
    host = load_host_rates(probe=probe) or ASSUMED_HOST
    try:
        runs = runs_from_history((history or BenchHistory()).entries())
    except MtpStudioError as exc:
        log.warning("mtpstudio: %s; speed estimates use no stored benchmark.", exc)
        runs = ()
    return SpeedInputs(host, runs)


def run_acceptance(report: BenchReport, plan: Plan) -> Acceptance | None:
    """The acceptance a run measured (None: it did not draft)."""
    rate = report.aggregate_accept_rate
    if not report.total_draft or rate is None:
        return None
    shares = report.metrics.accepted_per_position if report.metrics is not None else ()
    if not shares:  # the counters give the drafts a step made, p-min's stops included
        counted = from_counters(
            report.total_predicted,
            report.total_draft,
            report.total_draft_accepted,
            max(1, plan.mtp.draft_max),
            plan.mtp.draft_p_min,
            "this run's",
            documented_profile(plan.engine.flavour).speed.first_draft_kept,
        )
        if counted is not None:
            return counted
    return Acceptance(
        rate=rate,
        depth=plan.mtp.draft_max,
        per_position=shares,
        source="this run's",
        measured=True,
    )


def run_context(report: BenchReport) -> int:
    """The context a run's decoding saw on average: its prompts and half its answers."""
    samples = [s for c in report.categories for s in c.samples]
    if not samples:
        return DEFAULT_DEPTH
    prompt = sum(s.prompt_n for s in samples) / len(samples)
    answer = sum(s.predicted_n for s in samples) / len(samples)
    return max(1, round(prompt + answer / 2))


def estimate_beside(report: BenchReport, pctx: PlanningContext) -> SpeedEstimate | None:
    """The estimate of the plan a run benchmarked, beside what it measured (its error).

    The estimate uses the run's own acceptance and context, so the error is the speed model's
    alone; None when the run names no plan, the plan is of another model than ``pctx``'s, or
    nothing was decoded.
    """
    measured = report.decode_tok_s
    if report.plan_json is None or measured is None or measured <= 0:
        return None
    try:
        plan = plan_from_json(report.plan_json)
        if not _same_model(plan, pctx.model):
            return None
        resolved = resolve(plan, pctx)
        speed = speed_for(
            resolved, acceptance=run_acceptance(report, plan), context=run_context(report)
        )
    except MtpStudioError:
        return None
    return speed.with_measurement(measured, "this run")


def _same_model(plan: Plan, model: ModelInfo) -> bool:
    """The plan's file is the one ``model`` was read from (a demo card is never launched)."""
    if plan.model.path is None:
        return False
    wanted = Path(plan.model.path).expanduser().resolve()
    return any(Path(p).expanduser().resolve() == wanted for p in model.paths[:1])


def with_estimate(report: BenchReport, pctx: PlanningContext | None) -> BenchReport:
    """``report`` with its plan's estimate beside it (kept in the stored run)."""
    if pctx is not None:
        speed = estimate_beside(report, pctx)
        if speed is not None:
            report.speed_estimate = speed.to_json()
    return report


class RunContexts:
    """What each benchmarked plan is planned with here (this machine, its model, the speed
    inputs), read once per model: the estimate printed beside a run's measured figures."""

    def __init__(self) -> None:
        self._by_model: dict[str, PlanningContext | None] = {}

    def of(self, report: BenchReport) -> PlanningContext | None:
        """None for a server without a plan, or a model that cannot be read here."""
        if report.plan_json is None:
            return None
        try:
            plan = plan_from_json(report.plan_json)
            key = plan.model.model_dump_json() + str(plan.draft.path)
            if key not in self._by_model:  # the speed inputs as stored now (runs just added too)
                machine = machine_for(detect_for(plan))
                speed = load_speed_inputs()
                self._by_model[key] = planning_context_for(plan, machine, speed=speed)
        except MtpStudioError:
            return None
        return self._by_model[key]

    def estimated(self, report: BenchReport) -> BenchReport:
        """``report`` with the estimate for its plan beside it (unchanged without one)."""
        return with_estimate(report, self.of(report))
