"""Benchmark a running server: the nine categories, the doctor's findings, the history.

One implementation for ``mtpstudio bench`` and the GUI's Benchmark tab. The benchmark's plain
types are re-exported here for the GUI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mtpstudio.core.bench.doctor import Finding, diagnose
from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.prompts import BenchPrompt, load_prompts
from mtpstudio.core.bench.results import BenchReport, BenchSettings
from mtpstudio.core.bench.runner import run_bench
from mtpstudio.core.bench.target import BenchProgress, BenchTarget, CancelToken, no_progress
from mtpstudio.core.bench.vram import VramSampler
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan import Plan
from mtpstudio.core.planning import PlanningContext
from mtpstudio.core.usecases.speed import with_estimate

__all__ = [
    "BenchOutcome",
    "BenchProgress",
    "BenchReport",
    "BenchSettings",
    "Finding",
    "conclude",
    "prompts_for",
    "run_benchmark",
    "vram_sampler",
]


@dataclass(frozen=True)
class BenchOutcome:
    """A finished (or stopped) run: the report, the doctor's findings, and where it is stored.

    ``run_id`` is its history id (None: not stored); ``history_error`` says why not.
    """

    report: BenchReport
    findings: tuple[Finding, ...]
    run_id: int | None
    history_error: MtpStudioError | None = None


def prompts_for(categories: Iterable[str] | None) -> list[BenchPrompt]:
    """The benchmark prompts, only those of ``categories`` when given."""
    wanted = set(categories) if categories is not None else None
    return [p for p in load_prompts() if wanted is None or p.category in wanted]


def vram_sampler(gpu: bool) -> VramSampler:
    """A VRAM sampler for a server on a GPU (a disabled one on the CPU)."""
    return VramSampler() if gpu else VramSampler.disabled()


def conclude(
    report: BenchReport, plan: Plan | None, history: BenchHistory | None, kind: str = "bench"
) -> BenchOutcome:
    """The doctor's findings for a run of ``plan``'s server, and the run stored in ``history``."""
    findings = tuple(diagnose(report, plan))
    if history is None or (report.cancelled and not report.categories):
        return BenchOutcome(report, findings, None)  # cancelled before a category: no run
    try:
        run_id = history.add_report(report, kind)
    except MtpStudioError as exc:
        return BenchOutcome(report, findings, None, exc)
    return BenchOutcome(report, findings, run_id)


def run_benchmark(
    target: BenchTarget,
    prompts: Sequence[BenchPrompt],
    settings: BenchSettings,
    *,
    history: BenchHistory | None,
    cancel: CancelToken | None = None,
    progress: Callable[[BenchProgress], None] = no_progress,
    vram: VramSampler | None = None,
    pctx: PlanningContext | None = None,
) -> BenchOutcome:
    """Benchmark ``target``, ask the doctor, and store the run in ``history`` (None: not).

    With ``pctx`` (the machine and the model of the server's plan) the plan's speed estimate
    is put beside the measurement, with its error, and stored with the run.
    """
    report = run_bench(target, prompts, settings, cancel=cancel, progress=progress, vram=vram)
    return conclude(with_estimate(report, pctx), target.plan, history)
