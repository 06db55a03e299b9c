"""A/B: two servers on the same prompts, interleaved per category, with deltas; the presets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from mtpstudio.core.bench.prompts import WARMUP, BenchPrompt
from mtpstudio.core.bench.results import (
    BenchReport,
    BenchSettings,
    CategoryResult,
    MetricsCheck,
    VramPeak,
)
from mtpstudio.core.bench.runner import BenchSession, run_bench
from mtpstudio.core.bench.target import (
    BenchCancelled,
    BenchTarget,
    CancelToken,
    ProgressCallback,
    no_progress,
)
from mtpstudio.core.bench.vram import VramSampler
from mtpstudio.core.errors import BenchError
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan

GRAPHS_OFF_ENV = {"GGML_CUDA_DISABLE_GRAPHS": "1"}


@dataclass(frozen=True)
class ABVariant:
    """One side of an A/B: a Plan and the extra environment its server is started with."""

    label: str
    plan: Plan
    env: Mapping[str, str] = field(default_factory=dict)


MTP_ON = "MTP on"
MTP_OFF = "MTP off"


def preset_graphs_control(plan: Plan) -> tuple[ABVariant, ABVariant]:
    """A = the plan as is, B = the same plan with CUDA graphs disabled (re-capture control)."""
    return (
        ABVariant("CUDA graphs on", plan),
        ABVariant("CUDA graphs off", plan, dict(GRAPHS_OFF_ENV)),
    )


def preset_mtp_on_off(plan: Plan) -> tuple[ABVariant, ABVariant]:
    """A = MTP on, B = MTP off, otherwise the same plan (the runs are named by what they are)."""
    return (
        ABVariant(MTP_ON, plan_with(plan, {"mtp.enabled": True})),
        ABVariant(MTP_OFF, plan_with(plan, {"mtp.enabled": False})),
    )


def drafting_off_variant(first: ABVariant, others: Sequence[ABVariant] = ()) -> ABVariant:
    """The gate's reference: ``first`` with MTP off, named like the A/B side that already is
    exactly that (so one run is never called two names), else by what it is."""
    off = plan_with(first.plan, {"mtp.enabled": False})
    for variant in others:
        if not variant.env and variant.plan.to_json() == off.to_json():
            return replace(variant, env={})
    label = MTP_OFF if first.label == MTP_ON else f"{first.label} with MTP off"
    return ABVariant(label, off)


PRESETS = {"graphs": preset_graphs_control, "mtp": preset_mtp_on_off}


def pct_delta(a: float | None, b: float | None) -> float | None:
    """(B - A) / A in percent; None when either side is unknown or A is zero."""
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a * 100.0


@dataclass(frozen=True)
class CategoryDelta:
    """One category of an A/B."""

    category: str
    a: CategoryResult
    b: CategoryResult

    @property
    def decode_delta_pct(self) -> float | None:
        return pct_delta(self.a.decode_tps, self.b.decode_tps)

    @property
    def acceptance_delta(self) -> float | None:
        if self.a.acceptance is None or self.b.acceptance is None:
            return None
        return self.b.acceptance - self.a.acceptance

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "a_decode_tok_s": _r(self.a.decode_tps),
            "b_decode_tok_s": _r(self.b.decode_tps),
            "decode_delta_pct": _r(self.decode_delta_pct),
            "a_acceptance": _r(self.a.acceptance, 4),
            "b_acceptance": _r(self.b.acceptance, 4),
            "acceptance_delta": _r(self.acceptance_delta, 4),
            "a_ttft_ms": _r(self.a.ttft_ms, 1),
            "b_ttft_ms": _r(self.b.ttft_ms, 1),
        }


@dataclass(frozen=True)
class ABReport:
    """Both sides' reports, side by side."""

    a: BenchReport
    b: BenchReport

    @property
    def rows(self) -> list[CategoryDelta]:
        b_rows = {c.category: c for c in self.b.categories}
        return [
            CategoryDelta(c.category, c, b_rows[c.category])
            for c in self.a.categories
            if c.category in b_rows
        ]

    @property
    def tok_s_delta_pct(self) -> float | None:
        """B relative to A, in percent (+: B is faster)."""
        return pct_delta(self.a.tok_s, self.b.tok_s)

    def verdict(self) -> str | None:
        """One sentence naming the faster side: 'MTP off (B) ran 17.1× as fast as MTP on (A)…'."""
        a, b = self.a.tok_s, self.b.tok_s
        if a is None or b is None or a <= 0 or b <= 0:
            return None
        fast, slow = (self.b, self.a) if b >= a else (self.a, self.b)
        fast_side, slow_side = ("B", "A") if b >= a else ("A", "B")
        ratio = max(a, b) / min(a, b)
        how = (
            f"{ratio:.1f}× as fast as" if ratio >= 1.5 else f"{(ratio - 1) * 100:.1f} % faster than"
        )
        if ratio < 1.005:
            return (
                f"{self.a.label} (A) and {self.b.label} (B) ran at the same speed ({a:.2f} tok/s)."
            )
        return (
            f"{fast.label} ({fast_side}) ran {how} {slow.label} ({slow_side}): "
            f"{fast.tok_s:.2f} vs {slow.tok_s:.2f} tok/s."
        )

    @property
    def error(self) -> str | None:
        return self.a.error or self.b.error

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "aggregate": {
                "a_tok_s": _r(self.a.tok_s),
                "b_tok_s": _r(self.b.tok_s),
                "tok_s_delta_pct": _r(self.tok_s_delta_pct),
                "a_accept_rate": _r(self.a.aggregate_accept_rate, 4),
                "b_accept_rate": _r(self.b.aggregate_accept_rate, 4),
            },
        }


