"""The memory model for a model split over several devices: one bar per device.

Two GPUs, a GPU and an RPC server, or two or three RPC servers: the engine deals the layers to
the devices (``split_placement``), puts each layer's K/V cache and recurrent state on its
device, the output layer on the last one, and schedules each context's graph over all of them
and the CPU; each device gets a compute buffer of its own, sized by the scheduler's walk of its
part of the graph (``cuda_schedule`` with several devices). Where the weights go comes from the
user's ``-ngl``/``-ts``, or from upstream's ``--fit`` over several devices, replayed with its own
arithmetic (``engine_fit.upstream_fit_devices``): per device the weights, the K/V cache, the
recurrent state and the compute buffer it would put there, plus the MTP draft context as
measured with its own parameters (every layer on the devices, dealt by free memory).

An RPC device is the remote server's backend seen through the network: a CPU behind RPC sizes
tensors as the CPU does (32-byte alignment, no padding) and takes no ops on weights in RAM; what
the remote process needs beyond its buffers is the remote machine's own and is not counted here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget import (
    PROMPT_CACHE_DEFAULT,
    _effective,
    _fit_layers_from_back,
    _moe_ffn_tensors,
    cpu_expert_layers_for,
    draft_cache_types,
    draft_shape,
    trunk_shape,
)
from mtpstudio.core.memory.budget_types import Budget, DeviceBudget, HostBudget
from mtpstudio.core.memory.cuda_rules import ByResidency, cache_view_bytes, cuda_rules_for, parse_cc
from mtpstudio.core.memory.cuda_schedule import Residency, schedule
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.engine_fit import (
    DEFAULT_LAYOUT,
    DevicesFitSearch,
    DevicesQuery,
    devices_overrides,
    upstream_fit_devices,
)
from mtpstudio.core.memory.graph_alloc import CPU_ALIGNMENT, BackendRules, Prepared, Tensor
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.memory.runtime_growth import NO_GROWTH, ContextRun, runtime_growth
from mtpstudio.core.memory.split_placement import (
    EXPERTS,
    SplitPlacement,
    TensorMove,
    device_weights,
    expert_moves,
    split_placement,
    split_residency,
)
from mtpstudio.core.memory.terms import (
    ComputeShape,
    compute_bytes,
    compute_bytes_ik,
    kv_bytes_per_cell,
    kv_cache_bytes,
    output_buffer_bytes,
    recurrent_row_bytes,
    recurrent_step_bytes,
    swa_cells,
)
from mtpstudio.core.memory.trunk_graph import sliding_window_layers
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import LoadMode, MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.units import MIB

PIPELINE_COPIES = 4
"""``GGML_SCHED_MAX_COPIES``: the scheduler's input copies under pipeline parallelism."""


@dataclass(frozen=True)
class ScheduledRules(ByResidency, BackendRules):
    """A backend of a graph scheduled over several devices whose buffer sizes tensors as the
    CPU does: an RPC server's CPU device (``side`` its index) or the host (``side`` the CPU's
    index, the ``CPU`` or ``CUDA_Host`` compute buffer). No ``graph_optimize`` runs on it."""

    name: str = "RPC"
    alignment: int = CPU_ALIGNMENT
    residency: Residency = field(default_factory=Residency)
    side: int = 0

    def prepare(self, leafs: list[Tensor], nodes: list[Tensor]) -> Prepared:
        return schedule(
            leafs, nodes, self.residency, lambda part: part, cache_view_bytes, self.side
        )


@dataclass(frozen=True)
class SplitLayout:
    """How the weights are dealt: ``-ngl`` (None: every slot), the shares per device (``-ts``,
    or None for the devices' free memory) and the tensor overrides."""

    n_gpu_layers: int | None
    shares: tuple[float, ...] | None
    moves: tuple[TensorMove, ...] = ()


