"""The tuner: the most tokens per second that fits, measured on this machine.

The search: every candidate of the space is checked by the memory model first (those that do
not fit are skipped without launching) and estimated by the speed model, which orders them
(fastest first, so a candidate limit keeps the most promising); the starting plan is measured on
every category as the baseline, which calibrates the estimate (its measured tok/s over its
estimate), and a candidate whose calibrated estimate is more than ``PREDICTED_SLOWER`` below the
best measurement is not launched; the others are launched one at a time and benchmarked on a
short prompt subset, the slower half dropped each round (successive halving, the subset
doubling), and the finalists measured on every category. A failed launch or run is recorded
with its diagnosis and the search goes on. Cancel (a CancelToken) or the time budget stop it
with everything measured kept.

Threading: ``run_tune`` runs on one thread; the CancelToken may be set from any thread.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mtpstudio.core.bench.prompts import BenchPrompt
from mtpstudio.core.bench.results import BenchReport, BenchSettings
from mtpstudio.core.bench.runner import run_bench, utc_now
from mtpstudio.core.bench.target import CancelToken, ServerLauncher
from mtpstudio.core.bench.tune_space import Candidate, TuneSpace, expand
from mtpstudio.core.bench.vram import VramSampler
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import PlanningContext, evaluate, resolve, speed_for
from mtpstudio.core.speed.inputs import MeasuredRun, model_key
from mtpstudio.core.units import MIB

BASELINE_LABEL = "baseline (starting plan)"

PREDICTED_SLOWER = 0.15
"""A candidate whose estimate, calibrated by the baseline, is this much below the best
measurement is skipped: the speed model's ratios between plans are meant to hold within 15 %."""


class RowStatus(StrEnum):
    """Where a candidate ended."""

    BEST = "best"
    FINALIST = "finalist"
    DROPPED = "dropped"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_RUN = "not run"
    CANCELLED = "cancelled"
    MEASURED = "measured"


@dataclass(frozen=True)
class TuneConstraints:
    """What the user fixes: a context floor, a time budget, how many candidates, finalists."""

    ctx_floor: int | None = None
    time_budget_s: float | None = None
    max_candidates: int | None = None
    short_categories: int = 2
    finalists: int = 2
    skip_slower: bool = True  # skip what the speed model predicts slower (PREDICTED_SLOWER)


@dataclass(frozen=True)
class TuneRun:
    """One measurement of one candidate: which round, which categories, the benchmark."""

    stage: str  # "baseline", "round 1", "final" ...
    categories: tuple[str, ...]
    report: BenchReport
    seconds: float

    @property
    def ok(self) -> bool:
        return self.report.error is None and self.report.tok_s is not None

    @property
    def tok_s(self) -> float | None:
        return self.report.tok_s

    @property
    def acceptance(self) -> float | None:
        return self.report.aggregate_accept_rate

    @property
    def vram_peak_bytes(self) -> int | None:
        peaks = [v.used_bytes for v in self.report.vram]
        return max(peaks) if peaks else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "categories": list(self.categories),
            "tok_s": _round(self.tok_s, 3),
            "acceptance": _round(self.acceptance, 4),
            "vram_peak_bytes": self.vram_peak_bytes,
            "seconds": round(self.seconds, 2),
            "error": self.report.error,
            "report": self.report.to_dict(),
        }


@dataclass
class TuneRow:
    """One candidate in the table: fits?, what was measured, where it ended and why."""

    label: str
    changes: dict[str, Any]
    plan: Plan | None
    fits: bool | None = None
    status: RowStatus = RowStatus.NOT_RUN
    reason: str = ""
    runs: list[TuneRun] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None
    predicted_vram_bytes: int | None = None
    predicted_tok_s: float | None = None  # the speed model's decode estimate (core.speed)

    @property
    def last(self) -> TuneRun | None:
        return self.runs[-1] if self.runs else None

    @property
    def full(self) -> TuneRun | None:
        """The run over every category (baseline or final), when there is one that finished."""
        return next((r for r in self.runs if r.stage in ("baseline", "final") and r.ok), None)

    @property
    def tok_s(self) -> float | None:
        last = self.last
        return last.tok_s if last is not None and last.ok else None

    @property
    def acceptance(self) -> float | None:
        last = self.last
        return last.acceptance if last is not None else None

    @property
    def vram_peak_bytes(self) -> int | None:
        peaks = [r.vram_peak_bytes for r in self.runs if r.vram_peak_bytes is not None]
        return max(peaks) if peaks else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "changes": dict(self.changes),
            "fits": self.fits,
            "predicted_vram_bytes": self.predicted_vram_bytes,
            "predicted_tok_s": _round(self.predicted_tok_s, 2),
            "status": self.status.value,
            "reason": self.reason,
            "tok_s": _round(self.tok_s, 3),
            "acceptance": _round(self.acceptance, 4),
            "vram_peak_bytes": self.vram_peak_bytes,
            "diagnosis": self.diagnosis,
            "runs": [r.to_dict() for r in self.runs],
            "plan": None if self.plan is None else self.plan.model_dump(mode="json"),
        }


