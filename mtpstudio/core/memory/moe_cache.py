"""What ``--moe-cache-mib N`` allocates, and which experts it holds (upstream b11549).

Read from ``src/llama-moe-cache.cpp`` of the tree in the PyPI sdist ``xllamacpp`` 2026.10.11549
(line numbers of that file):

* a layer is cached when every one of its expert tensors (``ffn_gate_up_exps``,
  ``ffn_gate_exps``, ``ffn_up_exps``, ``ffn_down_exps``, whichever it has) is a host weight and
  the layer itself is assigned to a GPU (241-264): its attention offloaded with ``-ngl`` and its
  experts kept in RAM (``--n-cpu-moe``, ``--cpu-moe`` or the fit); a layer on the CPU, a layer
  whose experts are on the card and the fit's split layer are not. Experts the CPU backend
  repacks (``CPU_REPACK`` buffers; on x86 with AVX2: Q4_0, Q4_K, IQ4_NL and MXFP4 tensors of a
  multiple of 8 rows, ``ggml-cpu/repack.cpp``) are not host weights, so ``--no-repack`` keeps
  them cacheable;
* cached layers are grouped by identical expert tensors (count, type, shape); one slot holds one
  expert of one layer in every expert tensor (``nb[2]`` each), and the group's slots are shared
  by its layers through one LRU (113);
* the budget ``N`` MiB is split over the groups by their host bytes (316); a group gets the most
  slots ``n`` whose banks ``sum(PAD(nb[2] * (n + 1), alignment))`` fit its share (one spare slot:
  CUDA's MMQ reads past the last expert, 270), at most ``layers * n_expert``; fewer slots than
  the experts one token uses (``n_expert_used``) caches nothing in that group (321);
* the banks are one device buffer (each tensor's CUDA size, 128-aligned, 407-412); every cached
  layer has a slot map of ``n_expert`` int32 in a CPU buffer (379-382, 414-419). The fit's dry
  run counts both as context memory (``llama-context.cpp:3584-3588``), so the fit leaves room.

A single GPU is modelled (several GPUs split ``N`` by their free memory or ``-ts``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mtpstudio.core.memory.cuda_rules import aligned, is_quantized, padded_size
from mtpstudio.core.memory.placement import ModelWeights, Placement
from mtpstudio.core.model.info import ModelInfo, TensorInfo
from mtpstudio.core.units import MIB

__all__ = ["CacheGroup", "MoeCache", "bank_bytes", "expert_parts", "moe_cache", "repacked"]

EXPERT_PART = re.compile(r"^blk\.\d+\.ffn_(gate_up|gate|up|down)_exps\.weight$")
PART_ORDER = ("gate_up", "gate", "up", "down")
"""``llama_moe_cache_layer_experts``: the order the banks are made in."""
REPACKED_TYPES = frozenset({"q4_0", "q4_k", "iq4_nl", "mxfp4"})
"""Types the CPU backend repacks on x86-64 with AVX2 (``ggml_repack_get_optimal_repack_type``;
Q2_K needs AVX-512, the K-quants above 4 bits repack on ARM only)."""
REPACK_ROWS = 8
GPU_ALIGNMENT = 128
"""``ggml_backend_cuda_buffer_type_get_alignment``."""
CPU_ALIGNMENT = 32
"""``TENSOR_ALIGNMENT`` of the CPU buffer type (the slot maps)."""
SLOT_MAP_ENTRY = 4  # int32


@dataclass(frozen=True)
class CacheGroup:
    """Cached layers with identical expert tensors, sharing their slots."""

    layers: tuple[int, ...]
    n_expert: int
    slot_bytes: int
    """One expert of one layer in every expert tensor (the sum of their ``nb[2]``)."""
    n_slots: int
    device_bytes: int
    host_bytes: int
    """The group's experts in RAM."""

    @property
    def share(self) -> float:
        """The share of the group's experts its slots hold (the engine logs it)."""
        return self.n_slots / (len(self.layers) * self.n_expert) if self.layers else 0.0


@dataclass(frozen=True)
class MoeCache:
    """The cache ``--moe-cache-mib`` builds for one placement."""

    asked_bytes: int
    groups: tuple[CacheGroup, ...]
    skipped: str | None = None
    """Why nothing is cached (the engine warns and runs without it), or None."""

    @property
    def device_bytes(self) -> int:
        return sum(g.device_bytes for g in self.groups if g.n_slots)

    @property
    def map_bytes(self) -> int:
        """The slot maps in a CPU buffer (one per cached layer)."""
        return sum(
            aligned(g.n_expert * SLOT_MAP_ENTRY, CPU_ALIGNMENT) * len(g.layers)
            for g in self.groups
            if g.n_slots
        )

    @property
    def cached_layers(self) -> frozenset[int]:
        return frozenset(i for g in self.groups if g.n_slots for i in g.layers)

    def share_of(self, layer: int) -> float:
        """The share of ``layer``'s experts the cache holds (0: not cached)."""
        for g in self.groups:
            if layer in g.layers and g.n_slots:
                return g.share
        return 0.0

    def words(self) -> str:
        """One line: what the cache holds, as the engine's own load lines say it."""
        if self.skipped is not None:
            return self.skipped
        cached = [g for g in self.groups if g.n_slots]
        layers = sum(len(g.layers) for g in cached)
        host = sum(g.host_bytes for g in cached)
        slots = sum(g.n_slots for g in cached)
        share = slots / max(1, sum(len(g.layers) * g.n_expert for g in cached))
        return (
            f"MoE cache {self.device_bytes / MIB:,.0f} MiB on the GPU for {host / MIB:,.0f} MiB "
            f"of experts in RAM: {layers} layer{'s' * (layers != 1)}, {slots:,} slots "
            f"({share:.1%} of their experts)"
        )


