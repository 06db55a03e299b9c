"""A separate draft model's memory: its weights, KV cache and compute buffer, on the right device.

Both engines load the draft GGUF as a second model with its own context: ``n_ctx`` as the main
context, its own K/V cache types (the plan's draft cache types), one sequence, and its own
compute and output buffers. ``-ngld`` decides where it lives: all layers on the GPU of a GPU
plan by default, on the CPU for a CPU plan (or ``-ngld 0``).
"""

from __future__ import annotations

import dataclasses

from mtpstudio.core.engines.draft import draft_gpu_layers
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget import quantized
from mtpstudio.core.memory.budget_types import Budget, DeviceBudget, HostBudget
from mtpstudio.core.memory.placement import ModelWeights, place, split_weights
from mtpstudio.core.memory.terms import (
    ComputeShape,
    compute_bytes,
    compute_bytes_ik,
    kv_bytes_per_cell,
    output_buffer_bytes,
)
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan

DRAFT_SEGMENTS = ("draft_weights", "draft_kv_cache", "draft_compute")


@dataclasses.dataclass(frozen=True)
class DraftMemory:
    """Bytes of the draft model per side (GPU part empty on a CPU plan)."""

    gpu: dict[str, int]
    cpu: dict[str, int]
    output: int

    @property
    def total(self) -> int:
        return sum(self.gpu.values()) + sum(self.cpu.values()) + self.output


def draft_memory(
    plan: Plan, draft: ModelInfo, n_ctx: int, facts: EngineMemoryFacts, gpu: bool
) -> DraftMemory:
    """The draft model's weights, KV cache and compute buffer for a context of ``n_ctx`` cells."""
    ngld = draft_gpu_layers(plan, cpu_only=False) if gpu else 0
    placement = place(draft, gpu=gpu, n_gpu_layers=ngld, cpu_expert_layers=(), load_mtp=False)
    split = split_weights(ModelWeights.from_model(draft), placement)
    dk, dv = plan.mtp.cache_type_k.value, plan.mtp.cache_type_v.value
    layers = draft.attention_layers
    gpu_attn = sum(1 for i in layers if i in placement.gpu_layers)
    per_cell_gpu = kv_bytes_per_cell(draft, gpu_attn, dk, dv)
    per_cell_cpu = kv_bytes_per_cell(draft, len(layers) - gpu_attn, dk, dv)
    shape = ComputeShape(
        n_tokens=min(n_ctx, plan.runtime.ubatch),
        n_kv=n_ctx,
        n_stream=1,
        n_outputs=max(1, plan.runtime.parallel),
        flash_attn=plan.runtime.flash_attn.value != "off",
        quantized_k=quantized(dk),
        quantized_v=quantized(dv),
    )
    if facts.reserves_all_logits:
        compute = compute_bytes_ik(draft, shape)
    else:
        compute = compute_bytes(draft, shape, recurrent=bool(draft.recurrent_layers))
    on_gpu = bool(placement.gpu_layers)
    gpu_part = {
        "draft_weights": split.gpu_bytes,
        "draft_kv_cache": per_cell_gpu * n_ctx,
        "draft_compute": compute if on_gpu else 0,
    }
    cpu_part = {
        "draft_weights": split.cpu_bytes,
        "draft_kv_cache": per_cell_cpu * n_ctx,
        "draft_compute": 0 if on_gpu else compute,
    }
    return DraftMemory(gpu_part, cpu_part, output_buffer_bytes(draft, 1))


def with_draft(budget: Budget, plan: Plan, draft: ModelInfo, facts: EngineMemoryFacts) -> Budget:
    """``budget`` plus the draft model's segments on its device (and its output in host RAM)."""
    devices = budget.devices
    gpu = any(d.id != "CPU" for d in devices)
    mem = draft_memory(plan, draft, budget.effective.n_ctx, facts, gpu)
    new_devices = []
    for d in devices:
        part = mem.gpu if d.id != "CPU" else {k: mem.cpu[k] for k in DRAFT_SEGMENTS}
        if d.id == "CPU":
            part = {**part, "output": d.segments.get("output", 0) + mem.output}
        new_devices.append(DeviceBudget(d.id, d.name, d.total_bytes, {**d.segments, **part}))
    host = budget.host.segments
    host_segments = dict(host)
    if gpu:
        host_segments.update(mem.cpu)
        host_segments["output"] = host.get("output", 0) + mem.output
    else:
        host_segments.update({k: mem.cpu[k] for k in DRAFT_SEGMENTS})
        host_segments["output"] = host.get("output", 0) + mem.output
    new_host = HostBudget(budget.host.total_bytes, budget.host.available_bytes, host_segments)
    parts = dict(budget.parts)
    for key in DRAFT_SEGMENTS:
        parts[key] = mem.gpu[key] + mem.cpu[key]
    parts["draft_output"] = mem.output
    return dataclasses.replace(budget, devices=tuple(new_devices), host=new_host, parts=parts)
