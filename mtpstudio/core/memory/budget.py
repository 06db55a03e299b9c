"""The memory model: Plan + model + target device -> bytes per segment per device, and host RAM."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.engines.mtp import model_mtp_blocker
from mtpstudio.core.memory.budget_types import (
    Budget,
    DeviceBudget,
    EffectiveSettings,
    FitPlacement,
    HostBudget,
    SlotContext,
)
from mtpstudio.core.memory.cuda_rules import (
    CC_HOPPER,
    CudaHostRules,
    CudaRules,
    device_rules,
    parse_cc,
)
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.engine_fit import Layout, layout_placement, upstream_fit
from mtpstudio.core.memory.moe_cache import MoeCache, moe_cache
from mtpstudio.core.memory.placement import (
    EXPERT_TENSOR,
    LayerWeights,
    ModelWeights,
    PartialKind,
    PartialLayer,
    Placement,
    WeightSplit,
    cuda_alloc_size,
    place,
    residency_for,
    split_weights,
)
from mtpstudio.core.memory.runtime_growth import (
    MEASURED_ON,
    ContextRun,
    RuntimeGrowth,
    runtime_growth,
)
from mtpstudio.core.memory.terms import (
    UNMODELLED_COMPUTE_MARGIN,
    ComputeShape,
    compute_bytes,
    compute_bytes_ik,
    ik_all_outputs_bytes,
    kv_bytes_per_cell,
    kv_cache_bytes,
    output_buffer_bytes,
    pad_to,
    recurrent_row_bytes,
    recurrent_shadow_bytes,
    recurrent_step_bytes,
    replays_nextn_graph,
    replays_trunk,
    swa_cells,
    unmodelled_reason,
    with_safety_margin,
)
from mtpstudio.core.memory.trunk_graph import NEXTN_BLOCK_ARCHITECTURES, sliding_window_layers
from mtpstudio.core.memory.trust import NOTHING_MEASURED, Measured
from mtpstudio.core.model.info import ModelInfo, TensorInfo
from mtpstudio.core.plan.choices import FlashAttention, LoadMode, MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.units import MIB

UNQUANTIZED_CACHE = frozenset({"f32", "f16", "bf16"})


def quantized(cache_type: str) -> bool:
    """True for block-quantized cache types (q8_0, q4_0, ...)."""
    return cache_type not in UNQUANTIZED_CACHE


PROMPT_CACHE_DEFAULT = 8192 * MIB  # upstream --cache-ram default
MARGIN_PCT = round(100 * UNMODELLED_COMPUTE_MARGIN)


def trunk_shape(plan: Plan, eff: EffectiveSettings) -> ComputeShape:
    """The shape the engine reserves the trunk's compute buffer for: one ubatch over the
    slot's context, with outputs for every token MTP verifies."""
    rt = plan.runtime
    tk, tv = rt.cache_type_k.value, rt.cache_type_v.value
    n_outputs_max = min(rt.batch, eff.n_seq * (1 + (plan.mtp.draft_max if eff.mtp_active else 0)))
    return ComputeShape(
        n_tokens=min(eff.n_ctx, rt.ubatch),
        n_kv=eff.n_ctx_seq,
        n_stream=eff.n_stream,
        n_outputs=min(min(eff.n_ctx, rt.ubatch), n_outputs_max),
        flash_attn=eff.flash_attn,
        quantized_k=quantized(tk),
        quantized_v=quantized(tv),
        n_seq=max(1, eff.n_seq),
        n_rs_seq=eff.n_rs_seq if eff.mtp_active else 0,
        type_k=tk,
        type_v=tv,
    )


def draft_cache_types(plan: Plan, facts: EngineMemoryFacts) -> tuple[str, str]:
    """The MTP draft's K and V cache types: its own where the engine takes them, else the
    trunk's."""
    if facts.mtp_uses_draft_cache_types:
        return plan.mtp.cache_type_k.value, plan.mtp.cache_type_v.value
    return plan.runtime.cache_type_k.value, plan.runtime.cache_type_v.value


def draft_shape(plan: Plan, eff: EffectiveSettings, facts: EngineMemoryFacts) -> ComputeShape:
    """The shape the engine reserves the MTP draft's compute buffer for (one output per
    sequence, the draft sampler's top-k)."""
    dk, dv = draft_cache_types(plan, facts)
    return ComputeShape(
        n_tokens=min(eff.n_ctx, plan.runtime.ubatch),
        n_kv=eff.n_ctx_seq,
        n_stream=eff.n_stream,
        n_outputs=max(1, eff.n_seq),
        flash_attn=eff.flash_attn,
        quantized_k=quantized(dk),
        quantized_v=quantized(dv),
        n_seq=max(1, eff.n_seq),
        type_k=dk,
        type_v=dv,
        top_k=facts.draft_sampler_top_k,
    )