def run_ab(
    a: BenchTarget,
    b: BenchTarget,
    prompts: Sequence[BenchPrompt],
    settings: BenchSettings | None = None,
    *,
    cancel: CancelToken | None = None,
    progress: ProgressCallback = no_progress,
    vram: VramSampler | None = None,
) -> ABReport:
    """Both servers on every category, alternating who goes first (A B, B A, A B ...).

    Alternating cancels slow drift (thermals, caches) between the two sides. Both servers must
    be up at once. A failing side stops the run; both reports keep their finished categories.
    """
    settings = settings or BenchSettings()
    cancel = cancel or CancelToken()
    total = len(prompts) * max(1, settings.repeats)
    sa = BenchSession(a, settings, cancel=cancel, progress=progress, total_requests=total)
    sb = BenchSession(b, settings, cancel=cancel, progress=progress, total_requests=total)
    sampler = vram or VramSampler.disabled()
    current = sa
    try:
        with sampler:
            if settings.warmup and prompts:
                for current in (sa, sb):
                    current.warm_up(WARMUP)
            for current in (sa, sb):
                current.begin_measuring()
            for i, prompt in enumerate(prompts):
                order = (sa, sb) if i % 2 == 0 else (sb, sa)
                for current in order:
                    current.run_category(prompt)
            for current in (sa, sb):
                current.finish_measuring()
    except (BenchError, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: keep what finished, like a cancel
            exc = BenchCancelled("interrupted")
        current.fail(exc)
        other = sb if current is sa else sa
        if other.report.error is None:
            other.report.error = f"stopped because {current.target.name} failed"
            other.report.cancelled = current.report.cancelled
    finally:
        sa.close()
        sb.close()
    peaks = sampler.peaks()
    sa.report.vram = peaks
    sb.report.vram = peaks
    return ABReport(sa.report, sb.report)


TargetOpener = Callable[[], AbstractContextManager[BenchTarget]]


def run_ab_rounds(
    open_a: TargetOpener,
    open_b: TargetOpener,
    prompts: Sequence[BenchPrompt],
    settings: BenchSettings | None = None,
    *,
    cancel: CancelToken | None = None,
    progress: ProgressCallback = no_progress,
    vram: Callable[[], VramSampler] | None = None,
) -> ABReport:
    """A/B for servers that cannot be up together (one GPU): one side at a time, in rounds.

    Each of ``settings.repeats`` rounds starts a side, runs every category once and stops it;
    the order alternates (A B, B A, A B ...) so slow drift falls on both sides. Medians and sums
    are over the rounds, as with repeats. A failing side ends the run; what finished is kept.
    """
    settings = settings or BenchSettings()
    cancel = cancel or CancelToken()
    once = replace(settings, repeats=1)
    merged: dict[str, BenchReport | None] = {"a": None, "b": None}
    openers = {"a": open_a, "b": open_b}
    for r in range(max(1, settings.repeats)):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            sampler = vram() if vram is not None else None
            with openers[side]() as target:
                part = run_bench(target, prompts, once, cancel=cancel, progress=progress,
                                 vram=sampler)  # fmt: skip
            merged[side] = part if merged[side] is None else merge_reports(merged[side], part)
            if part.error:
                return _ab_from(merged, settings, failed=side)
    return _ab_from(merged, settings, failed=None)


def merge_reports(first: BenchReport | None, later: BenchReport) -> BenchReport:
    """One side's rounds as one report: samples joined per category, totals and peaks added."""
    if first is None:
        return later
    rows = {c.category: c for c in first.categories}
    for c in later.categories:
        old = rows.get(c.category)
        rows[c.category] = CategoryResult(c.category, (old.samples if old else ()) + c.samples)
    out = replace(first, categories=list(rows.values()))
    out.wall_s_total = first.wall_s_total + later.wall_s_total
    out.error = first.error or later.error
    out.cancelled = first.cancelled or later.cancelled
    if first.metrics is not None and later.metrics is not None:
        keys = set(first.metrics.delta) | set(later.metrics.delta)
        out.metrics = MetricsCheck(
            delta={k: first.metrics.delta.get(k, 0.0) + later.metrics.delta.get(k, 0.0)
                   for k in keys},
            expected={k: v + later.metrics.expected.get(k, 0)
                      for k, v in first.metrics.expected.items()},
        )  # fmt: skip
    else:
        out.metrics = None
    peaks = {p.device: p for p in first.vram}
    for p in later.vram:
        if p.device not in peaks or p.used_bytes > peaks[p.device].used_bytes:
            peaks[p.device] = VramPeak(p.device, p.used_bytes, p.total_bytes,
                                       p.samples + (peaks[p.device].samples
                                                    if p.device in peaks else 0))  # fmt: skip
    out.vram = list(peaks.values())
    out.settings = replace(first.settings, repeats=len(next(iter(rows.values())).samples)
                           if rows else first.settings.repeats)  # fmt: skip
    return out


def _ab_from(
    merged: dict[str, BenchReport | None], settings: BenchSettings, failed: str | None
) -> ABReport:
    a, b = merged["a"], merged["b"]
    if a is None or b is None:  # B never ran because A failed first (or the other way round)
        done = a or b
        assert done is not None
        empty = replace(done, categories=[], wall_s_total=0.0, warmup=None, metrics=None,
                        vram=[], label="A" if a is None else "B",
                        error="not run because the other side failed")  # fmt: skip
        a, b = (a or empty), (b or empty)
    elif failed is not None:
        other = b if failed == "a" else a
        if other.error is None:
            other.error = "stopped because the other side failed"
    return ABReport(a, b)


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