@dataclass(frozen=True)
class SplitOutcome:
    """What the split budget decided: the placement, the layout it came from, whether the
    scheduler runs pipeline-parallel (4 copies of its inputs), and upstream's fit when it was
    replayed."""

    placement: SplitPlacement
    layout: SplitLayout
    pipeline_parallel: bool
    search: DevicesFitSearch | None = None
    hp_ngl: int = 0

    def to_json(self, devices: Sequence[TargetDevice]) -> dict[str, Any]:
        sp = self.placement
        out: dict[str, Any] = {
            "n_gpu_layers": self.layout.n_gpu_layers,
            "tensor_split": None if self.layout.shares is None else list(self.layout.shares),
            "pipeline_parallel": self.pipeline_parallel,
            "devices": [
                {
                    "id": d.id,
                    "blocks": sp.device_blocks(i),
                    "output_layer": sp.output_device == i,
                }
                for i, d in enumerate(devices)
            ],
            "overrides": [
                {
                    "block": m.layer,
                    "kind": m.kind,
                    "to": None if m.dest is None else devices[m.dest].id,
                }
                for m in sp.moves
            ],
            "engine_fit": None,
        }
        if self.search is not None:
            s = self.search
            out["engine_fit"] = {
                "layouts": None
                if s.layouts is None
                else [
                    {"n_layer": x.n_layer, "n_part": x.n_part, "overflow": x.overflow}
                    for x in s.layouts
                ],
                "overflow_next": list(s.overflow_next),
                "target_bytes": list(s.targets),
                "projected_bytes": list(s.projected),
            }
        return out


def device_free_bytes(device: TargetDevice) -> int:
    """What ``ggml_backend_dev_memory`` reports free for the device when the engine loads: its
    size less the desktop, other processes and the driver's context (an RPC server reports its
    own free memory: ``other_bytes`` is what it holds already)."""
    total = device.total_bytes or 0
    return total - device.desktop_bytes - device.other_bytes - device.driver_overhead_bytes


def offload_device(devices: Sequence[TargetDevice]) -> int | None:
    """The first device whose backend takes ops on weights in RAM (a local CUDA card)."""
    return next((i for i, d in enumerate(devices) if d.is_cuda), None)


def split_fit_applies(
    plan: Plan, devices: Sequence[TargetDevice], facts: EngineMemoryFacts
) -> bool:
    """Upstream's fit places the weights: fit asked for, no ``-ngl``, no ``-ts``, layer split,
    every device of known size (the engine aborts its fit otherwise and loads as given)."""
    rt = plan.runtime
    return (
        facts.fit_splits_layers
        and rt.moe is MoePlacement.FIT
        and rt.n_gpu_layers is None
        and not plan.split.tensor_split
        and plan.split.mode.value == "layer"
        and all(d.total_bytes for d in devices)
    )


def plan_margins(plan: Plan, n_devices: int) -> tuple[int, ...]:
    """Each device's ``--fit-target`` in bytes: the plan's per-device values, else its one
    margin for every device (the engine broadcasts a single value)."""
    given = plan.split.fit_margins_mib
    if given:
        return tuple((given[i] if i < len(given) else given[-1]) * MIB for i in range(n_devices))
    return (plan.runtime.fit_margin_mib * MIB,) * n_devices


def compute_split_budget(
    plan: Plan,
    model: ModelInfo,
    devices: Sequence[TargetDevice],
    facts: EngineMemoryFacts,
    host: HostSpec | None = None,
    weights: ModelWeights | None = None,
    *,
    layout: SplitLayout | None = None,
    host_buffers: bool = True,
    mtp_active: bool | None = None,
) -> Budget:
    """Predict what the engine allocates on each of ``devices`` (the engine's order: RPC
    servers first, then local GPUs) and in system RAM for ``plan``.

    ``layout`` fixes the placement (the fit's projections use it); otherwise the plan's
    ``-ngl``/``-ts``/expert placement decide, or upstream's fit over the devices is replayed.
    ``mtp_active``: MTP as the planner decided it (None: a plan it did not resolve).
    """
    devices = tuple(devices)
    weights = weights or ModelWeights.from_model(model)
    host = host or HostSpec()
    search: DevicesFitSearch | None = None
    warnings: list[str] = []
    hp_ngl = _fit_layers_from_back(plan, model, facts, mtp_active)
    if layout is None:
        if split_fit_applies(plan, devices, facts):
            search, layout = replay_split_fit(
                plan, model, devices, facts, host, weights, mtp_active
            )
        else:
            layout = plan_layout(plan, model, devices)
            if plan.runtime.moe is MoePlacement.FIT and not facts.fit_splits_layers:
                warnings.append(
                    f"{facts.flavour.value}'s fit over several devices is not replayed: the "
                    "plan shows every layer dealt by the devices' free memory (set GPU layers "
                    "and the split yourself to plan what you will run)"
                )
    eff, more = _effective(plan, model, facts, frozenset(), mtp_active)
    warnings += more
    if plan.split.mode.value == "row":
        warnings.append(
            "a row split's buffers are planned as the layer split: how ggml-cuda's split buffer "
            "deals each matrix's rows to the cards is not modelled, so the bars per card are an "
            "estimate"
        )
    sp = split_placement(
        model,
        n_devices=len(devices),
        n_gpu_layers=layout.n_gpu_layers,
        # an all-zero split is no split: the engine deals by free memory (``all_zero``)
        shares=layout.shares if layout.shares and any(layout.shares) else free_shares(devices),
        moves=layout.moves,
        load_mtp=eff.mtp_active,
    )
    pipeline = pipeline_parallel(model, devices, layout, plan)
    outcome = SplitOutcome(sp, layout, pipeline, search, hp_ngl)
    return _split_budget(
        plan, model, devices, facts, host, weights, outcome, eff, warnings, host_buffers
    )