@dataclass(frozen=True)
class TuneProgress:
    """After each step: runs done and left (estimated), elapsed and estimated remaining time,
    and a snapshot of the row just measured (``TuneRow.to_dict``, safe to hand to any thread)."""

    stage: str
    label: str
    done: int
    left: int
    elapsed_s: float
    remaining_s: float | None
    row: dict[str, Any] | None = None


TuneProgressCallback = Callable[[TuneProgress], None]


def _no_progress(_: TuneProgress) -> None:
    """The default progress callback: ignore."""


@dataclass
class TuneResult:
    """The table, the best plan and its evidence, the gain over the starting plan."""

    started_at: str
    baseline: TuneRow
    rows: list[TuneRow]
    space: TuneSpace
    constraints: TuneConstraints
    categories: tuple[str, ...]
    settings: BenchSettings
    best: TuneRow | None = None
    gain: float | None = None
    gain_basis: str = ""
    seconds: float = 0.0
    cancelled: bool = False
    budget_reached: bool = False
    note: str = ""
    history_id: int | None = None

    @property
    def all_rows(self) -> list[TuneRow]:
        return [self.baseline, *self.rows]

    @property
    def skipped_by_memory(self) -> int:
        return sum(1 for r in self.rows if r.status is RowStatus.SKIPPED and r.fits is False)

    @property
    def skipped_by_speed(self) -> int:
        return sum(1 for r in self.rows if r.status is RowStatus.SKIPPED and r.fits is not False)

    @property
    def launched(self) -> int:
        return sum(1 for r in self.all_rows if r.runs or r.status is RowStatus.FAILED)

    @property
    def best_plan(self) -> Plan | None:
        return None if self.best is None else self.best.plan

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "seconds": round(self.seconds, 2),
            "cancelled": self.cancelled,
            "budget_reached": self.budget_reached,
            "note": self.note,
            "categories": list(self.categories),
            "settings": self.settings.to_dict(),
            "constraints": {
                "ctx_floor": self.constraints.ctx_floor,
                "time_budget_s": self.constraints.time_budget_s,
                "max_candidates": self.constraints.max_candidates,
                "short_categories": self.constraints.short_categories,
                "finalists": self.constraints.finalists,
            },
            "space": self.space.to_dict(),
            "counts": {
                "candidates": len(self.rows),
                "skipped_by_memory_model": self.skipped_by_memory,
                "skipped_by_speed_model": self.skipped_by_speed,
                "launched": self.launched,
                "failed": sum(1 for r in self.all_rows if r.status is RowStatus.FAILED),
            },
            "best": None if self.best is None else self.best.label,
            "best_plan": None if self.best_plan is None else self.best_plan.model_dump(mode="json"),
            "gain": _round(self.gain, 4),
            "gain_basis": self.gain_basis,
            "baseline": self.baseline.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "history_id": self.history_id,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# ---- the memory-model filter (pure) ------------------------------------------------------------


@dataclass(frozen=True)
class FitCheck:
    """The models' verdict on a candidate: fits (None: unknown), why not, the predicted device
    use and decode tokens per second."""

    fits: bool | None
    why: str
    used_bytes: int | None
    tok_s: float | None = None