def expert_parts(tensors: Iterable[TensorInfo]) -> tuple[TensorInfo, ...]:
    """A layer's expert tensors in the engine's order (none: the layer has no experts)."""
    found = {}
    for t in tensors:
        match = EXPERT_PART.match(t.name)
        if match:
            found[match.group(1)] = t
    return tuple(found[p] for p in PART_ORDER if p in found)


def repacked(t: TensorInfo) -> bool:
    """Whether the CPU backend repacks ``t`` (then it is no host weight the cache can read)."""
    rows = t.shape[1] if len(t.shape) > 1 else 1
    return t.type_name.lower() in REPACKED_TYPES and rows % REPACK_ROWS == 0


def _slot(t: TensorInfo) -> int:
    """``nb[2]``: one expert's bytes of ``t``."""
    return t.n_bytes // t.shape[2] if len(t.shape) > 2 and t.shape[2] else t.n_bytes


def bank_bytes(parts: tuple[TensorInfo, ...], n_slots: int, *, exact: bool) -> int:
    """The banks of ``n_slots`` slots (plus the spare): the budget rule (``exact=False``), or the
    buffer the device allocates (each bank's CUDA size, 128-aligned)."""
    total = 0
    for t in parts:
        n_bytes = _slot(t) * (n_slots + 1)
        if exact:
            ne0 = t.shape[0] if t.shape else 0
            rows = (t.shape[1] if len(t.shape) > 1 else 1) * (n_slots + 1)
            n_bytes = padded_size(n_bytes, ne0, rows, quantized=is_quantized(t.type_name))
        total += aligned(n_bytes, GPU_ALIGNMENT)
    return total


def moe_cache(
    model: ModelInfo,
    weights: ModelWeights,
    placement: Placement,
    size_bytes: int,
    *,
    repack: bool = True,
) -> MoeCache:
    """The cache ``--moe-cache-mib`` (``size_bytes``) builds for ``placement`` on one GPU;
    ``repack``: the CPU backend repacks the types it can (the engine's default)."""
    if not model.is_moe:
        return MoeCache(size_bytes, (), "the model has no experts: the engine refuses the cache")
    layouts: dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]] = {}
    parts_of: dict[tuple[tuple[str, tuple[int, ...]], ...], tuple[TensorInfo, ...]] = {}
    host_bytes: dict[tuple[tuple[str, tuple[int, ...]], ...], int] = {}
    repacked_layers = 0
    partial = placement.partial.layer if placement.partial is not None else None
    for lw in weights.layers:
        i = lw.layer
        in_ram = i in placement.cpu_expert_layers and i != partial
        if i not in placement.loaded_layers or i not in placement.gpu_layers or not in_ram:
            continue
        parts = expert_parts(lw.tensors)
        if not parts:
            continue
        if repack and any(repacked(t) for t in parts):
            repacked_layers += 1
            continue
        key = tuple((t.type_name, t.shape) for t in parts)
        layouts.setdefault(key, []).append(i)
        parts_of.setdefault(key, parts)
        host_bytes[key] = host_bytes.get(key, 0) + sum(t.n_bytes for t in parts)
    if not layouts:
        why = "no layer keeps all of its experts in RAM with its attention on the GPU"
        if repacked_layers:
            why = (
                f"the experts of {repacked_layers} layer{'s' * (repacked_layers != 1)} in RAM "
                "are repacked by the CPU backend (no host weights): add --no-repack"
            )
        return MoeCache(size_bytes, (), f"the MoE cache stays empty: {why}")
    all_host = sum(host_bytes.values())
    groups = []
    for key, layers in layouts.items():
        parts = parts_of[key]
        n_expert = parts[0].shape[2] if len(parts[0].shape) > 2 else 1
        budget = int(size_bytes * host_bytes[key] / all_host)
        most = len(layers) * n_expert
        n = _most_slots(parts, budget, most)
        if n < model.n_expert_used:
            n = 0
        groups.append(
            CacheGroup(
                tuple(layers),
                n_expert,
                sum(_slot(t) for t in parts),
                n,
                bank_bytes(parts, n, exact=True) if n else 0,
                host_bytes[key],
            )
        )
    if not any(g.n_slots for g in groups):
        return MoeCache(
            size_bytes,
            tuple(groups),
            "the MoE cache is too small to hold the experts of one token: the engine refuses it",
        )
    return MoeCache(size_bytes, tuple(groups))


def _most_slots(parts: tuple[TensorInfo, ...], budget: int, most: int) -> int:
    """The largest ``n <= most`` whose banks fit ``budget`` (the engine counts up one by one;
    the banks grow with ``n``, so a bisection gives the same answer)."""
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        if bank_bytes(parts, mid, exact=False) <= budget:
            low = mid
        else:
            high = mid - 1
    return low
