"""After a run: what the figures say about the settings, each finding with the Plan change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mtpstudio.core.bench.ab import GRAPHS_OFF_ENV, ABReport
from mtpstudio.core.bench.results import DEPTH_ACCEPT_FLOOR, BenchReport, VramPeak
from mtpstudio.core.engines.profiles import profile_for
from mtpstudio.core.errors import PlanError
from mtpstudio.core.plan.choices import CacheType
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.levers import MTP_OFF, PlanChange, draft_depth, half_context, kv_cache

LOW_ACCEPTANCE = 0.60
VRAM_FULL = 0.95
GRAPHS_FASTER_PCT = 3.0
P_MIN_FLOOR = 0.75
_QUANTIZED_KV = {
    CacheType.Q8_0,
    CacheType.Q5_1,
    CacheType.Q5_0,
    CacheType.Q4_1,
    CacheType.Q4_0,
    CacheType.IQ4_NL,
}


def remedy_json(remedy: PlanChange) -> dict[str, Any]:
    """A remedy as the benchmark's JSON holds it."""
    return {"label": remedy.label, "plan_changes": dict(remedy.changes)}


def _mtp_off() -> PlanChange:
    return PlanChange("turn MTP off", dict(MTP_OFF), "draft")


@dataclass(frozen=True)
class Finding:
    """What the doctor saw, why it matters, and the Plan changes that fix it (best first)."""

    code: str
    message: str
    remedies: tuple[PlanChange, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "remedies": [remedy_json(r) for r in self.remedies],
        }


def _valid(plan: Plan | None, remedies: list[PlanChange]) -> tuple[PlanChange, ...]:
    """Keep only remedies that make a valid Plan (all of them when there is no plan)."""
    if plan is None:
        return tuple(remedies)
    kept = []
    for remedy in remedies:
        try:
            remedy.apply(plan)
        except PlanError:
            continue
        kept.append(remedy)
    return tuple(kept)


def check_acceptance(report: BenchReport, plan: Plan | None) -> Finding | None:
    rate = report.aggregate_accept_rate
    if rate is None or rate >= LOW_ACCEPTANCE:
        return None
    remedies = []
    if plan is not None and plan.mtp.draft_max > 1:
        draft_max = plan.mtp.draft_max
        remedies.append(
            PlanChange(
                f"draft fewer tokens ({draft_max} -> {draft_max - 1})",
                draft_depth(plan, draft_max - 1),
                "draft",
            )
        )
    remedies.append(_mtp_off())
    return Finding(
        "low-acceptance",
        f"Draft acceptance is {rate:.1%} (below {LOW_ACCEPTANCE:.0%}): most drafted tokens are "
        "thrown away, so drafting is likely costing speed; compare with MTP off (A/B preset "
        "'mtp').",
        _valid(plan, remedies),
    )


def check_depth(report: BenchReport, plan: Plan | None) -> Finding | None:
    """The server's per-position acceptance (``/metrics``): which draft depth it supports."""
    check = report.metrics
    if check is None:
        return None
    rates = check.accepted_per_position
    depth = check.supported_depth()
    if depth is None:
        return None
    shown = ", ".join(f"{r:.0%}" for r in rates)
    drafted = plan.mtp.draft_max if plan is not None else len(rates)
    message = (
        f"Accepted per draft position (the server's /metrics): {shown} of "
        f"{check.delta.get('drafts', 0):.0f} drafts; the acceptance supports draft depth "
        f"{depth} (positions accepted in at least {DEPTH_ACCEPT_FLOOR:.0%} of the drafts)"
    )
    remedies = []
    if depth < drafted:
        message += f", the plan drafts {drafted}."
        changes = draft_depth(plan, depth) if plan is not None else {"mtp.draft_max": depth}
        remedies.append(
            PlanChange(f"draft {depth} tokens ({drafted} -> {depth})", changes, "draft")
        )
    elif depth == drafted and rates and rates[-1] >= DEPTH_ACCEPT_FLOOR:
        message += (
            f"; even the last position holds up: a deeper draft ({drafted + 1}) may pay, "
            "measure it."
        )
        remedies.append(
            PlanChange(f"draft {drafted + 1} tokens", {"mtp.draft_max": drafted + 1}, "draft")
        )
    else:
        message += "."
    return Finding("draft-depth", message, _valid(plan, remedies))


def check_vram(peaks: list[VramPeak], plan: Plan | None) -> Finding | None:
    full = [p for p in peaks if p.fraction > VRAM_FULL]
    if not full:
        return None
    worst = max(full, key=lambda p: p.fraction)
    remedies: list[PlanChange] = []
    if plan is not None:
        ctx = half_context(plan.runtime.ctx)
        if ctx < plan.runtime.ctx:
            remedies.append(
                PlanChange(
                    f"halve the context ({plan.runtime.ctx} -> {ctx})",
                    {"runtime.ctx": ctx},
                    "context",
                )
            )
        kv = (plan.runtime.cache_type_k, plan.runtime.cache_type_v)
        if not all(t in _QUANTIZED_KV for t in kv):
            remedies.append(
                PlanChange("quantize the KV cache to q8_0", kv_cache(CacheType.Q8_0), "cache")
            )
        margin = plan.runtime.fit_margin_mib + 512
        remedies.append(
            PlanChange(
                f"raise the fit margin to {margin} MiB",
                {"runtime.fit_margin_mib": margin},
                "margin",
            )
        )
    else:
        remedies = [
            PlanChange("lower the context", {"runtime.ctx": 16384}, "context"),
            PlanChange(
                "quantize the KV cache to q8_0",
                kv_cache(CacheType.Q8_0, flash_attn=False),
                "cache",
            ),
            PlanChange("raise the fit margin", {"runtime.fit_margin_mib": 1536}, "margin"),
        ]
    return Finding(
        "vram-full",
        f"{worst.device} peaked at {worst.fraction:.1%} of its VRAM during the run (above "
        f"{VRAM_FULL:.0%}): a longer prompt or a desktop window can push it out of memory.",
        _valid(plan, remedies),
    )