def free_shares(devices: Sequence[TargetDevice]) -> tuple[float, ...]:
    """The engine's default split: each device's free memory (bytes, as floats)."""
    return tuple(float(max(0, device_free_bytes(d))) for d in devices)


def plan_layout(plan: Plan, model: ModelInfo, devices: Sequence[TargetDevice]) -> SplitLayout:
    """The plan's own placement: its ``-ngl`` (all by default), its ``-ts`` (else free memory),
    its experts in RAM (``--n-cpu-moe``/``--cpu-moe``)."""
    rt = plan.runtime
    shares = tuple(float(x) for x in plan.split.tensor_split) if plan.split.tensor_split else None
    moves = expert_moves(cpu_expert_layers_for(plan, model))
    return SplitLayout(rt.n_gpu_layers, shares, moves)


def pipeline_parallel(
    model: ModelInfo, devices: Sequence[TargetDevice], layout: SplitLayout, plan: Plan
) -> bool:
    """``llama_context``'s condition: several devices, every slot offloaded (``-ngl`` above the
    block count), layer split, K/V offloaded, no tensor overrides; every device (CUDA, RPC)
    has async compute and events."""
    ngl = model.block_count + 1 if layout.n_gpu_layers is None else layout.n_gpu_layers
    return (
        len(devices) > 1
        and ngl > model.block_count
        and plan.split.mode.value == "layer"
        and not layout.moves
    )


def allocates_as_cuda(device: TargetDevice) -> bool:
    """The device's buffers size tensors as CUDA does: a local card, or a card behind RPC."""
    return device.is_cuda or (device.rpc_endpoint is not None and device.vendor == "nvidia")


def _device_rules(
    device: TargetDevice, index: int, model: ModelInfo, ffn: Any, residency: Residency
) -> BackendRules:
    if device.is_cuda:
        cc = parse_cc(device.compute_capability)
        return replace(cuda_rules_for(cc, model, ffn, residency=residency), side=index)
    if allocates_as_cuda(device):  # a card behind RPC: CUDA's sizes, no graph_optimize
        cuda = cuda_rules_for(None, model, ffn, residency=residency, fusion=False)
        return replace(cuda, name="RPC", side=index)
    return ScheduledRules("RPC", CPU_ALIGNMENT, residency, index)


def _host_rules(devices: Sequence[TargetDevice], residency: Residency) -> BackendRules:
    # the host buffer of the first device (pinned CUDA_Host), else the CPU's own
    name = "CUDA_Host" if devices[0].is_cuda else "CPU"
    return ScheduledRules(name, CPU_ALIGNMENT, residency, residency.host)


@dataclass(frozen=True)
class _Compute:
    per_device: tuple[int, ...]
    host: int


def _scheduled_compute(
    model: ModelInfo,
    shape: ComputeShape,
    devices: Sequence[TargetDevice],
    residency: Residency,
    ffn: Any,
    *,
    recurrent: bool,
    host_buffers: bool,
) -> _Compute:
    per = tuple(
        compute_bytes(
            model, shape, recurrent=recurrent, rules=_device_rules(d, i, model, ffn, residency)
        )
        for i, d in enumerate(devices)
    )
    on_host = (
        compute_bytes(model, shape, recurrent=recurrent, rules=_host_rules(devices, residency))
        if host_buffers
        else 0
    )
    return _Compute(per, on_host)