def check_fit(plan: Plan, pctx: PlanningContext) -> FitCheck:
    """The memory model's verdict and the speed model's estimate of ``plan``."""
    try:
        result = evaluate(plan, pctx, suggest=False)
    except MtpStudioError as exc:
        return FitCheck(False, f"cannot be planned: {exc}", None)
    budget = result.budget
    used = sum(d.used_bytes for d in budget.devices) if budget.devices else None
    tok_s = result.speed.decode_tok_s if result.speed is not None else None
    if budget.fits is not False:
        return FitCheck(budget.fits, "", used, tok_s)
    for d in budget.devices:
        if d.fits is False and d.free_bytes is not None and d.total_bytes is not None:
            return FitCheck(
                False,
                f"memory model: needs {d.used_bytes / MIB:,.0f} MiB of {d.id}'s "
                f"{d.total_bytes / MIB:,.0f} MiB ({-d.free_bytes / MIB:,.0f} MiB short)",
                used,
                tok_s,
            )
    return FitCheck(False, "memory model: not enough free system RAM", used, tok_s)


def build_rows(
    start: Plan,
    candidates: Sequence[Candidate],
    pctx: PlanningContext,
    max_candidates: int | None,
) -> list[TuneRow]:
    """Plans for the candidates, each checked by the memory model and estimated by the speed
    model, the fastest estimate first (ties keep the space's order); beyond the limit: not run."""
    rows: list[TuneRow] = []
    for cand in candidates:
        try:
            plan = plan_with(start, cand.changes)
        except MtpStudioError as exc:
            rows.append(TuneRow(cand.label, cand.changes, None, False, RowStatus.SKIPPED,
                                f"not a valid plan: {exc}"))  # fmt: skip
            continue
        check = check_fit(plan, pctx)
        row = TuneRow(cand.label, cand.changes, plan, check.fits,
                      predicted_vram_bytes=check.used_bytes,
                      predicted_tok_s=check.tok_s)  # fmt: skip
        if check.fits is False:
            row.status, row.reason = RowStatus.SKIPPED, check.why
        rows.append(row)
    rows.sort(key=lambda r: -(r.predicted_tok_s or 0.0) if r.status is RowStatus.NOT_RUN else 0.0)
    admitted = 0
    for row in rows:
        if row.status is not RowStatus.NOT_RUN:
            continue
        if max_candidates is not None and admitted >= max_candidates:
            row.reason = f"beyond the candidate limit ({max_candidates})"
        else:
            admitted += 1
    return rows


def estimate_with_baseline(
    rows: Sequence[TuneRow], baseline: TuneRow, pctx: PlanningContext
) -> None:
    """Estimate the candidates again with the acceptance the baseline's run measured (the
    model on this engine, as ``SpeedInputs.acceptance_for`` finds it in the history)."""
    run = baseline.full
    if run is None or baseline.plan is None or run.acceptance is None:
        return
    report = run.report
    shares = report.metrics.accepted_per_position if report.metrics is not None else ()
    measured = MeasuredRun(
        run_id=0,
        when=report.started_at,
        plan=baseline.plan.to_data(),
        model=model_key(baseline.plan),
        flavour=baseline.plan.engine.flavour.value,
        tok_s=run.tok_s or 0.0,
        drafted=report.total_draft,
        acceptance=run.acceptance,
        depth=baseline.plan.mtp.draft_max,
        per_position=shares,
        predicted=report.total_predicted,
        accepted=report.total_draft_accepted,
        p_min=baseline.plan.mtp.draft_p_min,
    )
    again = dataclasses.replace(pctx, speed=dataclasses.replace(
        pctx.speed, runs=(*pctx.speed.runs, measured)))  # fmt: skip
    for row in [baseline, *rows]:
        if row.plan is None or row.predicted_tok_s is None:
            continue
        try:
            row.predicted_tok_s = speed_for(resolve(row.plan, again)).decode_tok_s
        except MtpStudioError:
            continue


