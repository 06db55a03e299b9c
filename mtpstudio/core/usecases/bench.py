"""Benchmark a running server: the nine categories, the doctor's findings, the history.

One implementation for ``mtpstudio bench`` and the GUI's Benchmark tab. The benchmark's plain
types, its A/B, gate and concurrency runs, their text and the stored history are re-exported
here for both faces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from mtpstudio.core.bench.ab import (
    PRESETS,
    ABReport,
    ABVariant,
    TargetOpener,
    drafting_off_variant,
    run_ab,
    run_ab_rounds,
)
from mtpstudio.core.bench.bench_text import (
    render_ab_text,
    render_concurrency_text,
    render_gate_text,
    render_text,
)
from mtpstudio.core.bench.client import BenchClient, CompletionSample
from mtpstudio.core.bench.concurrency import ConcurrencyReport, run_concurrent
from mtpstudio.core.bench.doctor import Finding, diagnose
from mtpstudio.core.bench.gate import GateReport, gate_against
from mtpstudio.core.bench.history import BenchHistory, HistoryEntry, export_entry, runs_of_plans
from mtpstudio.core.bench.prompts import BenchPrompt, load_prompts, select
from mtpstudio.core.bench.results import BenchReport, BenchSettings
from mtpstudio.core.bench.runner import run_bench, utc_now
from mtpstudio.core.bench.target import (
    BenchProgress,
    BenchTarget,
    CancelToken,
    ServerLauncher,
    no_progress,
)
from mtpstudio.core.bench.vram import VramSampler
from mtpstudio.core.engines.profiles import default_port_words
from mtpstudio.core.errors import BenchError, MtpStudioError
from mtpstudio.core.outside_text import visible
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import PlanningContext
from mtpstudio.core.usecases.speed import with_estimate

__all__ = [
    "PRESETS",
    "ABReport",
    "ABVariant",
    "BenchClient",
    "BenchHistory",
    "BenchOutcome",
    "BenchProgress",
    "BenchPrompt",
    "BenchReport",
    "BenchSettings",
    "BenchTarget",
    "CancelToken",
    "CompletionSample",
    "ConcurrencyReport",
    "Finding",
    "GateReport",
    "HistoryEntry",
    "ServerLauncher",
    "TargetOpener",
    "VramSampler",
    "conclude",
    "diagnose",
    "drafting_off_variant",
    "export_entry",
    "gate_against",
    "load_prompts",
    "prompts_for",
    "render_ab_text",
    "render_concurrency_text",
    "render_gate_text",
    "render_text",
    "run_ab",
    "run_ab_rounds",
    "run_bench",
    "run_benchmark",
    "run_concurrent",
    "runs_of_plans",
    "select",
    "url_target",
    "utc_now",
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


def url_target(
    url: str, flavour: str, label: str, *, expect_drafts: bool, api_key: str | None
) -> BenchTarget:
    """A running server to benchmark, given by URL: checked ready, with the build it names
    (``/props``; the server's words, made visible and cut to 200 characters). With
    ``expect_drafts`` a run without drafts is flagged."""
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise BenchError(
            f"{url!r} is not a server URL", hint="Give it as http://HOST:PORT, e.g. "
            "http://127.0.0.1:8080 (a llama-server started without --port listens on "
            f"{default_port_words()})."
        )  # fmt: skip
    target = BenchTarget(
        base_url=url,
        flavour=EngineFlavour(flavour),
        label=label,
        drafting_requested=True if expect_drafts else None,
        api_key=api_key,
    )
    with BenchClient(target, 10.0) as client:
        client.check_ready()
        props = client.props()
    build = props.get("build_info") or props.get("system_fingerprint")
    shown = visible(str(build))[:200] if build else None  # the server's words, shown later
    return replace(target, engine_build=shown)