def _split_budget(
    plan: Plan,
    model: ModelInfo,
    devices: tuple[TargetDevice, ...],
    facts: EngineMemoryFacts,
    host: HostSpec,
    weights: ModelWeights,
    outcome: SplitOutcome,
    eff: Any,
    warnings: list[str],
    host_buffers: bool,
) -> Budget:
    sp = outcome.placement
    nd = len(devices)
    rt = plan.runtime
    cuda = [allocates_as_cuda(d) for d in devices]
    dw = device_weights(weights, sp, cuda)
    copies = PIPELINE_COPIES if outcome.pipeline_parallel else 1
    offload = offload_device(devices)
    ngl = outcome.layout.n_gpu_layers
    full = (model.block_count + 1 if ngl is None else ngl) > model.block_count
    tk, tv = rt.cache_type_k.value, rt.cache_type_v.value
    cells = eff.n_ctx_seq * eff.n_stream
    swa = cells
    if facts.sliding_window_cache and sliding_window_layers(model):
        swa = swa_cells(model, eff.n_ctx_seq, min(eff.n_ctx, rt.ubatch)) * eff.n_stream
    attn = set(model.attention_layers)
    rec = set(model.recurrent_layers)
    rows = max(1, eff.n_seq) * (1 + eff.n_rs_seq)
    if facts.recurrent_in_kv_buffer:
        rows = min(max(1, eff.n_seq), eff.n_ctx)
    rs_row = recurrent_row_bytes(model)

    def on(device: int | None) -> list[int]:
        return [i for i in sorted(sp.loaded) if sp.block_device[i] == device and i < model.n_layer]

    kv = [
        kv_cache_bytes(model, [i for i in on(d) if i in attn], tk, tv, cells, swa)
        for d in range(nd)
    ]
    kv_cpu = kv_cache_bytes(model, [i for i in on(None) if i in attn], tk, tv, cells, swa)
    rs = [rs_row * rows * sum(1 for i in on(d) if i in rec) for d in range(nd)]
    rs_cpu = rs_row * rows * sum(1 for i in on(None) if i in rec)

    trunk = range(model.n_layer)
    main_res = split_residency(
        weights,
        sp,
        op_offload=rt.op_offload,
        offload_to=offload,
        n_copies=copies,
        layers=trunk,
        full_offload=full,
    )
    main_shape = trunk_shape(plan, eff)
    if facts.reserves_all_logits:  # ik: its own scheduler, an estimate on every device
        whole = compute_bytes_ik(model, main_shape)
        main = _Compute((whole,) * nd, whole if host_buffers else 0)
        warnings.append(
            f"{facts.flavour.value}'s compute buffers over several devices are not replayed: "
            "each device is planned with the whole graph's estimate"
        )
    else:
        main = _scheduled_compute(
            model,
            main_shape,
            devices,
            main_res,
            _moe_ffn_tensors(weights),
            recurrent=True,
            host_buffers=host_buffers,
        )

    mtp_kv = [0] * nd
    mtp_kv_cpu = 0
    mtp_comp = _Compute((0,) * nd, 0)
    mtp_output = 0
    nextn_device: int | None = None
    if eff.mtp_active:
        dk, dv = draft_cache_types(plan, facts)
        nextn_device = sp.block_device[model.n_layer] if model.n_layer < model.block_count else None
        nextn_kv = kv_bytes_per_cell(model, model.n_nextn_layer, dk, dv) * cells
        if nextn_device is None:
            mtp_kv_cpu = nextn_kv
        else:
            mtp_kv[nextn_device] = nextn_kv
        mtp_shape = draft_shape(plan, eff, facts)
        nextn = weights.layers[model.n_layer] if model.n_layer < len(weights.layers) else None
        ffn = nextn.ffn_tensors if nextn is not None else ()
        mtp_res = split_residency(
            weights,
            sp,
            op_offload=rt.op_offload,
            offload_to=offload,
            n_copies=copies,
            layers=[model.n_layer],
            full_offload=full,
        )
        if facts.reserves_all_logits:
            whole = compute_bytes(model, mtp_shape, recurrent=False)
            mtp_comp = _Compute((whole,) * nd, 0)
        else:
            mtp_comp = _scheduled_compute(
                model, mtp_shape, devices, mtp_res, ffn, recurrent=False, host_buffers=host_buffers
            )
        mtp_output = output_buffer_bytes(model, eff.n_seq)
        if facts.mtp_layers_in_main_kv:
            extra = kv_bytes_per_cell(model, model.n_nextn_layer, tk, tv) * cells
            if nextn_device is None:
                kv_cpu += extra
            else:
                kv[nextn_device] += extra
        if facts.recurrent_step_checkpoints:
            step = recurrent_step_bytes(model, plan.mtp.draft_max + 1)
            for j in range(nd):
                rs[j] += step * sum(1 for i in on(j) if i in rec)
            rs_cpu += step * sum(1 for i in on(None) if i in rec)

    output = output_buffer_bytes(model, eff.n_seq)
    load_mode = rt.load_mode
    cpu_weights = dw.host.cpu_mapped_bytes if load_mode is LoadMode.MMAP else dw.host.cpu_bytes
    margins = plan_margins(plan, nd)
    budgets = []
    growth_total = NO_GROWTH
    for i, d in enumerate(devices):
        growth = NO_GROWTH
        if d.is_cuda:
            contexts = [
                ContextRun(
                    False,
                    model.is_moe,
                    main_shape.n_tokens,
                    eff.flash_attn,
                    eff.n_ctx_seq,
                    model.n_head,
                )
            ]
            if eff.mtp_active and nextn_device == i:
                contexts.append(
                    ContextRun(
                        True,
                        model.is_moe,
                        main_shape.n_tokens,
                        eff.flash_attn,
                        eff.n_ctx_seq,
                        model.n_head,
                    )
                )
            growth = runtime_growth(d, tuple(contexts), graphs=True, ik=not facts.cuda_measured)
            if i == 0 or growth_total is NO_GROWTH:
                growth_total = growth
        margin = margins[i]
        if outcome.search is not None:
            margin = max(0, margin - growth.load_bytes - growth.bytes)
        segments = {
            "weights": dw.per_device[i],
            "kv_cache": kv[i],
            "recurrent_state": rs[i],
            "mtp_kv_cache": mtp_kv[i],
            "mtp_compute": mtp_comp.per_device[i],
            "compute": main.per_device[i],
            "output": 0,
            "desktop": d.desktop_bytes,
            "other_processes": d.other_bytes,
            "driver_overhead": d.driver_overhead_bytes + growth.load_bytes,
            "runtime_growth": growth.bytes,
            "margin": margin,
        }
        budgets.append(DeviceBudget(d.id, d.name, d.total_bytes, segments, d.rpc_endpoint))
    host_segments = {
        "weights_mapped": cpu_weights if load_mode is LoadMode.MMAP else 0,
        "weights_resident": cpu_weights if load_mode is LoadMode.NO_MMAP else 0,
        "weights_locked": cpu_weights if load_mode is LoadMode.MLOCK else 0,
        "kv_cache": kv_cpu,
        "recurrent_state": rs_cpu,
        "mtp_kv_cache": mtp_kv_cpu,
        "compute": main.host + mtp_comp.host,
        "output": output + mtp_output,
        "prompt_cache_max": PROMPT_CACHE_DEFAULT,
    }
    host_budget = HostBudget(host.total_bytes, host.available_bytes, host_segments)
    for b in budgets:
        if b.fits is False and b.free_bytes is not None:
            warnings.append(
                f"{b.id} is {-b.free_bytes / MIB:,.0f} MiB short: move layers to another "
                "device (the split), lower ctx or use a smaller cache type"
            )
    if host_budget.fits is False:
        warnings.append("not enough free system RAM for the CPU-side weights and buffers")
    if any(d.rpc_endpoint for d in devices):
        warnings.append(
            "RPC devices: every token's activations cross the network at each device boundary "
            "(a few MiB per prompt batch, a few KiB per generated token); the weights are sent "
            "once at load, so a slow link makes the load slow, and the remote rpc-server's own "
            "memory beyond its buffers is not counted here"
        )
    parts = {
        "weights_total": sum(dw.per_device) + cpu_weights,
        "weights_gpu": sum(dw.per_device),
        "weights_cpu": cpu_weights,
        "weights_cpu_tensors": dw.host.cpu_bytes,
        "weights_cpu_experts": dw.host.cpu_expert_bytes,
        "kv_cache": sum(kv) + kv_cpu,
        "recurrent_state": sum(rs) + rs_cpu,
        "mtp_kv_cache": sum(mtp_kv) + mtp_kv_cpu,
        "output": output,
        "mtp_output": mtp_output,
        "compute": sum(main.per_device),
        "mtp_compute": sum(mtp_comp.per_device),
        "op_offload_compute": 0,
        "compute_host": main.host,
        "mtp_compute_host": mtp_comp.host,
    }
    replayed = frozenset(
        (d.id, seg)
        for d in devices
        if not d.is_cuda and not facts.reserves_all_logits
        for seg in ("compute", "mtp_compute")
    )
    sourced = frozenset(
        (d.id, seg) for d in devices if d.is_cuda for seg in ("weights", "compute", "mtp_compute")
    )
    return Budget(
        tuple(budgets),
        host_budget,
        replace(
            eff,
            cpu_expert_layers=sp.placement().cpu_expert_layers,
            n_gpu_layers=outcome.layout.n_gpu_layers,
        ),
        sp.placement(),
        tuple(warnings),
        parts,
        replayed=replayed,
        sourced=sourced,
        growth=growth_total,
        split=outcome,
    )