def slot_context(plan: Plan, facts: EngineMemoryFacts) -> SlotContext:
    """The plan's context as the engine pads it and splits it over the slots."""
    rt = plan.runtime
    n_seq = rt.parallel
    fa = rt.flash_attn is not FlashAttention.OFF
    pad = facts.kv_pad_flash if fa else facts.kv_pad_plain
    n_ctx = pad_to(rt.ctx, pad)
    if facts.per_slot_streams and n_seq > 1:
        n_ctx_seq = pad_to(n_ctx // n_seq, 256)
        return SlotContext(n_ctx_seq * n_seq, n_ctx_seq, n_seq)
    return SlotContext(n_ctx, n_ctx, 1)


def _effective(
    plan: Plan,
    model: ModelInfo,
    facts: EngineMemoryFacts,
    cpu_expert_layers: frozenset[int],
    mtp_active: bool | None = None,
) -> tuple[EffectiveSettings, list[str]]:
    rt = plan.runtime
    warnings: list[str] = []
    n_seq = rt.parallel
    fa = rt.flash_attn is not FlashAttention.OFF
    cells = slot_context(plan, facts)
    n_ctx, n_ctx_seq, n_stream = cells.n_ctx, cells.n_ctx_seq, cells.n_stream
    if mtp_active is None:  # a plan the planner did not resolve: MTP runs where it can
        mtp_active = plan.mtp.enabled is not False and model_mtp_blocker(model, facts) is None
    if plan.mtp.enabled is True and not mtp_active:  # asked for, and it cannot run: say why
        if not model.has_mtp:
            warnings.append(
                "MTP is on but the model has no MTP (nextn) layer: the engine will not draft."
            )
        elif model.architecture not in facts.mtp_architectures:
            warnings.append(
                f"{facts.flavour.value} cannot run MTP for {model.architecture}: it loads "
                "the model without drafting (switch engine or turn MTP off)."
            )
    n_rs_seq = 0
    if (
        mtp_active
        and facts.recurrent_rollback_copies
        and model.architecture in facts.rollback_architectures
    ):
        n_rs_seq = plan.mtp.draft_max
    if mtp_active and model.recurrent_layers and n_seq > 1:  # one slot (the default): silent
        warnings.append(
            f"{n_seq} slots with MTP keep {n_seq * (1 + n_rs_seq)} recurrent-state copies; "
            "use --parallel 1 unless you serve several users"
        )
    if rt.ctx > model.context_length > 0:
        warnings.append(f"ctx {rt.ctx} is beyond the model's native context {model.context_length}")
    if quantized(rt.cache_type_v.value) and not fa:
        warnings.append("a quantized V cache needs flash attention: the engine will refuse")
    if n_ctx != rt.ctx:
        warnings.append(f"ctx {rt.ctx} is padded to {n_ctx} by the engine")
    eff = EffectiveSettings(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_stream=n_stream,
        n_seq=n_seq,
        flash_attn=fa,
        mtp_active=mtp_active,
        n_rs_seq=n_rs_seq,
        cpu_expert_layers=cpu_expert_layers,
        n_gpu_layers=rt.n_gpu_layers,
    )
    return eff, warnings


def cpu_expert_layers_for(plan: Plan, model: ModelInfo) -> frozenset[int]:
    """Expert layers the plan's MoE placement keeps on the CPU (fit is resolved elsewhere)."""
    rt = plan.runtime
    if not model.is_moe:
        return frozenset()
    if rt.moe is MoePlacement.ALL_CPU:
        return frozenset(range(model.block_count))
    if rt.moe is MoePlacement.N_CPU_MOE:
        return frozenset(range(min(rt.n_cpu_moe, model.block_count)))
    return frozenset()


@dataclass(frozen=True)
class BudgetInputs:
    """Everything one budget is computed from, frozen: the plan as asked, the model, the
    target, the engine's memory facts, the host, the model's tensors, and the planner's
    decisions (MTP, a placement of its own) that the stages read and never make again.

    ``cpu_expert_layers`` / ``partial``: a placement chosen by the caller (the fit planner);
    None: the engine's fit, else the plan's. ``host_buffers``: count the ``CUDA_Host``
    buffers; ``fit_target_remedy``: search the ``--fit-target`` that survives the growth.
    ``mtp_active``: MTP as the planner decided it (None: where the model and engine can).
    """

    plan: Plan
    model: ModelInfo
    target: TargetDevice
    facts: EngineMemoryFacts
    host: HostSpec
    weights: ModelWeights
    cpu_expert_layers: frozenset[int] | None = None
    partial: PartialLayer | None = None
    host_buffers: bool = True
    fit_target_remedy: bool = True
    mtp_active: bool | None = None

    @property
    def scheduled(self) -> bool:
        """Upstream's scheduler on a CUDA card is replayed; elsewhere (other GPU backends,
        ik_llama.cpp's scheduler) the copies of RAM weights are estimated."""
        return self.target.is_cuda and not self.facts.reserves_all_logits


@dataclass(frozen=True)
class _Layout:
    """Where the weights go: the plan as the engine runs it (its fit's -ngl set), the placement."""

    plan: Plan
    fit: FitPlacement | None
    eff: EffectiveSettings
    placement: Placement
    split: WeightSplit
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _ContextCaches:
    """The attention KV cache and the recurrent state, per side, with what MTP adds to them."""

    cells: int
    kv_gpu: int
    kv_cpu: int
    rs_gpu: int
    rs_cpu: int


@dataclass(frozen=True)
class _Draft:
    """The MTP draft's own buffers (all zero with MTP off)."""

    kv: int = 0
    compute: int = 0
    host_compute: int = 0  # the CUDA_Host buffer, where replayed
    output: int = 0
    on_gpu: bool = False
    replayed: bool = False
    caches: _ContextCaches | None = None  # the main caches with the draft's share added
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Trunk:
    """The main graph's compute buffers."""

    shape: ComputeShape
    compute: int
    host_compute: int  # the CUDA_Host buffer, where replayed
    op_offload: int  # RAM weights copied in for large batches, where estimated
    replayed: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _Sides:
    """The segments on the target and in system RAM."""

    devices: tuple[DeviceBudget, ...]
    host_segments: dict[str, int]
    cache: MoeCache | None
    warnings: tuple[str, ...]


def compute_budget(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec | None = None,
    weights: ModelWeights | None = None,
    cpu_expert_layers: frozenset[int] | None = None,
    partial: PartialLayer | None = None,
    *,
    host_buffers: bool = True,
    fit_target_remedy: bool = True,
    mtp_active: bool | None = None,
) -> Budget:
    """Predict what the engine allocates for ``plan`` on ``target``.

    ``weights`` (from ``ModelWeights.from_model``) makes repeated calls cheap; ``cpu_expert_layers``
    overrides the plan's MoE placement (the fit planner uses it). With ``moe = fit`` the engine's
    own fit is simulated (see ``engine_fit_layers`` below). ``host_buffers=False`` leaves the
    replays of the ``CUDA_Host`` buffers out (the fit's projections do not count them);
    ``fit_target_remedy=False`` does not search the ``--fit-target`` that survives the growth.
    ``mtp_active``: MTP as the planner decided it; None: where the model and engine can. Stages:
    lay the weights out, size caches, draft and compute, put them on sides, say what won't fit.
    """
    return budget_of(
        BudgetInputs(
            plan,
            model,
            target,
            facts,
            host or HostSpec(),
            weights or ModelWeights.from_model(model),
            cpu_expert_layers,
            partial,
            host_buffers,
            fit_target_remedy,
            mtp_active,
        )
    )


def budget_of(inp: BudgetInputs) -> Budget:
    """The budget of one frozen set of inputs, stage by stage: lay the weights out, size the
    context caches, the draft's buffers and the trunk's compute, put the segments on their
    sides, then say what does not fit and how far each figure was checked."""
    layout = _lay_out(inp)
    plan, eff, placement = layout.plan, layout.eff, layout.placement
    caches = _context_caches(inp, layout)
    draft = _Draft()
    if eff.mtp_active:
        draft = _draft_buffers(inp, layout, caches)
        caches = draft.caches or caches
    trunk = _trunk_compute(inp, layout)
    growth = _growth(
        plan, inp.model, inp.target, inp.facts, eff, placement, draft.on_gpu, trunk.shape
    )
    sides = _sides(inp, layout, caches, draft, trunk, growth)
    host_budget = HostBudget(inp.host.total_bytes, inp.host.available_bytes, sides.host_segments)
    shortfall = _shortfall_words(inp, sides.devices, host_budget, layout, growth)
    replayed, sourced, kit = _trust(
        inp.target, sides.devices, inp.scheduled, draft, trunk, growth, sides.cache
    )
    return Budget(
        sides.devices,
        host_budget,
        eff,
        placement,
        layout.warnings + draft.warnings + trunk.warnings + sides.warnings + shortfall,
        _parts(plan, inp.model, layout, caches, draft, trunk, sides),
        replayed=replayed,
        sourced=sourced,
        kit=kit,
        growth=growth,
        fit=layout.fit,
        moe_cache=sides.cache,
    )


def _lay_out(inp: BudgetInputs) -> _Layout:
    """The engine's fit where it applies, else the plan's placement; the settings it runs."""
    plan, model, target, facts, mtp_active = (
        inp.plan,
        inp.model,
        inp.target,
        inp.facts,
        inp.mtp_active,
    )
    cpu_expert_layers, partial, weights = inp.cpu_expert_layers, inp.partial, inp.weights
    fit: FitPlacement | None = None
    if cpu_expert_layers is None:
        if engine_fit_applies(plan, target):
            fit = engine_fit_placement(plan, model, target, facts, inp.host, weights, mtp_active)
            cpu_expert_layers, partial = fit.cpu_expert_layers, fit.partial
            plan = with_gpu_layers(plan, fit.n_gpu_layers)
        else:
            cpu_expert_layers = cpu_expert_layers_for(plan, model)
    eff, warnings = _effective(plan, model, facts, cpu_expert_layers, mtp_active)
    placement = place(
        model,
        gpu=target.is_gpu,
        n_gpu_layers=eff.n_gpu_layers,
        cpu_expert_layers=cpu_expert_layers,
        load_mtp=eff.mtp_active,
        partial=partial,
    )
    if fit is not None:
        warnings += fit_words(fit, model, placement, facts)
    elif target.is_gpu and plan.runtime.n_gpu_layers is not None:
        warnings.append(f"-ngl {plan.runtime.n_gpu_layers}: {layer_words(model, placement)}")
    split = split_weights(weights, placement)
    return _Layout(plan, fit, eff, placement, split, tuple(warnings))


def _context_caches(inp: BudgetInputs, layout: _Layout) -> _ContextCaches:
    """The trunk's attention KV cache and recurrent state on each side."""
    plan, model, facts = layout.plan, inp.model, inp.facts
    eff, placement = layout.eff, layout.placement
    rt = plan.runtime
    gpu_attn = [i for i in model.attention_layers if i in placement.gpu_layers]
    cpu_attn = [i for i in model.attention_layers if i not in placement.gpu_layers]
    tk, tv = rt.cache_type_k.value, rt.cache_type_v.value
    cells = eff.n_ctx_seq * eff.n_stream
    # upstream gives sliding-window layers a cache of the window plus a ubatch (per stream)
    swa = cells
    if facts.sliding_window_cache and sliding_window_layers(model):
        swa = swa_cells(model, eff.n_ctx_seq, min(eff.n_ctx, rt.ubatch)) * eff.n_stream
    kv_gpu = kv_cache_bytes(model, gpu_attn, tk, tv, cells, swa)
    kv_cpu = kv_cache_bytes(model, cpu_attn, tk, tv, cells, swa)

    rows = max(1, eff.n_seq) * (1 + eff.n_rs_seq)
    if facts.recurrent_in_kv_buffer:
        rows = min(max(1, eff.n_seq), eff.n_ctx)
    rs_row = recurrent_row_bytes(model)
    rec = model.recurrent_layers
    rs_gpu = rs_row * rows * sum(1 for i in rec if i in placement.gpu_layers)
    rs_cpu = rs_row * rows * sum(1 for i in rec if i not in placement.gpu_layers)
    return _ContextCaches(cells, kv_gpu, kv_cpu, rs_gpu, rs_cpu)


def _draft_buffers(inp: BudgetInputs, layout: _Layout, caches: _ContextCaches) -> _Draft:
    """The MTP draft's KV cache, compute and output buffers; its share of the main caches."""
    plan, model, target, facts, weights = layout.plan, inp.model, inp.target, inp.facts, inp.weights
    host_buffers, scheduled = inp.host_buffers, inp.scheduled
    rt, eff, placement = plan.runtime, layout.eff, layout.placement
    warnings: list[str] = []
    dk, dv = draft_cache_types(plan, facts)
    kv = kv_bytes_per_cell(model, model.n_nextn_layer, dk, dv) * caches.cells
    shape = draft_shape(plan, eff, facts)
    on_gpu = any(i >= model.n_layer for i in placement.gpu_layers)
    nextn = weights.layers[model.n_layer] if model.n_layer < len(weights.layers) else None
    ffn = nextn.ffn_tensors if nextn is not None else ()
    # upstream on CUDA: the scheduler's splits and copies replayed (what the MTP block
    # reads from RAM is copied in for 32+ tokens); elsewhere the copy is estimated below
    residency = (
        residency_for(weights, placement, op_offload=rt.op_offload, layers=[model.n_layer])
        if scheduled
        else None
    )
    rules = device_rules(target, model, ffn, residency=residency)
    compute = compute_bytes(model, shape, recurrent=False, rules=rules)
    host_compute = 0
    if isinstance(rules, CudaRules) and host_buffers:
        host_rules = CudaHostRules(device=rules)
        host_compute = compute_bytes(model, shape, recurrent=False, rules=host_rules)
    # the replays are upstream's draft graphs; ik_llama.cpp's Qwen3.5/3.6 draft matched
    # its log (tests/engines/test_recorded_eras.py), its GLM-4.5 draft was never checked
    replayed = replays_nextn_graph(model, shape) and not (
        facts.reserves_all_logits and model.architecture in NEXTN_BLOCK_ARCHITECTURES
    )
    if facts.reserves_all_logits and replayed:
        # ik's MTP context keeps a whole ubatch of outputs as its main context does: the
        # nextn block's replay, or those outputs where they are more (4,000 tokens of
        # vocabulary and 256 of embedding at -ub 512: 8.31 MiB logged at every context up
        # to 4k, where the replay gives 7.02 at 4k; tests/integration/test_budget_accuracy.py)
        compute = max(compute, ik_all_outputs_bytes(model, shape.n_tokens))
    if not replayed:
        compute = with_safety_margin(compute)
        warnings.append(
            f"mtpstudio does not model {facts.flavour.value}'s {model.architecture} MTP "
            f"draft graph here: its buffer is an estimate planned with a {MARGIN_PCT} % "
            "safety margin"
        )
    offloaded = _offloads(plan, shape.n_tokens, target) and on_gpu
    experts_in_ram = model.n_layer in placement.cpu_expert_layers and model.is_moe
    if not scheduled and offloaded and experts_in_ram and nextn is not None:
        compute += nextn.expert_gpu_bytes
    output = output_buffer_bytes(model, eff.n_seq)
    return _Draft(
        kv,
        compute,
        host_compute,
        output,
        on_gpu,
        replayed,
        _with_draft_share(plan, model, facts, placement, caches, on_gpu),
        tuple(warnings),
    )


def _with_draft_share(
    plan: Plan,
    model: ModelInfo,
    facts: EngineMemoryFacts,
    placement: Placement,
    caches: _ContextCaches,
    draft_on_gpu: bool,
) -> _ContextCaches:
    """The main caches with what the draft adds to them, where the engine keeps it there."""
    kv_gpu, kv_cpu, rs_gpu, rs_cpu = caches.kv_gpu, caches.kv_cpu, caches.rs_gpu, caches.rs_cpu
    if facts.mtp_layers_in_main_kv:  # the main context keeps the nextn layers' KV as well
        tk, tv = plan.runtime.cache_type_k.value, plan.runtime.cache_type_v.value
        nextn_kv = kv_bytes_per_cell(model, model.n_nextn_layer, tk, tv) * caches.cells
        if draft_on_gpu:
            kv_gpu += nextn_kv
        else:
            kv_cpu += nextn_kv
    if facts.recurrent_step_checkpoints:  # per-step rollback copies for the draft's steps
        # and the conv-state shadow of each layer beside them
        step = recurrent_step_bytes(model, plan.mtp.draft_max + 1)
        step += recurrent_shadow_bytes(model)
        rec = model.recurrent_layers
        rs_gpu += step * sum(1 for i in rec if i in placement.gpu_layers)
        rs_cpu += step * sum(1 for i in rec if i not in placement.gpu_layers)
    return _ContextCaches(caches.cells, kv_gpu, kv_cpu, rs_gpu, rs_cpu)


def _trunk_compute(inp: BudgetInputs, layout: _Layout) -> _Trunk:
    """The main graph's compute buffer on the target, and its CUDA_Host buffer."""
    plan, model, target, facts, weights = layout.plan, inp.model, inp.target, inp.facts, inp.weights
    eff, placement, host_buffers, scheduled = (
        layout.eff,
        layout.placement,
        inp.host_buffers,
        inp.scheduled,
    )
    shape = trunk_shape(plan, eff)
    replayed = False
    host_compute = 0
    warnings: list[str] = []
    if facts.reserves_all_logits:
        compute = compute_bytes_ik(model, shape)
    else:
        # on a CUDA card the trunk's replay follows the scheduler (splits, input copies,
        # weights copied in from RAM) and graph_optimize on each of the card's splits
        residency = None
        if scheduled:
            trunk = range(model.n_layer)
            residency = residency_for(
                weights, placement, op_offload=plan.runtime.op_offload, layers=trunk
            )
        rules = device_rules(target, model, _moe_ffn_tensors(weights), residency=residency)
        compute = compute_bytes(model, shape, rules=rules)
        if scheduled and isinstance(rules, CudaRules) and host_buffers:
            host_compute = compute_bytes(model, shape, rules=CudaHostRules(device=rules))
        replayed = replays_trunk(model, shape)
        reason = unmodelled_reason(model, shape)
        if reason is not None:
            compute = with_safety_margin(compute)
            warnings.append(
                f"{reason}: its compute buffer is an estimate planned with a {MARGIN_PCT} % "
                "safety margin"
            )
    op_offload = (
        0 if scheduled else op_offload_bytes(plan, weights, placement, shape.n_tokens, target)
    )
    return _Trunk(shape, compute, host_compute, op_offload, replayed, tuple(warnings))


def _weight_rows(load_mode: LoadMode, cpu_weights: int) -> dict[str, int]:
    """The CPU-side weights in system RAM, under the row of their load mode."""
    return {
        "weights_mapped": cpu_weights if load_mode is LoadMode.MMAP else 0,
        "weights_resident": cpu_weights if load_mode is LoadMode.NO_MMAP else 0,
        "weights_locked": cpu_weights if load_mode is LoadMode.MLOCK else 0,
    }


def _cpu_weights(plan: Plan, split: WeightSplit) -> int:
    # mmap maps the whole file range of the CPU tensors (the MTP block too, with MTP off)
    mapped = plan.runtime.load_mode is LoadMode.MMAP
    return split.cpu_mapped_bytes if mapped else split.cpu_bytes


def _sides(
    inp: BudgetInputs,
    layout: _Layout,
    caches: _ContextCaches,
    draft: _Draft,
    trunk: _Trunk,
    growth: RuntimeGrowth,
) -> _Sides:
    """Every segment on the target device and in system RAM."""
    if inp.target.is_gpu:
        return _gpu_sides(inp, layout, caches, draft, trunk, growth)
    plan, model, target, host = layout.plan, inp.model, inp.target, inp.host
    load_mode = plan.runtime.load_mode
    cpu_weights = _cpu_weights(plan, layout.split)
    output = output_buffer_bytes(model, layout.eff.n_seq)
    cpu_segments = {
        "weights": cpu_weights,
        "kv_cache": caches.kv_cpu,
        "recurrent_state": caches.rs_cpu,
        "mtp_kv_cache": draft.kv,
        "mtp_compute": draft.compute,
        "compute": trunk.compute,
        "output": output + draft.output,
        "desktop": 0,
        "other_processes": 0,
        "driver_overhead": 0,
        "runtime_growth": 0,
        "margin": 0,
    }
    total = target.total_bytes if target.total_bytes is not None else host.total_bytes
    devices = (DeviceBudget("CPU", target.name, total, cpu_segments),)
    host_segments = {
        **_weight_rows(load_mode, cpu_weights),
        "kv_cache": caches.kv_cpu,
        "recurrent_state": caches.rs_cpu,
        "mtp_kv_cache": draft.kv,
        "compute": trunk.compute + draft.compute,
        "output": output + draft.output,
        "prompt_cache_max": PROMPT_CACHE_DEFAULT,
    }
    # the engine refuses the MoE cache without a GPU (the plan leaves it out)
    return _Sides(devices, host_segments, None, ())


def _gpu_sides(
    inp: BudgetInputs,
    layout: _Layout,
    caches: _ContextCaches,
    draft: _Draft,
    trunk: _Trunk,
    growth: RuntimeGrowth,
) -> _Sides:
    """The segments on a GPU and in system RAM beside it."""
    plan, model, target, facts, weights = layout.plan, inp.model, inp.target, inp.facts, inp.weights
    scheduled = inp.scheduled
    rt, split, placement = plan.runtime, layout.split, layout.placement
    warnings: list[str] = []
    cpu_weights = _cpu_weights(plan, split)
    margin = rt.fit_margin_mib * MIB
    if layout.fit is not None:
        # the engine's fit leaves the margin free at the load; what the process adds
        # after it (and its warm-up) grows into that room
        margin = max(0, margin - growth.load_bytes - growth.bytes)
    cache = None
    if rt.moe_cache_mib > 0 and facts.moe_cache:
        cache = moe_cache(model, weights, placement, rt.moe_cache_mib * MIB)
        warnings.append(cache.words())
    gpu_segments = {
        "weights": split.gpu_bytes,
        "kv_cache": caches.kv_gpu,
        "recurrent_state": caches.rs_gpu,
        "mtp_kv_cache": draft.kv if draft.on_gpu else 0,
        "mtp_compute": draft.compute if draft.on_gpu else 0,
        "compute": trunk.compute + trunk.op_offload,
        "output": 0,
        "desktop": target.desktop_bytes,
        "other_processes": target.other_bytes,
        "driver_overhead": target.driver_overhead_bytes + growth.load_bytes,
        "runtime_growth": growth.bytes,
        "margin": margin,
    }
    if cache is not None:  # the banks on the card; the fit counts them as context memory
        gpu_segments["moe_cache"] = cache.device_bytes
    devices = (DeviceBudget(target.id, target.name, target.total_bytes, gpu_segments),)
    cpu_layers = any(i not in placement.gpu_layers for i in placement.loaded_layers)
    # the CPU runs the graph of its layers too: its own compute buffer (estimate), or
    # on CUDA the replayed CUDA_Host buffers (inputs, host ops, what the CPU runs)
    cpu_compute = (
        trunk.host_compute + draft.host_compute if scheduled else trunk.compute if cpu_layers else 0
    )
    host_segments = {
        **_weight_rows(rt.load_mode, cpu_weights),
        "kv_cache": caches.kv_cpu,
        "recurrent_state": caches.rs_cpu,
        "mtp_kv_cache": 0 if draft.on_gpu else draft.kv,
        "compute": (0 if draft.on_gpu else draft.compute) + cpu_compute,
        "output": output_buffer_bytes(model, layout.eff.n_seq) + draft.output,
        "prompt_cache_max": PROMPT_CACHE_DEFAULT,
    }
    if cache is not None:  # the slot maps, one per cached layer
        host_segments["moe_cache"] = cache.map_bytes
    if split.cpu_expert_bytes and rt.load_mode is LoadMode.MMAP:
        warnings.append(
            f"{split.cpu_expert_bytes / MIB:,.0f} MiB of experts stay in system RAM "
            "(memory-mapped): the first tokens read them from disk"
        )
    return _Sides(devices, host_segments, cache, tuple(warnings))


def _shortfall_words(
    inp: BudgetInputs,
    devices: tuple[DeviceBudget, ...],
    host_budget: HostBudget,
    layout: _Layout,
    growth: RuntimeGrowth,
) -> tuple[str, ...]:
    """What does not fit, with what to change."""
    model = inp.model
    warnings: list[str] = []
    fit = layout.fit
    for d in devices:
        engine_fit = fit is not None and not fit.fails
        if d.fits is False and d.free_bytes is not None and engine_fit and inp.fit_target_remedy:
            remedy = surviving_fit_margin(
                inp.plan, model, inp.target, inp.facts, inp.host, inp.weights, inp.mtp_active
            )
            warnings.append(
                f"the engine's fit with --fit-target {layout.plan.runtime.fit_margin_mib} loads, "
                f"but the process grows by {(growth.load_bytes + growth.bytes) / MIB:,.0f} MiB "
                f"after the load and {d.id} is then {-d.free_bytes / MIB:,.0f} MiB short: "
                + (
                    f"use --fit-target {remedy} (mtpstudio: fit margin {remedy} MiB)"
                    if remedy is not None
                    else "no --fit-target up to 8 GiB more makes it fit: lower the context"
                )
            )
        elif d.fits is False and d.free_bytes is not None and not engine_fit:
            warnings.append(
                f"{d.id} is {-d.free_bytes / MIB:,.0f} MiB short: lower ctx, use a smaller cache "
                f"type, or move more {'expert layers' if model.is_moe else 'layers'} to the CPU "
                "(see the Fit suggestions)"
            )
    if host_budget.fits is False:
        warnings.append("not enough free system RAM for the CPU-side weights and buffers")
    return tuple(warnings)


def _parts(
    plan: Plan,
    model: ModelInfo,
    layout: _Layout,
    caches: _ContextCaches,
    draft: _Draft,
    trunk: _Trunk,
    sides: _Sides,
) -> dict[str, int]:
    """Each buffer's total over both sides, by name."""
    split = layout.split
    cpu_weights = _cpu_weights(plan, split)
    return {
        "weights_total": split.gpu_bytes + cpu_weights,
        "weights_gpu": split.gpu_bytes,
        "weights_cpu": cpu_weights,
        "weights_cpu_tensors": split.cpu_bytes,  # what stays in RAM of the mapped range
        "weights_cpu_experts": split.cpu_expert_bytes,
        "kv_cache": caches.kv_gpu + caches.kv_cpu,
        "recurrent_state": caches.rs_gpu + caches.rs_cpu,
        "mtp_kv_cache": draft.kv,
        "output": output_buffer_bytes(model, layout.eff.n_seq),
        "mtp_output": draft.output,
        "compute": trunk.compute,
        "mtp_compute": draft.compute,
        "op_offload_compute": trunk.op_offload,
        "compute_host": trunk.host_compute,
        "mtp_compute_host": draft.host_compute,
        **({"moe_cache": sides.cache.device_bytes} if sides.cache is not None else {}),
    }


def _trust(
    target: TargetDevice,
    devices: tuple[DeviceBudget, ...],
    scheduled: bool,
    draft: _Draft,
    trunk: _Trunk,
    growth: RuntimeGrowth,
    cache: MoeCache | None,
) -> tuple[Measured, Measured, Measured]:
    """How far each segment was checked: (replayed on the CPU, from the source, by the kit)."""
    if devices[0].id == "CPU":
        # the graph replays matched the engine's allocator traces on the CPU backend only
        replayed = frozenset(
            ("CPU", segment)
            for segment, replay in (("mtp_compute", draft.replayed), ("compute", trunk.replayed))
            if replay
        )
        return replayed, NOTHING_MEASURED, NOTHING_MEASURED
    if not target.is_cuda:
        return NOTHING_MEASURED, NOTHING_MEASURED, NOTHING_MEASURED
    # upstream's CUDA padding and the scheduler's replays were checked on Hopper cards by
    # the GPU kit; on other cards the replays follow the same source (the attention kernel
    # chosen differs by card); ik_llama.cpp's CUDA code is its own: from the source at most
    cc = parse_cc(target.compute_capability)
    hopper = cc is not None and cc[0] == CC_HOPPER[0] and scheduled  # sm_90, as measured
    checked = {"weights"} if scheduled else set()
    unchecked = set() if scheduled else {"weights"}
    for segment, replay in (
        ("compute", trunk.replayed and scheduled),
        ("mtp_compute", draft.replayed and draft.on_gpu),
    ):
        if replay:
            (checked if hopper else unchecked).add(segment)
    if hopper:  # the context at init was measured on these cards; elsewhere published
        checked.add("driver_overhead")
    if cache is not None:  # llama-moe-cache.cpp's sizing, never measured on a card
        unchecked.add("moe_cache")
    if growth.trust == MEASURED_ON:
        checked.add("runtime_growth")
    elif growth.trust == "source":
        unchecked.add("runtime_growth")
    kit = frozenset((target.id, name) for name in checked)
    sourced = frozenset((target.id, name) for name in unchecked)
    return NOTHING_MEASURED, sourced, kit


_PARTIAL_WORDS = {
    PartialKind.UP: "its up experts stay on the GPU",
    PartialKind.GATE: "its up and gate experts stay on the GPU",
    PartialKind.ATTN: "only its attention stays on the GPU (router and shared expert in RAM)",
}

OP_OFFLOAD_MIN_BATCH = 32
"""ggml-cuda offloads an op on host weights to the GPU from this batch size on."""


def _offloads(plan: Plan, n_tokens: int, target: TargetDevice) -> bool:
    """Whether ops on host-resident weights run on the GPU for a batch of ``n_tokens``."""
    return target.is_gpu and plan.runtime.op_offload and n_tokens >= OP_OFFLOAD_MIN_BATCH


def op_offload_bytes(
    plan: Plan, weights: ModelWeights, placement: Placement, n_tokens: int, target: TargetDevice
) -> int:
    """GPU compute-buffer bytes for RAM-resident weights copied over for large batches.

    With ``--op-offload`` (upstream's default) the scheduler runs a matmul whose weights sit in
    host memory on the GPU when the batch has 32+ tokens, copying the weights into the GPU
    compute buffer; the reservation holds about one layer's RAM-resident tensors (engines.md
    §5d): its experts, or the whole layer when the layer is on the CPU (an estimate: the
    layer's attention and FFN can fall into separate splits).
    """
    if not _offloads(plan, n_tokens, target):
        return 0
    if not placement.gpu_layers and not placement.output_on_gpu:
        return 0
    per_layer = []
    for lw in weights.layers:
        if lw.layer not in placement.loaded_layers:
            continue
        if lw.layer not in placement.gpu_layers:
            per_layer.append(lw.dense_gpu_bytes + lw.expert_gpu_bytes)
        elif lw.layer in placement.cpu_expert_layers:
            per_layer.append(lw.expert_gpu_bytes)
    split = 0
    if placement.partial is not None:
        partial = placement.partial
        split = sum(
            cuda_alloc_size(t)
            for t in weights.layers[partial.layer].ffn_tensors
            if EXPERT_TENSOR.match(t.name) and partial.kind.moves(t.name)
        )
    return max(split, max(per_layer, default=0))


def _growth(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    eff: EffectiveSettings,
    placement: Placement,
    draft_on_gpu: bool,
    shape: ComputeShape,
) -> RuntimeGrowth:
    """What the engine process on ``target`` adds after the load (``runtime_growth``)."""
    offload = _offloads(plan, shape.n_tokens, target)

    def runs_experts(layers: list[int]) -> bool:
        if not model.is_moe or not layers:
            return False
        on_card = any(
            i in placement.gpu_layers and i not in placement.cpu_expert_layers for i in layers
        )
        return on_card or offload

    trunk = [i for i in placement.loaded_layers if i < model.n_layer]
    contexts = [
        ContextRun(
            False, runs_experts(trunk), shape.n_tokens, eff.flash_attn, eff.n_ctx_seq, model.n_head
        )
    ]
    if eff.mtp_active and draft_on_gpu:
        nextn = [i for i in placement.loaded_layers if i >= model.n_layer]
        contexts.append(
            ContextRun(
                True,
                runs_experts(nextn),
                shape.n_tokens,
                eff.flash_attn,
                eff.n_ctx_seq,
                model.n_head,
            )
        )
    return runtime_growth(target, tuple(contexts), graphs=True, ik=not facts.cuda_measured)


def _moe_ffn_tensors(weights: ModelWeights) -> tuple[TensorInfo, ...]:
    """The FFN tensors of the first block with routed experts (the fusions' weight checks)."""
    first: LayerWeights | None = next((lw for lw in weights.layers if lw.expert_bytes), None)
    return first.ffn_tensors if first is not None else ()


def device_fits(budget: Budget) -> bool:
    """No device is over its size (unknown sizes count as fitting)."""
    return all(d.fits is not False for d in budget.devices)


def engine_fit_applies(plan: Plan, target: TargetDevice) -> bool:
    """The engine's own fit places the weights: fit asked for, a GPU of known size, no -ngl."""
    rt = plan.runtime
    return (
        rt.moe is MoePlacement.FIT
        and target.is_gpu
        and bool(target.total_bytes)
        and rt.n_gpu_layers is None
    )


def with_gpu_layers(plan: Plan, n_gpu_layers: int | None) -> Plan:
    """``plan`` with ``runtime.n_gpu_layers`` set (no validation: the value is the engine's)."""
    if n_gpu_layers == plan.runtime.n_gpu_layers:
        return plan
    runtime = plan.runtime.model_copy(update={"n_gpu_layers": n_gpu_layers})
    return plan.model_copy(update={"runtime": runtime})


def _fit_layers_from_back(
    plan: Plan, model: ModelInfo, facts: EngineMemoryFacts, mtp_active: bool | None = None
) -> int:
    """How many blocks the fit counts: upstream adds the MTP block when it is loaded
    (``hp_ngl += n_layer_nextn`` in common/fit.cpp), so its experts are the first to move.
    ``mtp_active``: as the planner decided it (None: on, or auto, where it can run)."""
    if mtp_active is None:
        mtp_active = plan.mtp.enabled is not False and model_mtp_blocker(model, facts) is None
    mtp_loaded = facts.fit_counts_mtp_block and mtp_active
    return model.block_count if mtp_loaded else model.n_layer


def fit_layer_slots(
    plan: Plan, model: ModelInfo, facts: EngineMemoryFacts, mtp_active: bool | None = None
) -> int:
    """The largest ``-ngl`` the engine's fit sets: the blocks it counts plus the output layer.

    Upstream counts the trunk (and a loaded MTP block), so with MTP off its largest value
    leaves layer 0 on the CPU (``-ngl`` counts every block from the back); ik counts every block.
    """
    if facts.fit_counts_mtp_block:
        return _fit_layers_from_back(plan, model, facts, mtp_active) + 1
    return model.block_count + 1


def engine_fit_placement(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec,
    weights: ModelWeights,
    mtp_active: bool | None = None,
) -> FitPlacement:
    """Expert layers and whole layers the engine's fit moves to the CPU.

    Upstream's fit is replayed with its own arithmetic (``upstream_fit_placement``). ik's fit
    moves the expert tensors of the last layers to the CPU (overrides from the last layer
    down) until the budget fits; a dense model loses whole layers from the output layer down
    (the largest ``-ngl`` whose budget fits: "Setting layer N to device"); a MoE model that
    does not fit with every expert in RAM stops (``Unable to auto-fit model``).
    """
    if facts.fit_splits_layers:  # upstream: its own arithmetic (common/fit.cpp)
        return upstream_fit_placement(plan, model, target, facts, host, weights, mtp_active)
    n = _fit_layers_from_back(plan, model, facts, mtp_active)

    def fits(layers: frozenset[int], ngl: int | None = None) -> bool:
        budget = compute_budget(
            with_gpu_layers(plan, ngl),
            model,
            target,
            facts,
            host,
            weights,
            cpu_expert_layers=layers,
            mtp_active=mtp_active,
        )
        return device_fits(budget)

    if model.is_moe:
        for k in range(n + 1):
            layers = frozenset(range(n - k, n))
            if fits(layers):
                return FitPlacement(layers)
        every = frozenset(range(model.block_count))
        if not facts.fit_moves_layers_of_moe:
            return FitPlacement(every, fails=True)
    else:
        every = frozenset()
        if fits(every):
            return FitPlacement(every)
    # the largest -ngl that fits (the budget grows with every layer on the GPU)
    lo, hi = 0, fit_layer_slots(plan, model, facts, mtp_active)
    if not fits(every, ngl=hi):
        while lo < hi - 1:
            mid = (lo + hi) // 2
            if fits(every, ngl=mid):
                lo = mid
            else:
                hi = mid
        hi = lo
    return FitPlacement(every, None, hi)


def upstream_fit_placement(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec,
    weights: ModelWeights,
    mtp_active: bool | None = None,
) -> FitPlacement:
    """Upstream's fit on one device, with the engine's own arithmetic (``engine_fit``).

    Its projection of a layout is what the engine counts: the weights, KV cache, recurrent
    state and compute buffer it would put on the card, plus the MTP draft context measured as
    if all on the card; against what the card has free when the fit measures: the total less
    the driver's context at init, the desktop and other processes, and the recurrent state
    the measurement really allocated; less ``--fit-target``.
    """
    hp_ngl = _fit_layers_from_back(plan, model, facts, mtp_active)
    slots = hp_ngl + 1

    def budget_of(layout: Layout) -> Budget:
        lp = layout_placement(layout, hp_ngl, model.block_count)
        ngl = None if lp.n_gpu_layers >= model.block_count + 1 else lp.n_gpu_layers
        return compute_budget(
            with_gpu_layers(plan, ngl),
            model,
            target,
            facts,
            host,
            weights,
            cpu_expert_layers=lp.cpu_expert_layers,
            partial=lp.partial,
            host_buffers=False,
            mtp_active=mtp_active,
        )

    whole = budget_of(Layout(slots, 0)).devices[0].segments
    draft = whole["mtp_kv_cache"] + whole["mtp_compute"]  # its own parameters: all on the card

    def project(layout: Layout) -> int:
        s = budget_of(layout).devices[0].segments
        return s["weights"] + s["kv_cache"] + s["recurrent_state"] + s["compute"] + draft

    at_init = target.driver_overhead_bytes  # the context at init (and NVML's reserved)
    free = (target.total_bytes or 0) - at_init - target.desktop_bytes - target.other_bytes
    if target.is_cuda:  # allocated for real while the fit measures (a card's true free)
        free -= whole["recurrent_state"]
    search = upstream_fit(
        project,
        hp_ngl=hp_ngl,
        moe=model.is_moe,
        free=free,
        margin=plan.runtime.fit_margin_mib * MIB,
    )
    if search.layout is None:
        return FitPlacement(frozenset(), search=search)
    lp = layout_placement(search.layout, hp_ngl, model.block_count)
    ngl = None if lp.n_gpu_layers >= model.block_count + 1 else lp.n_gpu_layers
    return FitPlacement(lp.cpu_expert_layers, lp.partial, ngl, search=search)


FIT_TARGET_STEP_MIB = 64
FIT_TARGET_SEARCH_MIB = 8192


def surviving_fit_margin(
    plan: Plan,
    model: ModelInfo,
    target: TargetDevice,
    facts: EngineMemoryFacts,
    host: HostSpec,
    weights: ModelWeights,
    mtp_active: bool | None = None,
) -> int | None:
    """The smallest ``--fit-target`` (MiB, in steps of 64) with which the engine's own fit
    leaves room for what the process grows by after the load; None when up to 8 GiB more
    than the plan's is not enough."""

    def survives(margin: int) -> bool:
        runtime = plan.runtime.model_copy(update={"fit_margin_mib": margin})
        trial = plan.model_copy(update={"runtime": runtime})
        budget = compute_budget(
            trial,
            model,
            target,
            facts,
            host,
            weights,
            host_buffers=False,
            fit_target_remedy=False,
            mtp_active=mtp_active,
        )
        return all(  # the peak after the growth, without what is left of the margin
            d.total_bytes is None or d.used_bytes - d.segments["margin"] <= d.total_bytes
            for d in budget.devices
        )

    lo = plan.runtime.fit_margin_mib  # does not survive
    hi = lo + FIT_TARGET_SEARCH_MIB
    if not survives(hi):
        return None
    while hi - lo > FIT_TARGET_STEP_MIB:
        mid = lo + (hi - lo) // 2 // FIT_TARGET_STEP_MIB * FIT_TARGET_STEP_MIB
        mid = max(mid, lo + FIT_TARGET_STEP_MIB)
        if survives(mid):
            hi = mid
        else:
            lo = mid
    return hi


def gpu_layer_count(model: ModelInfo, placement: Placement) -> int:
    """``-ngl`` of a placement: GPU blocks (loaded or not) plus the output layer."""
    if not placement.gpu_layers:
        return 1 if placement.output_on_gpu else 0
    first = min(placement.gpu_layers)
    return model.block_count - first + (1 if placement.output_on_gpu else 0)


def _span_words(layers: list[int]) -> str:
    if not layers:
        return ""
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def layer_words(model: ModelInfo, placement: Placement) -> str:
    """Which layers are on the GPU and which on the CPU, in words."""
    trunk_gpu = sorted(i for i in placement.gpu_layers if i < model.n_layer)
    trunk_cpu = [i for i in range(model.n_layer) if i not in placement.gpu_layers]
    mtp = [i for i in placement.loaded_layers if i >= model.n_layer]
    gpu = [_span_words(trunk_gpu)] if trunk_gpu else []
    if mtp and all(i in placement.gpu_layers for i in mtp):
        gpu.append("the MTP block")
    if placement.output_on_gpu:
        gpu.append("the output layer")
    on_gpu = ", ".join(gpu[:-1]) + (" and " if len(gpu) > 1 else "") + (gpu[-1] if gpu else "")
    text = f"{on_gpu} on the GPU" if on_gpu else "nothing on the GPU"
    if trunk_cpu:
        text += f"; {_span_words(trunk_cpu)} ({len(trunk_cpu)} of {model.n_layer}) run on the CPU"
    return text


def fit_words(
    fit: FitPlacement, model: ModelInfo, placement: Placement, facts: EngineMemoryFacts
) -> list[str]:
    """What the engine's fit is expected to do, as warning lines."""
    if fit.fails:
        return [
            f"{facts.flavour.value}'s fit moves only expert tensors of a MoE model, and even with "
            "every expert in system RAM the model does not fit: it stops with 'Unable to "
            "auto-fit model' (lower the context or cache types, or set GPU layers yourself)"
        ]
    out = []
    layout = fit.search.layout if fit.search is not None else None
    trunk = sorted(
        i for i in fit.cpu_expert_layers if i < model.n_layer and i in placement.gpu_layers
    )
    mtp_in_ram = any(i >= model.n_layer for i in fit.cpu_expert_layers)
    split = (
        f"; layer {fit.partial.layer} is split: {_PARTIAL_WORDS[fit.partial.kind]}"
        if fit.partial is not None
        else ""
    )
    gpu_trunk = [i for i in placement.gpu_layers if i < model.n_layer]
    every = bool(trunk) and len(trunk) == len(gpu_trunk)
    if trunk and (fit.n_gpu_layers is None or not every):
        out.append(
            f"the engine's fit is expected to keep the experts of layers {trunk[0]}-{trunk[-1]}"
            f" ({len(trunk)} of {model.n_layer})"
            + (" and the MTP block's" if mtp_in_ram else "")
            + " in system RAM"
            + split
        )
    if fit.n_gpu_layers is not None:
        experts = " with every expert in system RAM" if model.is_moe and every else ""
        out.append(
            f"the engine's fit is expected to set -ngl {fit.n_gpu_layers} of "
            f"{model.block_count + 1}{experts}: {layer_words(model, placement)}"
        )
    if out and layout is not None:
        out[0] += f" (upstream's layout (n_layer, n_part, overflow) = {layout.label()})"
    return out
