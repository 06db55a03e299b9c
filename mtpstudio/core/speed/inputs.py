"""What an estimate takes from this computer: its rates and the benchmarks it already ran.

``SpeedInputs`` holds the host's rates (``host_rates``) and the stored benchmark runs, read from
the history as hostile input (numbers checked, anything odd left out). From the runs come the
acceptance of a model on an engine (the newest run that drafted) and the measurement of a plan
(the newest run of that very plan), which turns the plan's estimate into a measured figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import setting
from mtpstudio.core.speed.acceptance import Acceptance, default_acceptance, from_counters
from mtpstudio.core.speed.decode_rules import UPSTREAM_RULES, DecodeRules
from mtpstudio.core.speed.host_rates import ASSUMED_HOST, HostRates

MAX_RUNS = 2000
"""The newest runs read from the history (older ones say nothing the newer do not)."""


@dataclass(frozen=True)
class MeasuredRun:
    """One stored benchmark of a plan: what it measured, and which plan it was.

    Attributes:
        run_id: its history id.
        when: when it started (ISO text).
        plan: the plan as stored (the JSON of the plan that was launched).
        model: the model it ran (a file path, or ``card:ID``).
        flavour: the engine flavour.
        tok_s: the server's decoding rate (median over the categories; the wall-clock tok/s
            when the run kept no per-category rate): what the estimate's decode figure predicts.
        drafted: drafted tokens (0: it did not draft).
        acceptance: accepted / drafted (None without drafts).
        depth: the plan's draft depth.
        per_position: the server's per-position acceptance, when it counted it.
    """

    run_id: int
    when: str
    plan: dict[str, Any]
    model: str
    flavour: str
    tok_s: float
    drafted: int
    acceptance: float | None
    depth: int
    per_position: tuple[float, ...] = ()
    predicted: int = 0
    accepted: int = 0
    p_min: float | None = None


@dataclass(frozen=True)
class SpeedInputs:
    """The host's rates and the stored runs (defaults: the assumed desktop, no runs)."""

    host: HostRates = ASSUMED_HOST
    runs: tuple[MeasuredRun, ...] = ()

    def acceptance_for(
        self, model: str, flavour: str, rules: DecodeRules = UPSTREAM_RULES
    ) -> Acceptance:
        """The newest measured acceptance of ``model`` on ``flavour`` (whose engine drafts as
        ``rules`` say), else the default."""
        for run in reversed(self.runs):
            if run.model == model and run.flavour == flavour and run.acceptance is not None:
                source = (
                    f"measured: benchmark run {run.run_id} ({run.when[:10]}) of this model on "
                    f"{flavour}, at draft depth {run.depth}"
                )
                counted = from_counters(
                    run.predicted,
                    run.drafted,
                    run.accepted,
                    max(1, run.depth),
                    run.p_min if run.p_min is not None else 0.0,
                    source,
                    rules.first_draft_kept,
                )
                if counted is not None and run.p_min is not None and not run.per_position:
                    return counted
                return Acceptance(
                    rate=run.acceptance,
                    depth=max(1, run.depth),
                    per_position=run.per_position,
                    source=f"measured: benchmark run {run.run_id} ({run.when[:10]}) of this "
                    f"model on {flavour}, at draft depth {run.depth}",
                    measured=True,
                )
        return default_acceptance(rules.first_draft_kept)

    def measured_for(self, plans: Sequence[Plan]) -> MeasuredRun | None:
        """The newest run of one of ``plans`` (the plan and the one it resolves to)."""
        wanted = [p.to_data() for p in plans]  # the form a run stores
        return next((r for r in reversed(self.runs) if r.plan in wanted), None)


def model_key(plan: Plan | dict[str, Any]) -> str:
    """A plan's model as runs are matched: its file, or ``card:ID`` for a demo card."""
    model = plan.model.model_dump(mode="json") if isinstance(plan, Plan) else plan.get("model")
    if not isinstance(model, dict):
        return ""
    path, card = model.get("path"), model.get("card")
    if isinstance(path, str) and path:
        return path
    return f"card:{card}" if isinstance(card, str) else ""


def _number(value: Any, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and low <= value <= high else None


def _declared(value: Any, path: str) -> float | None:
    """``value`` when a number within the Plan setting's declared bounds, else None."""
    declared = setting(path)
    return _number(value, float(declared.low or 0), float(declared.high or math.inf))


def _decode_rate(categories: Any) -> float | None:
    """The median of the categories' decode rates (None: none readable)."""
    if not isinstance(categories, list):
        return None
    rates = [
        r
        for c in categories[:64]
        if isinstance(c, dict) and (r := _number(c.get("decode_tok_s"), 1e-6, 1e7)) is not None
    ]
    return statistics.median(rates) if rates else None


def run_from_entry(
    run_id: int, when: str, flavour: str | None, plan: Any, report: Any
) -> MeasuredRun | None:
    """A stored run as a ``MeasuredRun``; None when it is not a finished run of a plan or
    anything in it is out of shape."""
    if not isinstance(plan, dict) or not isinstance(report, dict) or report.get("error"):
        return None
    if report.get("cancelled"):
        return None
    aggregate = report.get("aggregate")
    if not isinstance(aggregate, dict):
        return None
    tok_s = _decode_rate(report.get("categories")) or _number(aggregate.get("tok_s"), 1e-6, 1e7)
    drafted = _number(aggregate.get("total_draft"), 0, 1e12)
    if tok_s is None or drafted is None:
        return None
    rate = _number(aggregate.get("aggregate_accept_rate"), 0.0, 1.0) if drafted else None
    mtp = plan.get("mtp")
    depth = _declared(mtp.get("draft_max"), "mtp.draft_max") if isinstance(mtp, dict) else None
    p_min = _declared(mtp.get("draft_p_min"), "mtp.draft_p_min") if isinstance(mtp, dict) else None
    predicted = _number(aggregate.get("total_predicted"), 0, 1e12)
    accepted = _number(aggregate.get("total_draft_accepted"), 0, 1e12)
    engine = plan.get("engine")
    flavour = flavour or (engine.get("flavour") if isinstance(engine, dict) else None)
    if not isinstance(flavour, str):
        return None
    per_position: tuple[float, ...] = ()
    metrics = report.get("metrics_check")
    if isinstance(metrics, dict) and isinstance(metrics.get("accepted_per_position"), list):
        shares = [_number(v, 0.0, 1.0) for v in metrics["accepted_per_position"][:64]]
        if shares and all(s is not None for s in shares):
            per_position = tuple(s for s in shares if s is not None)
    return MeasuredRun(
        run_id=run_id,
        when=when,
        plan=plan,
        model=model_key(plan),
        flavour=flavour,
        tok_s=tok_s,
        drafted=int(drafted),
        acceptance=rate,
        depth=int(depth or 1),
        per_position=per_position,
        predicted=int(predicted or 0),
        accepted=int(accepted or 0),
        p_min=p_min,
    )


def runs_from_history(entries: Iterable[Any]) -> tuple[MeasuredRun, ...]:
    """The benchmark runs of plans among history entries (``BenchHistory.entries``)."""
    out = []
    for e in entries:
        if e.kind not in ("bench", "ab-a", "ab-b", "tune-run"):
            continue
        run = run_from_entry(e.id, e.created_at, e.engine_flavour, e.plan, e.report)
        if run is not None:
            out.append(run)
    return tuple(out[-MAX_RUNS:])
