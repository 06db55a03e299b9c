"""Why a launch failed, in one sentence, and ranked Plan changes that would fix it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mtpstudio.core.errors import PlanError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.outside_text import visible
from mtpstudio.core.plan.choices import CacheType, MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import MIN_CTX
from mtpstudio.core.planner.levers import (
    MTP_OFF,
    PlanChange,
    draft_depth,
    experts_on_cpu,
    half_context,
    kv_cache,
)
from mtpstudio.core.server.health import HealthResult, HealthState
from mtpstudio.core.server.load_log import LoadReport
from mtpstudio.core.server.process import ProcessOutcome

MARGIN_STEP_MIB = 256
EXPERT_LAYER_STEP = 4
_QUANTIZED_KV = CacheType.Q8_0
_TRUNCATED = "data is not within the file bounds"  # both engines' llama_model_load, recorded


class CauseKind(StrEnum):
    """The kind of failure."""

    OUT_OF_MEMORY = "out_of_memory"
    MODEL_LOAD = "model_load"
    PORT_IN_USE = "port_in_use"
    BAD_ARGUMENT = "bad_argument"
    DRAFTING_UNAVAILABLE = "drafting_unavailable"
    CRASHED = "crashed"
    KILLED = "killed"
    TIMEOUT = "timeout"
    EXITED = "exited"


def fix_json(fix: PlanChange) -> dict[str, Any]:
    """A fix as the diagnosis's JSON holds it: its title, changes and why it helps."""
    return {"title": fix.label, "changes": dict(fix.changes), "why": fix.buys}


