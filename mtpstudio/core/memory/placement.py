"""Where each weight tensor lands under the engine's rules (-ngl, --n-cpu-moe, --cpu-moe, fit)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from mtpstudio.core.memory.cuda_rules import aligned, is_quantized, padded_size
from mtpstudio.core.memory.cuda_schedule import Residency
from mtpstudio.core.model.info import ModelInfo, TensorInfo

EXPERT_TENSOR = re.compile(r"^blk\.\d+\.ffn_(up|down|gate|gate_up)_(ch|)exps\b")
FFN_TENSOR = re.compile(r"^blk\.\d+\.ffn_")


class PartialKind(StrEnum):
    """How upstream's fit splits the one partial layer (common/fit.cpp, layer fractions).

    The value is the pattern of that layer's tensors that go to system RAM: ``up`` keeps the
    up experts on the GPU, ``gate`` keeps up and gate, ``attn`` keeps only the attention (the
    router and shared expert go to RAM as well).
    """

    UP = r"ffn_(gate|gate_up|down)"
    GATE = r"ffn_down"
    ATTN = r"ffn_(gate|up|gate_up|down)"

    def moves(self, name: str) -> bool:
        """Whether tensor ``name`` of the partial layer goes to system RAM."""
        return re.match(r"^blk\.\d+\." + self.value, name) is not None


@dataclass(frozen=True)
class PartialLayer:
    """The one layer whose FFN the fit splits between GPU and system RAM."""

    layer: int
    kind: PartialKind


OUTPUT_TENSORS = frozenset({"output.weight", "output_norm.weight", "output_norm.bias"})
INPUT_TENSORS = frozenset({"token_embd.weight", "token_embd_norm.weight", "token_types.weight"})


# Where a group of tensors lies in the model file(s): (file index, first byte, end byte) per file,
# offsets relative to each file's tensor data.
Extent = tuple[tuple[int, int, int], ...]


def _extend(extents: dict[int, tuple[int, int]], t: TensorInfo) -> None:
    lo, hi = extents.get(t.file_index, (t.offset, t.offset + t.n_bytes))
    extents[t.file_index] = (min(lo, t.offset), max(hi, t.offset + t.n_bytes))


def _frozen(extents: dict[int, tuple[int, int]] | None) -> Extent:
    return tuple((i, lo, hi) for i, (lo, hi) in sorted((extents or {}).items()))


@dataclass(frozen=True)
class LayerWeights:
    """Weight bytes of one block, split into expert tensors and the rest, and where they lie."""

    layer: int
    dense_bytes: int
    expert_bytes: int
    dense_gpu_bytes: int
    expert_gpu_bytes: int
    dense_extent: Extent = ()
    expert_extent: Extent = ()
    ffn_tensors: tuple[TensorInfo, ...] = ()
    tensors: tuple[TensorInfo, ...] = ()


@dataclass(frozen=True)
class ModelWeights:
    """A model's weights grouped for fast placement (computed once per model).

    ``*_gpu_bytes`` are the sizes a CUDA buffer allocates for the same tensors (row padding and
    alignment), used when the tensors land on a GPU.
    """

    input_bytes: int
    output_bytes: int
    output_gpu_bytes: int
    other_bytes: int
    layers: tuple[LayerWeights, ...]
    n_layer: int
    input_extent: Extent = ()
    output_extent: Extent = ()
    output_tensors: tuple[TensorInfo, ...] = ()
    mapped_in_ranges: bool = False  # the engine maps each run of CPU tensors (upstream > b11434)

    @classmethod
    def from_model(cls, model: ModelInfo) -> ModelWeights:
        dense: dict[int, int] = {}
        expert: dict[int, int] = {}
        dense_gpu: dict[int, int] = {}
        expert_gpu: dict[int, int] = {}
        dense_ext: dict[int, dict[int, tuple[int, int]]] = {}
        expert_ext: dict[int, dict[int, tuple[int, int]]] = {}
        input_ext: dict[int, tuple[int, int]] = {}
        output_ext: dict[int, tuple[int, int]] = {}
        ffn: dict[int, list[TensorInfo]] = {}
        block: dict[int, list[TensorInfo]] = {}
        outputs: list[TensorInfo] = []
        input_bytes = output_bytes = output_gpu = other = 0
        for t in model.tensors:
            if t.layer is not None:
                block.setdefault(t.layer, []).append(t)
            if t.layer is not None and FFN_TENSOR.match(t.name):
                ffn.setdefault(t.layer, []).append(t)
            gpu = cuda_alloc_size(t)
            if t.name in INPUT_TENSORS:
                input_bytes += t.n_bytes
                _extend(input_ext, t)
            elif t.name in OUTPUT_TENSORS:
                outputs.append(t)
                output_bytes += t.n_bytes
                output_gpu += gpu
                _extend(output_ext, t)
            elif (layer := t.layer) is not None:
                if EXPERT_TENSOR.match(t.name):
                    expert[layer] = expert.get(layer, 0) + t.n_bytes
                    expert_gpu[layer] = expert_gpu.get(layer, 0) + gpu
                    _extend(expert_ext.setdefault(layer, {}), t)
                else:
                    dense[layer] = dense.get(layer, 0) + t.n_bytes
                    dense_gpu[layer] = dense_gpu.get(layer, 0) + gpu
                    _extend(dense_ext.setdefault(layer, {}), t)
            else:
                other += t.n_bytes
                _extend(input_ext, t)  # stays on the CPU like the input tensors
        layers = tuple(
            LayerWeights(
                i,
                dense.get(i, 0),
                expert.get(i, 0),
                dense_gpu.get(i, 0),
                expert_gpu.get(i, 0),
                _frozen(dense_ext.get(i)),
                _frozen(expert_ext.get(i)),
                tuple(ffn.get(i, ())),
                tuple(block.get(i, ())),
            )
            for i in range(model.block_count)
        )
        return cls(
            input_bytes,
            output_bytes,
            output_gpu,
            other,
            layers,
            model.n_layer,
            _frozen(input_ext),
            _frozen(output_ext),
            tuple(outputs),
        )


def cuda_alloc_size(t: TensorInfo) -> int:
    """Bytes a CUDA buffer takes for ``t``: a quantized tensor's last row padded to 512
    elements, then 128-aligned (``cuda_rules``)."""
    if not t.shape:
        return aligned(t.n_bytes)
    rows = t.n_elements // t.shape[0] if t.shape[0] else 0
    quantized = is_quantized(t.type_name.lower())
    return aligned(padded_size(t.n_bytes, t.shape[0], rows, quantized=quantized))


@dataclass(frozen=True)
class Placement:
    """Which layers and expert tensors sit on the GPU.

    Attributes:
        gpu_layers: block indices whose non-expert tensors are on the GPU.
        cpu_expert_layers: block indices whose expert tensors stay on the CPU.
        output_on_gpu: the output layer (output.weight, output_norm) is on the GPU.
        loaded_layers: block indices that are loaded at all (MTP blocks only with MTP on).
        partial: a GPU layer whose FFN is split by the fit's tensor patterns instead of the
            whole-layer expert rule (it is not in ``cpu_expert_layers``).
    """

    gpu_layers: frozenset[int]
    cpu_expert_layers: frozenset[int]
    output_on_gpu: bool
    loaded_layers: frozenset[int]
    partial: PartialLayer | None = None


def place(
    model: ModelInfo,
    *,
    gpu: bool,
    n_gpu_layers: int | None,
    cpu_expert_layers: Iterable[int],
    load_mtp: bool,
    partial: PartialLayer | None = None,
) -> Placement:
    """Apply the engine's placement rules.

    ``-ngl`` counts ``block_count + 1`` layers from the back; the output layer counts as one,
    so ``-ngl 1`` puts only the output layer on the GPU. ``None`` means all layers.
    """
    loaded = frozenset(i for i in range(model.block_count) if i < model.n_layer or load_mtp)
    if not gpu:
        return Placement(frozenset(), frozenset(loaded), False, loaded)
    total = model.block_count + 1
    ngl = total if n_gpu_layers is None else min(n_gpu_layers, total)
    first_gpu = model.block_count + 1 - ngl
    gpu_layers = frozenset(i for i in loaded if i >= first_gpu)
    experts_cpu = frozenset(i for i in cpu_expert_layers if i in loaded) | (loaded - gpu_layers)
    if partial is not None and partial.layer in gpu_layers:
        return Placement(gpu_layers, experts_cpu - {partial.layer}, ngl >= 1, loaded, partial)
    return Placement(gpu_layers, experts_cpu, ngl >= 1, loaded)


@dataclass(frozen=True)
class WeightSplit:
    """Weight bytes per side after placement.

    ``cpu_mapped_bytes`` is what a memory-mapped load maps for the CPU: the engine maps one
    range per file, from the first to the last CPU tensor in file order (llama-model.cpp,
    ``get_mapping_range``), so tensors that lie in between count too: the MTP block between
    the trunk and the output layer with MTP off, and the GPU layers' dense tensors between
    CPU expert tensors.
    """

    gpu_bytes: int
    cpu_bytes: int
    cpu_expert_bytes: int
    cpu_mapped_bytes: int = 0


def _span(extents: list[Extent]) -> int:
    """Bytes from the first to the last byte of ``extents``, per file, added up."""
    ranges: dict[int, tuple[int, int]] = {}
    for extent in extents:
        for i, lo, hi in extent:
            a, b = ranges.get(i, (lo, hi))
            ranges[i] = (min(a, lo), max(b, hi))
    return sum(hi - lo for lo, hi in ranges.values())


def _ranges(extents: list[Extent]) -> int:
    """Bytes of ``extents`` merged into runs, per file (what is mapped run by run)."""
    by_file: dict[int, list[tuple[int, int]]] = {}
    for extent in extents:
        for i, lo, hi in extent:
            by_file.setdefault(i, []).append((lo, hi))
    total = 0
    for spans in by_file.values():
        end = -1
        for lo, hi in sorted(spans):
            if lo > end:
                total += hi - lo
                end = hi
            elif hi > end:
                total += hi - end
                end = hi
    return total


def split_weights(weights: ModelWeights, placement: Placement) -> WeightSplit:
    """Sum the weight bytes on the GPU and on the CPU for a placement."""
    gpu = cpu = cpu_experts = 0
    cpu += weights.input_bytes + weights.other_bytes
    cpu_extents = [weights.input_extent]
    if placement.output_on_gpu:
        gpu += weights.output_gpu_bytes
    else:
        cpu += weights.output_bytes
        cpu_extents.append(weights.output_extent)
    partial = placement.partial
    for lw in weights.layers:
        if lw.layer not in placement.loaded_layers:
            continue
        if partial is not None and lw.layer == partial.layer:
            moved = [t for t in lw.ffn_tensors if partial.kind.moves(t.name)]
            moved_bytes = sum(t.n_bytes for t in moved)
            gpu += lw.dense_gpu_bytes + lw.expert_gpu_bytes
            gpu -= sum(cuda_alloc_size(t) for t in moved)
            cpu += moved_bytes
            cpu_experts += sum(t.n_bytes for t in moved if EXPERT_TENSOR.match(t.name))
            cpu_extents += [
                _frozen({t.file_index: (t.offset, t.offset + t.n_bytes)}) for t in moved
            ]
            continue
        if lw.layer in placement.gpu_layers:
            gpu += lw.dense_gpu_bytes
        else:
            cpu += lw.dense_bytes
            cpu_extents.append(lw.dense_extent)
        if lw.layer in placement.cpu_expert_layers:
            cpu += lw.expert_bytes
            cpu_experts += lw.expert_bytes
            cpu_extents.append(lw.expert_extent)
        else:
            gpu += lw.expert_gpu_bytes
    # a span below the sum means offsets are unknown (a table without data offsets)
    mapped = _ranges(cpu_extents) if weights.mapped_in_ranges else _span(cpu_extents)
    return WeightSplit(gpu, cpu, cpu_experts, max(mapped, cpu) if cpu else 0)


def _role(t: TensorInfo) -> str:
    """A tensor's name past ``blk.N.`` (the whole name outside the blocks)."""
    return t.name.split(".", 2)[2] if t.layer is not None else t.name