def check_graphs_control(ab: ABReport, plan: Plan | None) -> Finding | None:
    """B ran with CUDA graphs disabled; if it was faster, graphs are being re-captured."""
    if not GRAPHS_OFF_ENV.items() <= dict(ab.b.env).items():
        return None
    delta = ab.tok_s_delta_pct
    if delta is None or delta <= GRAPHS_FASTER_PCT:
        return None
    remedies = []
    if (
        plan is not None
        and plan.mtp.enabled is not False
        and plan.mtp.draft_min < plan.mtp.draft_max
    ):
        remedies.append(
            PlanChange(
                "draft a fixed number of tokens (steady graph shapes)",
                {"mtp.draft_min": plan.mtp.draft_max},
                "draft",
            )
        )
    return Finding(
        "graphs-recapture",
        f"With CUDA graphs disabled the server was {delta:.1f}% faster: the graphs are being "
        "re-captured (changing batch shapes, e.g. varying draft lengths); keep "
        "GGML_CUDA_DISABLE_GRAPHS=1 or fix the draft length.",
        _valid(plan, remedies),
    )


MTP_SLOWER_PCT = 10.0


def check_mtp_slower(ab: ABReport, plan: Plan | None) -> Finding | None:
    """One side drafts and the other does not: speak up when drafting is clearly slower."""
    drafting = [side for side in (ab.a, ab.b) if side.total_draft > 0]
    plain = [side for side in (ab.a, ab.b) if side.total_draft == 0 and side.categories]
    if len(drafting) != 1 or len(plain) != 1:
        return None
    on, off = drafting[0], plain[0]
    if on.tok_s is None or off.tok_s is None or on.tok_s <= 0:
        return None
    slower_pct = (off.tok_s - on.tok_s) / off.tok_s * 100.0
    if slower_pct <= MTP_SLOWER_PCT:
        return None
    ratio = off.tok_s / on.tok_s
    how = f"{ratio:.1f}× slower than" if ratio >= 1.5 else f"{slower_pct:.0f} % slower than"
    rate = on.aggregate_accept_rate
    accepted = f", {rate:.0%} of the drafts accepted" if rate is not None else ""
    remedies: list[PlanChange] = []
    if plan is not None and plan.mtp.draft_max > 1:
        remedies.append(
            PlanChange(
                f"draft fewer tokens ({plan.mtp.draft_max} -> 1)", draft_depth(plan, 1), "draft"
            )
        )
    remedies.append(_mtp_off())
    return Finding(
        "mtp-slower",
        f"Drafting made it slower: {on.label} ran {how} {off.label} ({on.tok_s:.2f} vs "
        f"{off.tok_s:.2f} tok/s{accepted}). Every drafted token costs a verification pass; "
        "here that costs more than the accepted tokens save (typical on a CPU or with a "
        "draft that rarely matches).",
        _valid(plan, remedies),
    )


def check_noise(report: BenchReport) -> Finding | None:
    text = report.spread_text() if report.noisy else None
    if text is None:
        return None
    return Finding("noisy", text[:1].upper() + text[1:] + ".")


def check_p_min(report: BenchReport, plan: Plan | None) -> Finding | None:
    if plan is None or plan.mtp.draft_p_min >= P_MIN_FLOOR:
        return None
    drafting = plan.mtp.enabled or plan.draft.path is not None
    if not drafting and not (plan.mtp.enabled is None and report.total_draft > 0):
        return None  # off, or auto decided off (no drafts came back)
    return Finding(
        "p-min-low",
        f"Draft p-min is {plan.mtp.draft_p_min:g}: drafts the model is unsure of are verified "
        f"anyway; {P_MIN_FLOOR} is the usual choice for MTP.",
        _valid(
            plan,
            [PlanChange(f"set p-min to {P_MIN_FLOOR}", {"mtp.draft_p_min": P_MIN_FLOOR}, "p-min")],
        ),
    )


def diagnose(
    report: BenchReport, plan: Plan | None = None, ab: ABReport | None = None
) -> list[Finding]:
    """Every finding for a run (and for its A/B, when there is one)."""
    findings: list[Finding | None] = []
    if report.drafting_warning:
        remedies = []
        offer = profile_for(plan.engine.flavour).bench.drafting_off_remedy if plan else None
        if offer is not None:
            remedies.append(PlanChange(offer[0], dict(offer[1]), "engine"))
        findings.append(
            Finding(
                "drafting-off",
                report.drafting_warning + " The server log says why (e.g. 'MTP will be "
                "disabled', or no draft reached p-min).",
                _valid(plan, remedies),
            )
        )
    findings += [
        check_acceptance(report, plan),
        check_depth(report, plan),
        check_vram(report.vram, plan),
        check_p_min(report, plan),
    ]
    findings += [check_noise(side) for side in ((ab.a, ab.b) if ab is not None else (report,))]
    if ab is not None:
        findings.append(check_graphs_control(ab, plan))
        findings.append(check_mtp_slower(ab, plan))
    return [f for f in findings if f is not None]
