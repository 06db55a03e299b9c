"""Fit planning: what each lever (context, cache, draft depth, experts, layers) makes fit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget import (
    Budget,
    compute_budget,
    device_fits,
    gpu_layer_count,
    layer_words,
)
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.memory.terms import row_bytes
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import CacheType, FlashAttention, MoePlacement, Plan, plan_with
from mtpstudio.core.units import MIB

CTX_STEP = 256


@dataclass(frozen=True)
class FitSuggestion:
    """A Plan change that makes the budget fit (or the closest it gets), with its budget."""

    changes: dict[str, Any]
    plan: Plan
    budget: Budget
    message: str
    lever: str = ""
    label: str = ""  # the change in a few words ("with the llvmpipe session")
    gain: str = ""  # what it does to speed ("2 more expert layers on the GPU, MTP kept")
    faster: bool = False  # faster than the plan as it is (core.advice.speed_key)
    tok_s: float | None = None  # the estimated decode tokens/s of its plan (core.speed)

    @property
    def fits(self) -> bool:
        return self.budget.fits is not False

    @property
    def cpu_layers(self) -> int:
        """Trunk layers this suggestion leaves wholly on the CPU (none when the target is)."""
        if not any(d.id != "CPU" for d in self.budget.devices):
            return 0
        gpu = self.budget.placement.gpu_layers
        return sum(1 for i in self.budget.placement.loaded_layers if i not in gpu)

    @property
    def short_bytes(self) -> int:
        """How far the fullest device is over its size (0 when it fits)."""
        return max((-(d.free_bytes or 0) for d in self.budget.devices), default=0)

    @property
    def spare_bytes(self) -> int:
        """What the tightest device has left (0 when unknown or short)."""
        spare = [d.free_bytes for d in self.budget.devices if d.free_bytes is not None]
        return max(0, min(spare, default=0))

    def outcome(self) -> str:
        """``fits, 35 MiB spare``, ``fits with 9 layers on the CPU`` or ``still 80 MiB short``."""
        if not self.fits:
            return f"still {self.short_bytes / MIB:,.0f} MiB short"
        if self.cpu_layers:
            return (
                f"fits with {self.cpu_layers} layer{'s' if self.cpu_layers > 1 else ''} on the CPU"
            )
        return f"fits, {self.spare_bytes / MIB:,.0f} MiB spare"


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
            "nothing fits even at ctx 256: move experts or layers to the CPU first",
            "context",
        )
    p, b = best
    return FitSuggestion(
        {"runtime.ctx": p.runtime.ctx},
        p,
        b,
        f"largest context that fits at this offload: {p.runtime.ctx:,} tokens",
        "context",
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
        return FitSuggestion({}, plan, b, "the model has no experts to move", "experts")

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
                "experts",
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
        "experts",
    )


def fewest_cpu_layers(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec | None = None,
    weights: ModelWeights | None = None,
) -> FitSuggestion:
    """The largest ``-ngl`` (fewest whole layers on the CPU) that fits, placed by mtpstudio.

    A MoE model keeps every expert in RAM (``--cpu-moe``), as the engine's fit does once
    moving experts is not enough; a dense model just loses layers from the front.
    """
    host = host or HostSpec()
    weights = weights or ModelWeights.from_model(model)
    moe = MoePlacement.ALL_CPU if model.is_moe else MoePlacement.GPU
    top = model.block_count + 1

    def at(ngl: int) -> tuple[dict[str, Any], Plan, Budget]:
        changes: dict[str, Any] = {"runtime.moe": moe.value, "runtime.n_gpu_layers": ngl}
        p = plan_with(plan, changes)
        return changes, p, compute_budget(p, model, target, facts, host, weights)

    best = _largest(0, top, lambda n: device_fits(at(n)[2]))
    changes, p, b = at(0 if best is None else best)
    where = layer_words(model, b.placement)
    if best is None:
        message = f"even with every layer on the CPU it does not fit ({where})"
    else:
        message = (
            f"fewest layers on the CPU at ctx {plan.runtime.ctx:,}: "
            f"-ngl {gpu_layer_count(model, b.placement)} ({where})"
        )
    return FitSuggestion(changes, p, b, message, "layers")


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ``ok(n)`` (``ok`` true up to some n, then false)."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


SMALLER_CACHES = (CacheType.Q8_0, CacheType.Q5_1, CacheType.Q4_0)
"""Cache types tried from the largest down (each a common choice on both engines)."""


def cache_type_options(plan: Plan) -> list[dict[str, Any]]:
    """K/V cache changes to try, largest first, each smaller than the plan's (a quantized V
    cache needs flash attention, so without it only K changes)."""
    rt = plan.runtime
    fa = rt.flash_attn is not FlashAttention.OFF
    options = []
    for c in SMALLER_CACHES:
        smaller = row_bytes(c.value, 32)
        k = c if smaller < row_bytes(rt.cache_type_k.value, 32) else rt.cache_type_k
        v = c if fa and smaller < row_bytes(rt.cache_type_v.value, 32) else rt.cache_type_v
        change = {"runtime.cache_type_k": k.value, "runtime.cache_type_v": v.value}
        if (k, v) != (rt.cache_type_k, rt.cache_type_v) and change not in options:
            options.append(change)
    return options