def residency_for(
    weights: ModelWeights,
    placement: Placement,
    *,
    op_offload: bool = True,
    layers: Iterable[int] | None = None,
) -> Residency:
    """What a graph of ``layers`` (default: every loaded block) reads from system RAM under
    ``placement``: the expert tensors of CPU-expert blocks, the moved tensors of the fit's
    partial block, every tensor and the caches of blocks on the CPU, and the output layer's
    when it stays on the CPU. Each weight is sized as a CUDA buffer would hold it (its copy's
    size)."""
    wanted = placement.loaded_layers if layers is None else frozenset(layers)
    ram: set[tuple[int, str, int]] = set()
    caches: set[int] = set()
    partial = placement.partial
    for lw in weights.layers:
        if lw.layer not in wanted or lw.layer not in placement.loaded_layers:
            continue
        if lw.layer not in placement.gpu_layers:
            moved: Iterable[TensorInfo] = lw.tensors
            caches.add(lw.layer)
        elif partial is not None and lw.layer == partial.layer:
            moved = (t for t in lw.ffn_tensors if partial.kind.moves(t.name))
        elif lw.layer in placement.cpu_expert_layers:
            moved = (t for t in lw.ffn_tensors if EXPERT_TENSOR.match(t.name))
        else:
            continue
        ram |= {(lw.layer, _role(t), cuda_alloc_size(t)) for t in moved}
    if not placement.output_on_gpu:
        ram |= {(-1, _role(t), cuda_alloc_size(t)) for t in weights.output_tensors}
    return Residency(frozenset(ram), frozenset(caches), op_offload)