@dataclass(frozen=True)
class Diagnosis:
    """The cause in one sentence, the log lines that show it, and fixes, best first."""

    kind: CauseKind
    cause: str
    evidence: tuple[str, ...] = ()
    fixes: tuple[PlanChange, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "cause": self.cause,
            "evidence": list(self.evidence),
            "fixes": [fix_json(f) for f in self.fixes],
        }

    def render(self) -> str:
        """Plain text: the cause, the evidence, then numbered fixes."""
        lines = [self.cause]
        if self.evidence:
            lines.append("The log says:")
            lines += [f"  {visible(e, keep_tabs=True)}" for e in self.evidence[:4]]
        if self.fixes:
            lines.append("What to change in the plan (most likely to help first):")
            for i, fix in enumerate(self.fixes, 1):
                changes = ", ".join(f"{k}={v}" for k, v in fix.changes.items())
                lines.append(f"  {i}. {fix.label} ({changes}): {fix.buys}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# fixes for an out-of-memory load


def _margin(plan: Plan) -> PlanChange:
    new = plan.runtime.fit_margin_mib + MARGIN_STEP_MIB
    return PlanChange(
        f"raise the safety margin to {new} MiB",
        {"runtime.fit_margin_mib": new},
        "margin",
        "the engine's fit then leaves more room for buffers it sizes late (compute, CUDA "
        "context) and for memory the desktop takes meanwhile",
    )


def _ctx(plan: Plan) -> PlanChange | None:
    ctx = plan.runtime.ctx
    if ctx <= MIN_CTX:
        return None
    new = half_context(ctx)
    return PlanChange(
        f"halve the context to {new} tokens",
        {"runtime.ctx": new},
        "context",
        "the KV cache (and a draft context's KV cache) grows with the context"
        if plan.mtp.enabled is not False or plan.draft.path is not None
        else "the KV cache grows with the context",
    )


def _draft_depth(plan: Plan) -> PlanChange | None:
    if plan.mtp.enabled is False or plan.mtp.draft_max <= 1:
        return None
    new = max(1, plan.mtp.draft_max - 1)
    return PlanChange(
        f"lower the draft depth to {new}",
        draft_depth(plan, new),
        "draft",
        "upstream keeps one recurrent-state copy per drafted token, and the outputs grow too",
    )


def _quantize_kv(plan: Plan) -> PlanChange | None:
    rt = plan.runtime
    if rt.cache_type_k in (CacheType.Q4_0, CacheType.Q4_1, CacheType.IQ4_NL):
        return None
    if rt.cache_type_k is _QUANTIZED_KV and rt.cache_type_v is _QUANTIZED_KV:
        new = CacheType.Q4_0
    else:
        new = _QUANTIZED_KV
    return PlanChange(
        f"quantize the KV cache to {new.value}",
        kv_cache(new),
        "cache",
        f"{new.value} takes {'about half' if new is _QUANTIZED_KV else 'about a third less'} "
        "the memory per token (a quantized V cache needs flash attention)",
    )  # fmt: skip


def _parallel(plan: Plan) -> PlanChange | None:
    if plan.runtime.parallel == 1:
        return None
    return PlanChange(
        "serve one slot (--parallel 1)",
        {"runtime.parallel": 1},
        "slots",
        "each slot has its own recurrent state (multiplied again by MTP) and output buffer",
    )


def _experts(plan: Plan, n_layer: int | None) -> PlanChange | None:
    rt = plan.runtime
    if rt.moe is MoePlacement.ALL_CPU:
        return None
    current = rt.n_cpu_moe if rt.moe is MoePlacement.N_CPU_MOE else 0
    new = current + EXPERT_LAYER_STEP
    if n_layer is not None and current >= n_layer:
        return None
    if n_layer is not None:
        new = min(new, n_layer)
    return PlanChange(
        f"keep the experts of {new} layers on the CPU",
        experts_on_cpu(new),
        "experts",
        "expert weights are most of a MoE model; in system RAM they cost speed, not VRAM",
    )


_BY_FAILURE: dict[str, tuple[str, ...]] = {
    "kv_cache": ("ctx", "quantize", "margin", "parallel", "draft", "experts"),
    "recurrent_state": ("parallel", "draft", "margin", "ctx", "experts", "quantize"),
    "compute": ("margin", "draft", "ctx", "experts", "parallel", "quantize"),
    "output": ("parallel", "draft", "margin", "ctx", "quantize", "experts"),
    "weights": ("experts", "margin", "ctx", "quantize", "draft", "parallel"),
    "fit": ("experts", "ctx", "quantize", "margin", "draft", "parallel"),
    "runtime": ("margin", "ctx", "draft", "quantize", "parallel", "experts"),
    "unknown": ("margin", "ctx", "draft", "quantize", "parallel", "experts"),
}


def oom_fixes(
    plan: Plan, failed: str, n_layer: int | None = None, *, moe: bool = True
) -> tuple[PlanChange, ...]:
    """Fixes for an allocation failure of ``failed`` (a buffer kind), most likely first.

    Only changes that produce a valid, different Plan are offered; no expert placement for a
    dense model (``moe`` False) and no GPU margin for a CPU-only plan.
    """
    makers: dict[str, Callable[[], PlanChange | None]] = {
        "margin": lambda: _margin(plan),
        "ctx": lambda: _ctx(plan),
        "draft": lambda: _draft_depth(plan),
        "quantize": lambda: _quantize_kv(plan),
        "parallel": lambda: _parallel(plan),
        "experts": lambda: _experts(plan, n_layer),
    }
    fixes: list[PlanChange] = []
    skip = {"experts"} if not moe else set()
    if plan.device == "cpu":
        skip.add("margin")
    for name in _BY_FAILURE.get(failed, _BY_FAILURE["unknown"]):
        if name in skip:
            continue
        fix = makers[name]()
        if fix is None:
            continue
        try:
            changed = fix.apply(plan)
        except PlanError:
            continue
        if changed != plan:
            fixes.append(fix)
    return tuple(fixes)


_WHAT = {
    "kv_cache": "the KV cache",
    "recurrent_state": "the recurrent state",
    "compute": "a compute buffer",
    "output": "the output buffer",
    "weights": "the model weights",
    "fit": "the model (the engine's fit found no placement)",
    "runtime": "a buffer while generating",
    "unknown": "a buffer",
}


def _device_phrase(where: str | None) -> str:
    if where is None:
        return ""
    if where.upper().startswith("CPU"):
        return " in system RAM"
    return f" on {where}"


# --------------------------------------------------------------------------------------------
# the diagnosis


def diagnose(
    report: LoadReport,
    plan: Plan,
    outcome: ProcessOutcome | None = None,
    health: HealthResult | None = None,
    *,
    model: ModelInfo | None = None,
) -> Diagnosis:
    """Explain a failed launch from its log, exit and health wait (pure).

    ``model`` (the header facts) keeps the fixes to ones that apply (no experts to move on a
    dense model).
    """
    n_layer = model.n_layer if model is not None else None
    moe = model.is_moe if model is not None else True
    if report.allocation_failures:
        first = next(
            (f for f in report.allocation_failures if f.what != "unknown"),
            report.allocation_failures[0],
        )
        sizes = [f.mib for f in report.allocation_failures if f.mib]
        size = f" ({max(sizes):,.2f} MiB)" if sizes else ""
        cause = (
            f"The server ran out of memory allocating {_WHAT[first.what]}{size}"
            f"{_device_phrase(first.where)}."
        )
        evidence = tuple(f.line for f in report.allocation_failures)
        return Diagnosis(
            CauseKind.OUT_OF_MEMORY, cause, evidence, oom_fixes(plan, first.what, n_layer, moe=moe)
        )
    if report.bind_failed:
        return Diagnosis(
            CauseKind.PORT_IN_USE,
            f"The server could not listen on {plan.server.host}:{plan.server.port}: another "
            "program took the port.",
            tuple(line for line in report.error_lines if "bind" in line),
            (PlanChange("use another port", {"server.port": plan.server.port + 1}, "port",
                        "or stop the program that holds it"),),
        )  # fmt: skip
    dropped = [d for d in report.drafting_disabled if "failed to create MTP" not in d]
    one_slot = [d for d in report.drafting_disabled if "slot" in d]
    if one_slot and not report.loaded:  # ik since speculative stages: drafting needs -np 1
        return Diagnosis(
            CauseKind.DRAFTING_UNAVAILABLE,
            f"The engine drafts with one server slot only and refused to start with "
            f"{plan.runtime.parallel}.",
            tuple(one_slot),
            (PlanChange("serve one slot (--parallel 1)", {"runtime.parallel": 1}, "slots",
                        "this engine drafts (MTP or a draft model) with a single slot"),
             PlanChange("turn MTP off", dict(MTP_OFF), "draft", "then several slots can serve")),
        )  # fmt: skip
    if report.drafting_disabled and not report.loaded:
        return Diagnosis(
            CauseKind.DRAFTING_UNAVAILABLE,
            "The engine refused to start drafting: the model has no MTP layer this engine can use.",
            tuple(report.drafting_disabled),
            (
                PlanChange(
                    "turn MTP off", dict(MTP_OFF), "draft", "the model then runs without drafting"
                ),
            ),
        )
    bad_arg = next(
        (e for e in report.error_lines if "invalid argument" in e or "error: " in e.lower()),
        None,
    )
    load_error = next(
        (
            e
            for e in report.error_lines
            if "load model" in e or "loading model" in e or "unable to load" in e
        ),
        None,
    )
    code = outcome.describe() if outcome is not None else "stopped"
    truncated = next((e for e in report.error_lines if _TRUNCATED in e), None)
    if truncated is not None:
        return Diagnosis(
            CauseKind.MODEL_LOAD,
            f"The engine could not load the model because the file is incomplete (its tensor "
            f"data runs past the end of the file: an unfinished download?), and it {code}; "
            "finish the download or download it again.",
            (truncated,),
        )
    if load_error is not None:
        return Diagnosis(
            CauseKind.MODEL_LOAD,
            f"The engine could not load the model and {code}; the log below says why "
            "(check the model file with `mtpstudio plan --model FILE`).",
            tuple(report.error_lines[-4:]),
        )
    if bad_arg is not None and not report.contexts:
        return Diagnosis(
            CauseKind.BAD_ARGUMENT,
            f"The engine rejected its command line and {code}.",
            (bad_arg,),
        )
    if outcome is not None and outcome.crashed:
        kind = CauseKind.KILLED if outcome.signal_name == "SIGKILL" else CauseKind.CRASHED
        what = (
            "The server was killed from outside (SIGKILL: often the kernel's out-of-memory killer)"
            if kind is CauseKind.KILLED
            else f"The server {code}"
        )
        fixes = oom_fixes(plan, "unknown", n_layer, moe=moe) if kind is CauseKind.KILLED else ()
        return Diagnosis(kind, f"{what}.", tuple(report.error_lines[-4:]), fixes)
    if health is not None and health.state is HealthState.TIMEOUT:
        return Diagnosis(
            CauseKind.TIMEOUT,
            f"The server did not become healthy before the startup timeout "
            f"({health.seconds:.1f} s; last answer: {health.last.detail}); a large model may "
            "need a longer --timeout.",
            tuple(report.error_lines[-4:]),
            (),
        )
    if dropped and report.loaded:
        return Diagnosis(
            CauseKind.DRAFTING_UNAVAILABLE,
            "The server runs, but without drafting: the engine disabled it.",
            tuple(dropped),
            (
                PlanChange(
                    "turn MTP off", dict(MTP_OFF), "draft", "the plan then says what really runs"
                ),
            ),
        )
    return Diagnosis(
        CauseKind.EXITED,
        f"The server {code} before it became healthy.",
        tuple(report.error_lines[-4:]),
    )