def skip_predicted_slower(rows: Sequence[TuneRow], baseline: TuneRow) -> int:
    """After the baseline's measurement: skip the candidates the estimate, calibrated by the
    baseline (its measured tok/s over its estimate), puts ``PREDICTED_SLOWER`` or more below
    it, the best measured so far. Returns how many were skipped (none without a baseline run
    or an estimate)."""
    run = baseline.full
    if run is None or not run.tok_s or not baseline.predicted_tok_s:
        return 0
    scale = run.tok_s / baseline.predicted_tok_s
    best = run.tok_s
    skipped = 0
    for row in rows:
        if row.status is not RowStatus.NOT_RUN or row.reason or row.predicted_tok_s is None:
            continue
        expected = row.predicted_tok_s * scale
        if expected < best * (1.0 - PREDICTED_SLOWER):
            row.status = RowStatus.SKIPPED
            row.reason = (
                f"speed model: about {expected:.2f} tok/s (its estimate "
                f"{row.predicted_tok_s:.2f} × {scale:.2f}, the baseline's measured over "
                f"estimated), more than {PREDICTED_SLOWER:.0%} below the best measured "
                f"{best:.2f}: not launched"
            )
            skipped += 1
    return skipped


# ---- the search ------------------------------------------------------------------------------


def subset_tok_s(report: BenchReport, categories: Sequence[str]) -> float | None:
    """Tokens per wall-clock second over some categories of a (fuller) run."""
    rows = [c for c in report.categories if c.category in categories]
    if len(rows) != len(categories):
        return None
    wall = sum(s.wall_ms for c in rows for s in c.samples) / 1000.0
    return sum(c.predicted for c in rows) / wall if wall > 0 else None


