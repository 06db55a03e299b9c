"""Fit planning: the engine's own --fit, and the two questions users ask of the budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget import Budget, compute_budget, device_fits
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import MoePlacement, Plan, plan_with

CTX_STEP = 256


@dataclass(frozen=True)
class FitSuggestion:
    """A Plan change that makes the budget fit (or the closest it gets), with its budget."""

    changes: dict[str, Any]
    plan: Plan
    budget: Budget
    message: str

    @property
    def fits(self) -> bool:
        return self.budget.fits is not False


def largest_context(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec | None = None,
    weights: ModelWeights | None = None,
    ceiling: int | None = None,
) -> FitSuggestion:
    """The largest context (a multiple of 256, up to the native context) at this offload."""
    host = host or HostSpec()
    weights = weights or ModelWeights.from_model(model)
    top = ceiling or max(model.context_length, CTX_STEP)

    def budget_at(ctx: int) -> tuple[Plan, Budget]:
        p = plan_with(plan, {"runtime.ctx": ctx})
        return p, compute_budget(p, model, target, facts, host, weights)

    lo, hi = 1, top // CTX_STEP
    best: tuple[Plan, Budget] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        p, b = budget_at(mid * CTX_STEP)
        if device_fits(b):
            best, lo = (p, b), mid + 1
        else:
            hi = mid - 1
    if best is None:
        p, b = budget_at(CTX_STEP)
        return FitSuggestion(
            {"runtime.ctx": CTX_STEP},
            p,
            b,
            "nothing fits even at ctx 256: move expert layers to the CPU first",
        )
    p, b = best
    return FitSuggestion(
        {"runtime.ctx": p.runtime.ctx},
        p,
        b,
        f"largest context that fits at this offload: {p.runtime.ctx:,} tokens",
    )


def fewest_cpu_expert_layers(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec | None = None,
    weights: ModelWeights | None = None,
) -> FitSuggestion:
    """The smallest ``--n-cpu-moe N`` that fits at this context.

    Moving one more layer's experts never adds VRAM once some are on the CPU (the op-offload
    buffer appears with the first), so after N = 0 the answer is found by bisection: a few
    budgets instead of one per layer.
    """
    host = host or HostSpec()
    weights = weights or ModelWeights.from_model(model)
    if not model.is_moe:
        b = compute_budget(plan, model, target, facts, host, weights)
        return FitSuggestion({}, plan, b, "the model has no experts to move")

    def at(n: int) -> tuple[dict[str, Any], Plan, Budget]:
        changes: dict[str, Any] = {
            "runtime.moe": MoePlacement.N_CPU_MOE.value,
            "runtime.n_cpu_moe": n,
        }
        p = plan_with(plan, changes)
        return changes, p, compute_budget(p, model, target, facts, host, weights)

    found = at(0)
    if not device_fits(found[2]):
        lo, hi = 1, model.block_count
        last = at(hi)
        if not device_fits(last[2]):
            _, p, b = last
            return FitSuggestion(
                {"runtime.moe": MoePlacement.ALL_CPU.value},
                p,
                b,
                "even with every expert on the CPU it does not fit: lower the context or cache "
                "types",
            )
        found = last
        while lo < hi:
            mid = (lo + hi) // 2
            candidate = at(mid)
            if device_fits(candidate[2]):
                found, hi = candidate, mid
            else:
                lo = mid + 1
    changes, p, b = found
    n = p.runtime.n_cpu_moe
    return FitSuggestion(
        changes,
        p,
        b,
        f"fewest expert layers on the CPU at ctx {plan.runtime.ctx:,}: --n-cpu-moe {n}",
    )
