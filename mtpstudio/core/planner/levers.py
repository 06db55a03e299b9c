"""Every lever in one place: the Plan changes the planner, the doctor and the diagnosis offer.

A lever's answer is a ``PlanChange`` (what to do in a few words, the ``plan_with`` changes, the
lever it pulls, what it buys). The planner's levers search for the smallest change that fits
and are evaluated only through ``LeverBench.evaluate`` — ``planning.budget_for`` of the changed
plan, resolved as the plan itself is (its draft model and stored measurements counted) — so
every answer in a ranked list is judged by the same budget. The moves (``draft_depth``,
``half_context`` …) are the changes themselves, shared by the planner, the doctor (after a
benchmark) and the diagnosis (after a failed launch), so each change is valid for every plan
it is offered for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mtpstudio.core.memory.budget import device_fits, gpu_layer_count, layer_words
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.terms import row_bytes
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import CacheType, DesktopReclaim, FlashAttention, MoePlacement
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import CTX_STEP, MIN_CTX, native_context
from mtpstudio.core.planner.advice import Standing, faster, gain_words, speed_key
from mtpstudio.core.units import MIB


@dataclass(frozen=True)
class PlanChange:
    """One labelled Plan change (``plan_with`` dotted keys).

    Attributes:
        label: what it does, in a few words (``draft max 2``, ``halve the context to 8192
            tokens``).
        changes: the ``plan_with`` changes that do it.
        lever: the lever it pulls (``draft``, ``cache``, ``context``, ``experts`` …).
        buys: what it buys (``2 more expert layers on the GPU, MTP kept``; why it helps).
    """

    label: str
    changes: dict[str, Any]
    lever: str = ""
    buys: str = ""

    def apply(self, plan: Plan) -> Plan:
        """``plan`` with the changes (raises ``PlanError`` when that is not a valid Plan)."""
        return plan_with(plan, self.changes)


@dataclass(frozen=True, kw_only=True)
class FitSuggestion(PlanChange):
    """A ``PlanChange`` evaluated by the planner: the plan it makes and that plan's budget.

    ``message`` says the change and its outcome; ``faster``: faster than the plan as it is
    (``core.advice.speed_key``); ``tok_s``: the estimated decode tokens/s of its plan.
    """

    plan: Plan
    budget: Budget
    message: str = ""
    faster: bool = False
    tok_s: float | None = None

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


def evaluated(change: PlanChange, plan: Plan, budget: Budget) -> FitSuggestion:
    """``change`` with the plan it makes and its budget: ``<label>: <outcome>``."""
    s = FitSuggestion(
        change.label, dict(change.changes), change.lever, change.buys, plan=plan, budget=budget
    )
    return replace(s, message=f"{change.label}: {s.outcome()}")


Evaluate = Callable[[PlanChange], FitSuggestion]
"""A change to the plan on the bench, evaluated (``planning.budget_for`` of it, resolved)."""


@dataclass(frozen=True)
class LeverBench:
    """What the planner's levers work on (built by ``planning``).

    Attributes:
        plan: the plan as given (every answer's plan is this plan with its changes).
        effective: the plan the engine runs (MTP decided).
        model: the model planned.
        budget: the budget of the plan as it is.
        mtp_active: MTP drafts in this plan.
        split: the plan is split over several devices.
        reclaims: the desktop reclaims that give VRAM back on the target, in order.
        evaluate: the one way a change is judged.
        moe_cache: the engine has the GPU cache of RAM experts (``--moe-cache-mib``).
    """

    plan: Plan
    effective: Plan
    model: ModelInfo
    budget: Budget
    mtp_active: bool
    split: bool
    evaluate: Evaluate
    reclaims: tuple[DesktopReclaim, ...] = field(default=())
    moe_cache: bool = False


# -- the moves: each change once, valid for any plan it is offered for ---------------------------

MTP_OFF: dict[str, Any] = {"mtp.enabled": False}


def draft_depth(plan: Plan, depth: int) -> dict[str, Any]:
    """Draft ``depth`` tokens at most; a fixed draft (min = max) stays fixed at the new depth."""
    changes: dict[str, Any] = {"mtp.draft_max": depth}
    if plan.mtp.draft_min > depth:
        changes["mtp.draft_min"] = depth
    return changes


def half_context(ctx: int) -> int:
    """Half the context, in the engine's 256-cell steps (at least 256)."""
    return max(MIN_CTX, (ctx // 2) // CTX_STEP * CTX_STEP)


def kv_cache(cache: CacheType, *, flash_attn: bool = True) -> dict[str, Any]:
    """K and V cache types (a quantized V cache needs flash attention)."""
    changes: dict[str, Any] = {
        "runtime.cache_type_k": cache.value,
        "runtime.cache_type_v": cache.value,
    }
    if flash_attn:
        changes["runtime.flash_attn"] = "on"
    return changes


def experts_on_cpu(n: int) -> dict[str, Any]:
    """The experts of the first ``n`` layers in RAM (``--n-cpu-moe n``)."""
    return {"runtime.moe": MoePlacement.N_CPU_MOE.value, "runtime.n_cpu_moe": n}


def gpu_layers(ngl: int, moe: MoePlacement) -> dict[str, Any]:
    """``-ngl ngl`` with the experts placed by ``moe``."""
    return {"runtime.moe": moe.value, "runtime.n_gpu_layers": ngl}


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


# -- the planner's levers: the smallest change toward a plan that fits ----------------------------

LEVER_COST = {
    "desktop:nvidia-profile": 0,
    "draft": 1,
    "cache": 2,
    "desktop:igpu": 3,
    "desktop:llvmpipe": 3,
    "experts": 4,
    "moe-cache": 4,
    "context": 5,
    "engine-fit": 6,
    "split": 6,
    "layers": 7,
}
"""How much each lever costs the user, cheapest first: a driver setting loses nothing; a lower
draft depth or a smaller cache type a little speed or quality; a desktop change is a new
login; experts in RAM slow generation; a shorter context holds less; whole layers on the CPU
slow it most."""

_RECLAIM_WORDS = {
    DesktopReclaim.NVIDIA_PROFILE: "with the NVIDIA driver profile",
    DesktopReclaim.IGPU: "with the display on the iGPU",
    DesktopReclaim.LLVMPIPE: "with the llvmpipe session",
}


def _good(s: FitSuggestion) -> bool:
    """Fits with every layer on the GPU (experts may be in RAM)."""
    return s.fits and not s.cpu_layers


def _first_good(bench: LeverBench, options: list[PlanChange]) -> FitSuggestion | None:
    last = None
    for change in options:
        last = bench.evaluate(change)
        if _good(last):
            return last
    return last


def largest_where(
    lo: int, hi: int, ok: Callable[[int], bool], guess: Callable[[], int] | None = None
) -> int | None:
    """The largest n in [lo, hi] with ``ok(n)`` (``ok`` true up to some n, then false).

    ``guess``, asked once ``ok(lo)`` and ``not ok(hi)`` are known: where the answer probably
    is. The search looks there first and gallops from it (1, 2, 4 … steps) until the answer
    is bracketed, then bisects: a good guess settles it in two budgets, a poor one costs a
    few more, and the answer is the bisection's all the same.
    """
    if not ok(lo):
        return None
    if guess is not None and lo < hi:
        if ok(hi):
            return hi
        hi -= 1
        g = min(max(guess(), lo), hi)
        if g == lo or ok(g):  # the answer is g or above: gallop up
            lo, step = g, 1
            while lo < hi:
                probe = min(hi, lo + step)
                if not ok(probe):
                    hi = probe - 1
                    break
                lo, step = probe, 2 * step
        else:  # below g: gallop down
            hi, step = g - 1, 1
            while lo < hi:
                probe = max(lo, hi - step + 1)
                if ok(probe):
                    lo = probe
                    break
                hi, step = probe - 1, 2 * step
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def smallest_where(lo: int, hi: int, ok: Callable[[int], bool], guess: int) -> int:
    """The smallest n in [lo, hi] with ``ok(n)`` (``ok`` false up to some n, then true; ``ok(hi)``
    known true). The search looks at ``guess`` first and gallops from it until the answer is
    bracketed, then bisects (the answer is the bisection's all the same)."""
    g = min(max(guess, lo), hi)
    if g == hi or ok(g):  # the answer is g or below: gallop down
        hi, step = g, 1
        while lo < hi:
            probe = max(lo, hi - step)
            if not ok(probe):
                lo = probe + 1
                break
            hi, step = probe, 2 * step
    else:  # above g: gallop up
        lo, step = g + 1, 1
        while lo < hi:
            probe = min(hi, lo + step - 1)
            if ok(probe):
                hi = probe
                break
            lo, step = probe + 1, 2 * step
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _free(s: FitSuggestion) -> int:
    """What the tightest device has left (negative: how far it is short)."""
    return min((d.free_bytes or 0 for d in s.budget.devices), default=0)


def _weights_on_devices(s: FitSuggestion) -> int:
    return sum(d.segments.get("weights", 0) for d in s.budget.devices)


def context_lever(bench: LeverBench, base: Mapping[str, Any] | None = None) -> FitSuggestion | None:
    """The largest context below the plan's that fits with every layer on the GPU (after the
    ``base`` changes); None when none does but the shortest fits with layers on the CPU (the
    layers lever's answer).

    A shorter context never needs more memory, so what fits is every step up to some step:
    the search is a bisection on the 256-cell grid. It looks at the step just below the plan's
    context first: a plan that already runs (the levers are asked for every plan, to find
    what runs faster) gets its answer from that one budget instead of the bisection's nine
    or ten, and the answer is the bisection's (``tests/planner/test_lever_search.py``
    compares the two).
    """
    base = dict(base or {})
    steps = bench.plan.runtime.ctx // CTX_STEP
    if steps <= 1:
        return None

    def at(step: int) -> FitSuggestion:
        ctx = step * CTX_STEP
        return bench.evaluate(PlanChange(f"ctx {ctx:,}", {**base, "runtime.ctx": ctx}, "context"))

    best = None
    lo, hi = 1, steps - (1 if bench.plan.runtime.ctx % CTX_STEP == 0 else 0)
    if _good(top := at(hi)):  # the largest step fits: the bisection would end there
        return top
    while lo <= hi:
        mid = (lo + hi) // 2
        s = at(mid)
        if _good(s):
            best, lo = s, mid + 1
        else:
            hi = mid - 1
    if best is not None:
        return best
    shortest = at(1)  # how close the context alone gets; one that fits only with layers on
    return None if shortest.fits else shortest  # the CPU is the layers lever's answer


def largest_context(
    bench: LeverBench, base: Mapping[str, Any] | None = None, ceiling: int | None = None
) -> FitSuggestion:
    """The largest context (a multiple of 256, up to the native context) at this offload (the
    plan after the ``base`` changes)."""
    base = dict(base or {})
    top = ceiling or native_context(bench.model.context_length) or MIN_CTX

    def at(ctx: int) -> FitSuggestion:
        return bench.evaluate(PlanChange("", {**base, "runtime.ctx": ctx}, "context"))

    def answer(s: FitSuggestion, message: str) -> FitSuggestion:
        return replace(s, changes={"runtime.ctx": s.plan.runtime.ctx}, message=message)

    lo, hi = 1, top // CTX_STEP
    best: FitSuggestion | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        s = at(mid * CTX_STEP)
        if device_fits(s.budget):
            best, lo = s, mid + 1
        else:
            hi = mid - 1
    if best is None:
        return answer(
            at(CTX_STEP),
            f"nothing fits even at ctx {CTX_STEP}: move experts or layers to the CPU first",
        )
    return answer(
        best, f"largest context that fits at this offload: {best.plan.runtime.ctx:,} tokens"
    )


def fewest_cpu_expert_layers(bench: LeverBench) -> FitSuggestion:
    """The smallest ``--n-cpu-moe N`` that fits at this context.

    Moving one more layer's experts never adds VRAM once some are on the CPU (the op-offload
    buffer appears with the first), so after N = 0 the answer is found by bisection: a few
    budgets instead of one per layer. The bisection starts where the experts' bytes per layer
    say the answer is (what all of them in RAM leaves spare, in layers), and its neighbour.
    """
    model, ctx = bench.model, bench.plan.runtime.ctx
    if not model.is_moe:
        s = bench.evaluate(PlanChange("", {}, "experts"))
        return replace(s, message="the model has no experts to move")

    def at(n: int) -> FitSuggestion:
        return bench.evaluate(PlanChange("", experts_on_cpu(n), "experts"))

    found = at(0)
    if not device_fits(found.budget):
        lo, hi = 1, model.block_count
        last = at(hi)
        if not device_fits(last.budget):
            return replace(
                last,
                changes={"runtime.moe": MoePlacement.ALL_CPU.value},
                message="even with every expert on the CPU it does not fit: lower the context "
                "or cache types",
            )
        per_layer = (_weights_on_devices(found) - _weights_on_devices(last)) // hi
        guess = hi - _free(last) // per_layer if per_layer > 0 else hi
        found = at(smallest_where(lo, hi, lambda n: device_fits(at(n).budget), guess))
    n = found.plan.runtime.n_cpu_moe
    return replace(
        found, message=f"fewest expert layers on the CPU at ctx {ctx:,}: --n-cpu-moe {n}"
    )


def fewest_cpu_layers(bench: LeverBench) -> FitSuggestion:
    """The largest ``-ngl`` (fewest whole layers on the CPU) that fits, placed by mtpstudio.

    A MoE model keeps every expert in RAM (``--cpu-moe``), as the engine's fit does once
    moving experts is not enough; a dense model just loses layers from the front.
    """
    model = bench.model
    moe = MoePlacement.ALL_CPU if model.is_moe else MoePlacement.GPU

    def at(ngl: int) -> FitSuggestion:
        return bench.evaluate(PlanChange("", gpu_layers(ngl, moe), "layers"))

    top = model.block_count + 1

    def guess() -> int:
        """Where the free bytes run out, the blocks' bytes taken as even: from ``-ngl 1`` (the
        output layer alone, larger than a block) to every layer on the GPU."""
        first, last = _free(at(1)), _free(at(top))
        if first < 0:
            return 0
        return 1 + first * (top - 1) // (first - last) if first > last else top

    best = largest_where(0, top, lambda n: device_fits(at(n).budget), guess)
    s = at(0 if best is None else best)
    where = layer_words(model, s.budget.placement)
    if best is None:
        message = f"even with every layer on the CPU it does not fit ({where})"
    else:
        message = (
            f"fewest layers on the CPU at ctx {bench.plan.runtime.ctx:,}: "
            f"-ngl {gpu_layer_count(model, s.budget.placement)} ({where})"
        )
    return replace(s, message=message)


def device_layer_counts(budget: Budget) -> list[int]:
    """Slots per device of a split budget (its blocks, and the output layer on its device)."""
    split = budget.split
    if split is None:
        return []
    sp = split.placement
    return [
        len(sp.device_blocks(i)) + (1 if sp.output_device == i else 0)
        for i in range(len(budget.devices))
    ]


def split_levers(bench: LeverBench) -> list[FitSuggestion]:
    """For each device that is short, the fewest layers moved to the device with the most room
    (``-ts``): ``move N layers from CUDA0 to CUDA1``."""
    counts = device_layer_counts(bench.budget)
    devices = bench.budget.devices
    out: list[FitSuggestion] = []
    for src, dev in enumerate(devices):
        if dev.fits is not False or counts[src] <= 1:
            continue
        room = [(d.free_bytes or 0, i) for i, d in enumerate(devices) if i != src and d.fits]
        if not room:
            continue
        dst = max(room)[1]
        last: FitSuggestion | None = None
        for k in range(1, counts[src]):
            split = list(counts)
            split[src] -= k
            split[dst] += k
            label = (
                f"move {k} layer{'s' * (k != 1)} from {dev.id} to {devices[dst].id} "
                f"(-ts {','.join(str(x) for x in split)})"
            )
            last = bench.evaluate(PlanChange(label, {"split.tensor_split": split}, "split"))
            if last.fits:
                break
        if last is not None:
            out.append(last)
    return out


MOE_CACHE_STEP_MIB = 256
"""The MoE cache lever's step: the largest cache in these steps that still fits."""


def moe_cache_lever(bench: LeverBench) -> FitSuggestion | None:
    """The largest GPU cache of the RAM experts (``--moe-cache-mib``, 256 MiB steps) the plan
    still fits with, where the engine has it and some layer keeps its attention on the GPU and
    all its experts in RAM (None: no such layer, no room, or no cache in this engine)."""
    placement = bench.budget.placement
    cacheable = (placement.cpu_expert_layers & placement.gpu_layers) - (
        {placement.partial.layer} if placement.partial is not None else set()
    )
    if not bench.moe_cache or not bench.model.is_moe or not cacheable or bench.split:
        return None
    spare = min((d.free_bytes for d in bench.budget.devices if d.free_bytes is not None), default=0)
    now = bench.plan.runtime.moe_cache_mib
    top = (now * MIB + spare) // (MOE_CACHE_STEP_MIB * MIB)
    if top <= now // MOE_CACHE_STEP_MIB:
        return None

    def at(n: int) -> FitSuggestion:
        mib = n * MOE_CACHE_STEP_MIB
        change = PlanChange(f"MoE cache {mib:,} MiB", {"runtime.moe_cache_mib": mib}, "moe-cache")
        return bench.evaluate(change)

    def useful(n: int) -> bool:
        s = at(n)
        cache = s.budget.moe_cache
        return device_fits(s.budget) and cache is not None and bool(cache.cached_layers)

    n = largest_where(1, int(top), useful, guess=lambda: int(top))
    if n is None or n * MOE_CACHE_STEP_MIB == now:
        return None
    found = at(n)
    cache = found.budget.moe_cache
    words = f" ({cache.words()})" if cache is not None else ""
    return replace(found, message=f"{found.label}{words}: {found.outcome()}")


def _engine_fit(bench: LeverBench) -> FitSuggestion:
    changes: dict[str, Any] = {"runtime.moe": MoePlacement.FIT.value, "runtime.n_gpu_layers": None}
    label = "let the engine's fit place the weights"
    if bench.split:
        changes["split.tensor_split"] = None
        label += " over the devices"
    return bench.evaluate(PlanChange(label, changes, "engine-fit"))


def fit_levers(bench: LeverBench) -> list[FitSuggestion]:
    """Every lever's smallest change toward a plan that fits with every layer on the GPU
    (unranked: ``planning.fit_suggestions`` ranks them by speed).

    The levers: the desktop reclaims the card allows, the draft depth (then MTP off), the K/V
    cache types, the context, experts in RAM (MoE), the engine's fit (for a plan that places
    weights itself), the GPU cache of the RAM experts (where the engine has it and VRAM is
    spare), and whole layers on the CPU (``-ngl N``); over several devices, layers moved
    between them instead of experts and layers.
    """
    eff = bench.effective
    out: list[FitSuggestion] = []
    for reclaim in bench.reclaims:
        change = PlanChange(
            _RECLAIM_WORDS[reclaim], {"desktop": reclaim.value}, f"desktop:{reclaim.value}"
        )
        out.append(bench.evaluate(change))
    if bench.mtp_active:
        depths = [
            PlanChange(f"draft max {d}", draft_depth(eff, d), "draft")
            for d in range(eff.mtp.draft_max - 1, 0, -1)
        ]
        depths.append(PlanChange("MTP off", MTP_OFF, "draft"))
        if bench.budget.fits is not False:  # it fits: each, the ranking keeps the fastest
            out += [s for s in map(bench.evaluate, depths) if s.fits]
        elif (s := _first_good(bench, depths)) is not None:
            out.append(s)
    caches = [
        PlanChange(f"K/V cache {c['runtime.cache_type_k']}/{c['runtime.cache_type_v']}", c, "cache")
        for c in cache_type_options(eff)
    ]
    if (s := _first_good(bench, caches)) is not None:
        out.append(s)
    if (s := context_lever(bench)) is not None:
        out.append(s)
    if bench.split:  # several devices: the split is the placement lever
        out += split_levers(bench)
        if eff.runtime.moe is not MoePlacement.FIT:
            out.append(_engine_fit(bench))
        return out
    if bench.model.is_moe:
        experts = fewest_cpu_expert_layers(bench)
        if experts.changes.get("runtime.moe") == MoePlacement.N_CPU_MOE.value:
            short = (
                f"--n-cpu-moe {experts.plan.runtime.n_cpu_moe} (fewest expert layers on the CPU)"
            )
            out.append(replace(experts, message=f"{experts.message}: {experts.outcome()}",
                               label=short))  # fmt: skip
    if eff.runtime.moe is not MoePlacement.FIT:
        out.append(_engine_fit(bench))
    if (s := moe_cache_lever(bench)) is not None:
        out.append(s)
    layers = fewest_cpu_layers(bench)
    if layers.cpu_layers or not layers.fits:  # else it is the experts lever's --cpu-moe
        short = f"-ngl {layers.changes.get('runtime.n_gpu_layers')} (fewest layers on the CPU)"
        out.append(replace(layers, message=f"{layers.message}: {layers.outcome()}",
                           label=short))  # fmt: skip
    return out


def offload_and_context(bench: LeverBench) -> list[FitSuggestion]:
    """The budget page's two Fit buttons: the fewest expert layers (or, for a dense model or
    when moving experts is not enough, whole layers) on the CPU here, then the largest context
    there; over several devices, the fewest layers moved to the device with the most room."""
    if bench.split:
        return _split_offload_and_context(bench)
    offload = fewest_cpu_expert_layers(bench)
    if not bench.model.is_moe or not offload.fits:
        offload = fewest_cpu_layers(bench)
    ctx = largest_context(bench, offload.changes if offload.fits else None)
    where = "with the offload suggested above" if offload.fits else "at the plan's own offload"
    ctx = replace(ctx, message=ctx.message.replace("at this offload", where))
    return [offload, ctx]


def _split_offload_and_context(bench: LeverBench) -> list[FitSuggestion]:
    here = evaluated(PlanChange("", {}, "split"), bench.plan, bench.budget)
    here = replace(here, message=f"the split as it is: {here.outcome()}")
    moves = split_levers(bench)
    offload = next((m for m in moves if m.fits), moves[0] if moves else here)
    ctx = context_lever(bench, offload.changes)
    if ctx is None:
        ctx = replace(here, message=f"ctx {bench.plan.runtime.ctx:,}: {here.outcome()}")
    return [offload, ctx]


# -- ranking -------------------------------------------------------------------------------------


def with_gain(s: FitSuggestion, now: Standing, then: Standing) -> FitSuggestion:
    """``s`` with what it buys in words (``core.advice``), beside its outcome."""
    label = s.label or s.message.split(":")[0]
    gain = gain_words(now, then) if s.fits else ""
    if gain.startswith("the same") and gain.endswith(("MTP kept", "MTP kept, ≈ same tok/s")):
        gain = ""  # nothing moves: what it buys is the memory
    quicker = s.fits and faster(now, then)
    message = f"{label}: {gain} — {s.outcome()}" if gain else f"{label}: {s.outcome()}"
    return replace(s, label=label, buys=gain, faster=quicker, message=message, tok_s=then.tok_s)


def rank_key(s: FitSuggestion, then: Standing) -> tuple[float, ...]:
    """What fits first, fastest first (``core.advice.speed_key``: the speed estimate), then
    the most memory spare, then the cheapest lever; what does not fit after, closest first."""
    cost = LEVER_COST.get(s.lever, len(LEVER_COST))
    if not s.fits:
        return (1.0, float(s.short_bytes), float(cost))
    return (0.0, *(-k for k in speed_key(then)), -float(s.spare_bytes), float(cost))