class _Search:
    def __init__(
        self,
        result: TuneResult,
        prompts: Sequence[BenchPrompt],
        launcher: ServerLauncher,
        cancel: CancelToken,
        progress: TuneProgressCallback,
        vram: Callable[[], VramSampler],
        clock: Callable[[], float],
        estimate_again: Callable[[Sequence[TuneRow], TuneRow], None] | None = None,
    ) -> None:
        self.estimate_again = estimate_again
        self.result = result
        self.prompts = tuple(prompts)
        self.launcher = launcher
        self.cancel = cancel
        self.progress = progress
        self.vram = vram
        self.clock = clock
        self.t0 = clock()
        self.done = 0
        self.planned = 0
        self.request_s: list[float] = []  # seconds per measured request
        self.launch_s: list[float] = []  # launch + warm-up overhead per run

    @property
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def _estimate(self, n_categories: int) -> float | None:
        if not self.request_s:
            return None
        per_req = sum(self.request_s) / len(self.request_s)
        launch = sum(self.launch_s) / len(self.launch_s) if self.launch_s else 0.0
        return launch + per_req * n_categories

    def _remaining(self) -> float | None:
        est = self._estimate(len(self.prompts))
        if est is None:
            return None
        left = max(0, self.planned - self.done)
        remaining = est * left
        budget = self.result.constraints.time_budget_s
        if budget is not None:
            remaining = min(remaining, max(0.0, budget - self.elapsed))
        return remaining

    def out_of_time(self, n_categories: int) -> bool:
        budget = self.result.constraints.time_budget_s
        if budget is None:
            return False
        est = self._estimate(n_categories) or 0.0
        return self.elapsed + est > budget

    def measure(self, row: TuneRow, stage: str, prompts: tuple[BenchPrompt, ...]) -> TuneRun | None:
        """Launch, benchmark, stop; a failure is recorded on the row. None: nothing measured."""
        assert row.plan is not None
        started = self.clock()
        cats = tuple(p.category for p in prompts)
        try:
            with self.launcher(row.plan, label=row.label, env={}) as target:
                launched = self.clock()
                report = run_bench(target, prompts, self.result.settings, cancel=self.cancel,
                                   vram=self.vram())  # fmt: skip
        except MtpStudioError as exc:
            row.status = RowStatus.FAILED
            row.reason = f"{stage}: launch failed: {exc}"
            diagnosis = getattr(exc, "diagnosis", None)
            if diagnosis is not None:
                row.diagnosis = diagnosis.to_json()
            self._step(stage, row)
            return None
        seconds = self.clock() - started
        run = TuneRun(stage, cats, report, seconds)
        row.runs.append(run)
        if report.n_requests:
            self.request_s.append(report.wall_s_total / report.n_requests)
            self.launch_s.append(max(0.0, (launched - started)))
        if report.cancelled:
            row.status = RowStatus.CANCELLED
            row.reason = (
                f"{stage}: cancelled after {len(report.categories)} of {len(cats)} categories"
            )
        elif report.error is not None:
            row.status = RowStatus.FAILED
            row.reason = f"{stage}: the benchmark failed: {report.error}"
        else:
            row.status = RowStatus.MEASURED
        self._step(stage, row)
        return run

    def _step(self, stage: str, row: TuneRow) -> None:
        self.done += 1
        left = max(0, self.planned - self.done)
        self.progress(TuneProgress(stage, row.label, self.done, left, self.elapsed,
                                   self._remaining(), row.to_dict()))  # fmt: skip

    def stopped(self, rows: Sequence[TuneRow], reason: str) -> None:
        """Mark what the stop left: untried candidates, and those measured on a subset only."""
        for r in rows:
            if r.status is RowStatus.NOT_RUN and not r.runs:
                r.reason = f"{reason} before it ran"
            elif r.status is RowStatus.MEASURED:
                r.reason = f"measured on a subset only ({reason})"

    def run(self) -> None:
        res = self.result
        c = res.constraints
        admitted = [r for r in res.rows if r.status is RowStatus.NOT_RUN and not r.reason]
        finalists = max(1, c.finalists)
        short_n = max(1, min(c.short_categories, len(self.prompts)))
        self.planned = 1 + _planned_runs(len(admitted), finalists, short_n, len(self.prompts))

        # 1. the starting plan on every category: the baseline
        if self.cancel.cancelled:
            return self._cancelled(admitted)
        base = self.measure(res.baseline, "baseline", self.prompts)
        if self.cancel.cancelled:
            return self._cancelled(admitted)
        if base is not None and base.ok:
            res.baseline.status = RowStatus.MEASURED
            res.baseline.reason = "the starting plan"
            if c.skip_slower and self.estimate_again is not None:
                self.estimate_again(admitted, res.baseline)
            if c.skip_slower and skip_predicted_slower(admitted, res.baseline):
                admitted = [r for r in admitted if r.status is RowStatus.NOT_RUN]
                self.planned = 1 + _planned_runs(
                    len(admitted), finalists, short_n, len(self.prompts)
                )

        # 2. successive halving on growing subsets until the finalists are left
        alive = admitted
        n_cats = short_n
        round_no = 0
        while len(alive) > finalists and n_cats < len(self.prompts):
            round_no += 1
            stage = f"round {round_no}"
            subset = self.prompts[:n_cats]
            for row in alive:
                if self.cancel.cancelled:
                    return self._cancelled(admitted)
                if self.out_of_time(n_cats):
                    return self._out_of_time(admitted)
                self.measure(row, stage, subset)
                if self.cancel.cancelled:
                    return self._cancelled(admitted)
            alive = self._halve(alive, stage, subset)
            n_cats = min(len(self.prompts), n_cats * 2)

        # 3. the finalists on every category
        for row in alive:
            if self.cancel.cancelled:
                return self._cancelled(admitted)
            if self.out_of_time(len(self.prompts)):
                return self._out_of_time(admitted)
            run = self.measure(row, "final", self.prompts)
            if run is not None and run.ok:
                row.status, row.reason = RowStatus.FINALIST, "measured on every category"
            if self.cancel.cancelled:
                return self._cancelled(admitted)
        return None

    def _halve(
        self, alive: list[TuneRow], stage: str, subset: tuple[BenchPrompt, ...]
    ) -> list[TuneRow]:
        measured = [r for r in alive if r.status is RowStatus.MEASURED and r.tok_s is not None]
        measured.sort(key=lambda r: r.tok_s or 0.0, reverse=True)
        keep_n = max(self.result.constraints.finalists, math.ceil(len(measured) / 2))
        keep, drop = measured[:keep_n], measured[keep_n:]
        if drop and keep:
            cut = keep[-1].tok_s or 0.0
            ref = None
            base = self.result.baseline.full
            if base is not None:
                ref = subset_tok_s(base.report, [p.category for p in subset])
            vs = f"; baseline {ref:.2f} tok/s" if ref is not None else ""
            for r in drop:
                r.status = RowStatus.DROPPED
                r.reason = (
                    f"{stage}: {r.tok_s or 0.0:.2f} tok/s, below the kept half ({cut:.2f}{vs})"
                )
        return keep

    def _cancelled(self, rows: Sequence[TuneRow]) -> None:
        self.result.cancelled = True
        self.stopped(rows, "cancelled")

    def _out_of_time(self, rows: Sequence[TuneRow]) -> None:
        self.result.budget_reached = True
        self.stopped(rows, "the time budget ran out")