def replay_split_fit(
    plan: Plan,
    model: ModelInfo,
    devices: tuple[TargetDevice, ...],
    facts: EngineMemoryFacts,
    host: HostSpec,
    weights: ModelWeights,
    mtp_active: bool | None = None,
) -> tuple[DevicesFitSearch, SplitLayout]:
    """Upstream's fit over ``devices`` with its own arithmetic: each query is the budget of
    that layout without the host's buffers; the projection per device is its weights, K/V
    cache, recurrent state and compute buffer, plus the MTP draft context measured with its
    own parameters (the engine's default placement) on that device."""
    hp_ngl = _fit_layers_from_back(plan, model, facts, mtp_active)
    nd = len(devices)

    def layout_of(query: DevicesQuery) -> SplitLayout:
        if query.layouts == DEFAULT_LAYOUT:
            moves = expert_moves(range(model.block_count)) if query.experts_in_ram else ()
            return SplitLayout(None, None, moves)
        o = devices_overrides(query.layouts, query.overflow_next, hp_ngl)
        moves = tuple(TensorMove(layer, kind, dest) for layer, kind, dest in o.moves)
        return SplitLayout(o.n_gpu_layers, tuple(float(x) for x in o.tensor_split), moves)

    def budget_of(layout: SplitLayout) -> Budget:
        return compute_split_budget(
            plan,
            model,
            devices,
            facts,
            host,
            weights,
            layout=layout,
            host_buffers=False,
            mtp_active=mtp_active,
        )

    whole = budget_of(SplitLayout(None, None))
    draft = [b.segments["mtp_kv_cache"] + b.segments["mtp_compute"] for b in whole.devices]

    def project(query: DevicesQuery) -> tuple[int, ...]:
        b = budget_of(layout_of(query))
        return tuple(
            d.segments["weights"]
            + d.segments["kv_cache"]
            + d.segments["recurrent_state"]
            + d.segments["compute"]
            + draft[i]
            for i, d in enumerate(b.devices)
        )

    free = []
    for i, d in enumerate(devices):
        f = device_free_bytes(d)
        if d.is_cuda:  # allocated for real while the fit measures
            f -= whole.devices[i].segments["recurrent_state"]
        free.append(f)
    search = upstream_fit_devices(
        project, hp_ngl=hp_ngl, moe=model.is_moe, free=free, margins=plan_margins(plan, nd)
    )
    if search.layouts is None:
        return search, SplitLayout(None, None)
    return search, layout_of(DevicesQuery(search.layouts, search.overflow_next))


__all__ = [
    "EXPERTS",
    "ScheduledRules",
    "SplitLayout",
    "SplitOutcome",
    "compute_split_budget",
    "device_free_bytes",
    "replay_split_fit",
]