def _planned_runs(n: int, finalists: int, short_n: int, total: int) -> int:
    """How many candidate runs the halving schedule makes (for progress)."""
    runs, alive, n_cats = 0, n, short_n
    while alive > finalists and n_cats < total:
        runs += alive
        alive = max(finalists, math.ceil(alive / 2))
        n_cats = min(total, n_cats * 2)
    return runs + alive


def _choose_best(res: TuneResult) -> None:
    """The fastest plan measured on every category; when no candidate got that far (cancel,
    time budget), the fastest candidate on its subset against the baseline on the same one."""
    base_full = res.baseline.full
    if any(r.full is not None for r in res.rows) or not any(r.tok_s for r in res.rows):
        full = [r for r in res.all_rows if r.full is not None]
        if not full:
            return
        best = max(full, key=lambda r: r.full.tok_s or 0.0 if r.full else 0.0)
        _set_best(res, best, "fastest on every category")
        if base_full is not None and best.full is not None and base_full.tok_s:
            res.gain = (best.full.tok_s or 0.0) / base_full.tok_s - 1.0
            res.gain_basis = f"tok/s on all {len(res.categories)} categories"
        return
    partial = [r for r in res.rows if r.tok_s is not None and r.last is not None]
    best = max(partial, key=lambda r: r.tok_s or 0.0)
    last = best.last
    assert last is not None
    ref = None if base_full is None else subset_tok_s(base_full.report, last.categories)
    if ref is not None and ref >= (best.tok_s or 0.0):
        _set_best(res, res.baseline, "")
        res.note = "the search stopped early; no candidate beat the starting plan on its subset"
        return
    _set_best(res, best, f"fastest, on {len(last.categories)} categories only")
    res.note = "no candidate finished every category: the best is chosen on a subset"
    if ref:
        res.gain = (best.tok_s or 0.0) / ref - 1.0
        res.gain_basis = f"tok/s on {len(last.categories)} categories"


def _set_best(res: TuneResult, best: TuneRow, why: str) -> None:
    res.best = best
    if best is res.baseline:
        tried = any(r.tok_s is not None for r in res.rows)
        why = "no candidate beat the starting plan" if tried else "no candidate was measured"
        res.note = res.note or why
    best.status, best.reason = RowStatus.BEST, why


def run_tune(
    start: Plan,
    pctx: PlanningContext,
    space: TuneSpace,
    prompts: Sequence[BenchPrompt],
    launcher: ServerLauncher,
    *,
    constraints: TuneConstraints | None = None,
    settings: BenchSettings | None = None,
    cancel: CancelToken | None = None,
    progress: TuneProgressCallback = _no_progress,
    vram: Callable[[], VramSampler] = VramSampler.disabled,
    clock: Callable[[], float] = time.monotonic,
) -> TuneResult:
    """Search the space from ``start``; never raises for a candidate that fails.

    ``prompts`` are the full set (finals and baseline); the short rounds use their first
    ``constraints.short_categories``. Candidates the memory model rejects are never launched.
    """
    constraints = constraints or TuneConstraints()
    cancel = cancel or CancelToken()
    started = clock()
    candidates = expand(start, space, constraints.ctx_floor)
    rows = build_rows(start, candidates, pctx, constraints.max_candidates)
    check = check_fit(start, pctx)
    baseline = TuneRow(BASELINE_LABEL, {}, start, check.fits, predicted_vram_bytes=check.used_bytes,
                       predicted_tok_s=check.tok_s)  # fmt: skip
    result = TuneResult(
        started_at=utc_now(),
        baseline=baseline,
        rows=rows,
        space=space,
        constraints=constraints,
        categories=tuple(p.category for p in prompts),
        settings=settings or BenchSettings(),
    )
    search = _Search(result, prompts, launcher, cancel, progress, vram, clock,
                     lambda rows, base: estimate_with_baseline(rows, base, pctx))  # fmt: skip
    try:
        search.run()
    except KeyboardInterrupt:  # Ctrl-C outside a benchmark request: keep what was measured
        cancel.cancel()
        search._cancelled(rows)
    _choose_best(result)
    result.seconds = clock() - started
    return result
