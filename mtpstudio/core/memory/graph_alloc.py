"""The engine's graph allocator, replayed: how large a compute buffer a graph reserves.

llama.cpp sizes each compute buffer by walking the worst-case graph once with ggml's graph
allocator (``ggml-alloc.c``): every tensor gets an offset in one buffer, a tensor is freed when
its last consumer has run, an element-wise op may overwrite its only input, and a new tensor
takes the smallest free block that holds it (else the end of the buffer). The buffer is the
highest offset reached. Freed blocks are reused only where a later tensor fits, so the size is
not a smooth function of the shapes: a hole left by the attention mask may or may not take the
next large activation. Replaying the same walk over the same tensor sizes gives the same size.

This module is that walk over an abstract graph; the graphs themselves are built elsewhere
(``nextn_graph``). What differs between backends (the buffer alignment, how many bytes a tensor
takes, what the scheduler and the backend do to the graph before it is allocated) is a
``BackendRules`` parameter: the CPU's here, CUDA's in ``cuda_rules``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple, Protocol

# Ops the allocator lets overwrite their input (ggml_op_can_inplace; unary ops such as
# sigmoid count as GGML_OP_UNARY).
INPLACE_OPS = frozenset(
    {
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "SCALE",
        "SQR",
        "SQRT",
        "LOG",
        "UNARY",
        "ROPE",
        "RMS_NORM",
        "CLAMP",
        "SOFT_MAX",
    }
)
F32 = 4
F16 = 2
I32 = 4
I64 = 8
CPU_ALIGNMENT = 32
"""TENSOR_ALIGNMENT of the CPU buffer type (ggml-impl.h)."""


@dataclass(eq=False, slots=True)
class Tensor:
    """One tensor of a graph, as the allocator sees it.

    ``layout`` stands for ggml's (type, ne, nb): an in-place op reuses its input only when the
    two layouts are equal. ``external`` tensors (weights, the K/V cache) live in other buffers.
    A view (``view_of``) takes no memory of its own and keeps its source alive.
    """

    name: str
    op: str
    nbytes: int
    srcs: tuple[Tensor, ...] = ()
    layout: tuple[object, ...] = ()
    view_of: Tensor | None = None
    is_input: bool = False
    is_output: bool = False
    external: bool = False
    ne: tuple[int, ...] = ()
    """ggml's element counts, where a backend's rules read them (attention operands)."""
    dtype: str = ""
    """The element type where it is not F32 (``f16``, ``q8_0``, ...); read by backend rules."""
    host: bool = False
    """Runs on the host whatever the backend (a lookup into weights kept in system memory)."""
    layer: int = -1
    """The block the tensor belongs to (-1: none): where its weight or cache lives is that
    block's placement (``cuda_schedule``)."""
    role: str = ""
    """An external tensor's name in the model file past ``blk.N.`` (``ffn_up_exps.weight``),
    or ``cache_k``/``cache_v``/``cache_r``/``cache_s`` for a cache."""
    rows: int = 0
    """The op's batch as the CUDA backend counts it for op offload (its token rows)."""

    @property
    def is_weight(self) -> bool:
        return self.external and bool(self.role) and not self.role.startswith("cache_")


AllocEvent = tuple[str, int, int]
"""(``"alloc"`` or ``"free"``, bytes, offset): what ggml-alloc's debug trace prints."""

Graph = tuple[list[Tensor], list[Tensor]]
"""(leafs, nodes) in the engine's order."""


class Prepared(NamedTuple):
    """A graph as one backend's allocator walks it: its leafs and nodes in order, what a
    node reads instead of its own sources (the scheduler's copies), by the node's ``id``, and
    the tensors the scheduler keeps for the whole graph (by ``id``: its input copies under
    pipeline parallelism, marked as outputs so the allocator never frees them)."""

    leafs: list[Tensor]
    nodes: list[Tensor]
    reads: Mapping[int, tuple[Tensor, ...]] = MappingProxyType({})
    kept: frozenset[int] = frozenset()


@dataclass(frozen=True)
class AttentionShape:
    """A flash-attention node's operands: Q ``(D, n_tokens, n_head)``, K and V
    ``(D, n_kv, n_head_kv)`` of the cache types, and whether a mask is given."""

    head_dim: int
    head_dim_v: int
    n_tokens: int
    n_head: int
    n_head_kv: int
    n_kv: int
    type_k: str = "f16"
    type_v: str = "f16"
    has_mask: bool = True

    @property
    def gqa_ratio(self) -> int:
        return self.n_head // max(1, self.n_head_kv)

    @property
    def k_elements(self) -> int:
        return self.head_dim * self.n_kv * self.n_head_kv

    @property
    def v_elements(self) -> int:
        return self.head_dim_v * self.n_kv * self.n_head_kv


@dataclass(frozen=True)
class BackendRules:
    """How one backend's buffer type sizes tensors, and what reaches its allocator.

    The base class is the CPU backend: ``TENSOR_ALIGNMENT`` (32 bytes), every tensor its
    ``ggml_nbytes``, the graph as built. Other backends override ``alloc_size`` (the buffer
    type's ``get_alloc_size``) and ``prepare`` (what the scheduler and the backend's
    ``graph_optimize`` do to the graph first). Frozen and hashable: replays are cached by it.
    """

    name: str = "CPU"
    alignment: int = CPU_ALIGNMENT

    def alloc_size(self, t: Tensor) -> int:
        """Bytes the buffer type asks for ``t`` (before alignment)."""
        return t.nbytes

    def prepare(self, leafs: list[Tensor], nodes: list[Tensor]) -> Prepared:
        """The graph as this backend's allocator walks it."""
        return Prepared(leafs, nodes)

    @property
    def uniform_blocks(self) -> bool:
        """Every block of a graph is placed alike, so a replay may shorten a run of blocks that
        repeat (``trunk_graph.replayed_layers``)."""
        return True

    def copies_within(self, nodes: Sequence[Tensor]) -> bool:
        """Whether every tensor ``prepare`` adds to this graph is at most as large as one the
        graph already has (so the graph's own sizes bound its walk)."""
        return True

    def block_key(self, layer: int) -> Hashable:
        """How block ``layer`` is placed, as far as these rules see it: blocks of one kind with
        equal keys replay alike (``trunk_graph.compressed_layers``)."""
        return None

    def attention_extra(self, shape: AttentionShape, out_bytes: int) -> int:
        """Bytes a flash-attention node takes beyond its ``out_bytes`` output (none here)."""
        return 0


CPU_RULES = BackendRules()


@dataclass
class _Blocks:
    """ggml_dyn_tallocr with one chunk: sorted free blocks, the last one endless."""

    alignment: int
    free: list[list[int]] = field(default_factory=lambda: [[0, 1 << 62]])
    peak: int = 0
    events: list[AllocEvent] | None = None

    def _aligned(self, size: int) -> int:
        return -(-size // self.alignment) * self.alignment

    def alloc(self, size: int) -> int:
        size = self._aligned(size)
        best = -1
        best_size = 0
        free = self.free
        for i in range(len(free) - 1):
            block_size = free[i][1]
            if block_size >= size and (best == -1 or block_size <= best_size):
                best, best_size = i, block_size
        if best == -1:
            best = len(self.free) - 1
        offset, block_size = self.free[best]
        if block_size == size:
            del self.free[best]
        else:
            self.free[best] = [offset + size, block_size - size]
        self.peak = max(self.peak, offset + size)
        if self.events is not None:
            self.events.append(("alloc", size, offset))
        return offset

    def release(self, offset: int, size: int) -> None:
        size = self._aligned(size)
        blocks = self.free
        for i, (start, length) in enumerate(blocks):
            if start + length == offset:  # the freed bytes follow this block
                blocks[i][1] += size
                if i + 1 < len(blocks) and blocks[i][0] + blocks[i][1] == blocks[i + 1][0]:
                    blocks[i][1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if offset + size == start:  # the freed bytes precede this block
                blocks[i] = [offset, length + size]
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == offset:
                    blocks[i - 1][1] += blocks[i][1]
                    del blocks[i]
                return
        pos = 0
        while pos < len(blocks) and blocks[pos][0] < offset:
            pos += 1
        blocks.insert(pos, [offset, size])


def reserved_bytes(
    leafs: Sequence[Tensor],
    nodes: Sequence[Tensor],
    *,
    rules: BackendRules = CPU_RULES,
    events: list[AllocEvent] | None = None,
) -> int:
    """The compute buffer one graph reserves: ggml_gallocr_alloc_graph_impl, replayed.

    ``leafs`` in the graph's leaf order (its inputs are placed first, in that order), ``nodes``
    in execution order, views included. ``rules``: the backend whose buffer it is (CPU unless
    said). ``events``, when given, receives every allocation and every freed tensor in order,
    as the engine's allocator trace lists them.
    """
    return walk_bytes(rules.prepare(list(leafs), list(nodes)), rules=rules, events=events)


def walk_bytes(
    prepared: Prepared,
    *,
    rules: BackendRules = CPU_RULES,
    events: list[AllocEvent] | None = None,
) -> int:
    """``reserved_bytes`` of a graph ``rules.prepare`` already made (see there).

    The walk runs for every compute buffer of every budget the levers look at, so it keeps
    its bookkeeping by ``id`` in local dicts and reads each node's sources once.
    """
    leafs, nodes, reads, kept = prepared
    get_reads = reads.get
    size = rules.alloc_size
    blocks = _Blocks(rules.alignment, events=events)
    aligned = blocks._aligned
    owned: dict[int, bool] = {}
    offset: dict[int, int] = {}
    children: dict[int, int] = {}
    views: dict[int, int] = {}
    srcs_of = [get_reads(id(n), n.srcs) for n in nodes]

    def allocate(t: Tensor, srcs: tuple[Tensor, ...] | None = None) -> None:
        key = id(t)
        if t.external or t.view_of is not None or key in offset:
            return
        owned[key] = True
        if t.op in INPLACE_OPS:
            for parent in get_reads(key, t.srcs) if srcs is None else srcs:
                pk = id(parent)
                if not owned.get(pk, False) or parent.is_output or parent.layout != t.layout:
                    continue
                if pk in kept:
                    continue
                if children.get(pk, 0) == 1 and views.get(pk, 0) == 0:
                    at = offset[key] = offset[pk]
                    owned[pk] = False
                    extra = aligned(size(parent)) - aligned(size(t))
                    if extra > 0:
                        blocks.release(at + aligned(size(t)), extra)
                    return
        offset[key] = blocks.alloc(size(t))

    def release(t: Tensor) -> None:
        key = id(t)
        if t.is_output or key in kept:
            return
        if events is not None:
            events.append(("free", size(t), offset[key]))
        blocks.release(offset[key], size(t))
        owned[key] = False

    for leaf in leafs:
        allocate(leaf)
    for node, srcs in zip(nodes, srcs_of, strict=True):
        # a dependency the scheduler adds (op NONE) is a view that does not count as one
        base = node.view_of
        if base is not None and node.op != "NONE":
            views[id(base)] = views.get(id(base), 0) + 1
        if node.is_input:
            allocate(node, srcs)
        for src in srcs:
            key = id(src)
            children[key] = children.get(key, 0) + 1
            if src.is_input:
                allocate(src)
    for node, srcs in zip(nodes, srcs_of, strict=True):
        for src in srcs:
            if not src.external and src.view_of is None and id(src) not in offset:
                allocate(src)
        allocate(node, srcs)
        for parent in srcs:
            pk = id(parent)
            left = children[pk] - 1
            children[pk] = left
            if left or views.get(pk, 0):
                continue
            source = parent.view_of
            if source is not None:
                sk = id(source)
                views[sk] -= 1
                if not views[sk] and not children.get(sk, 0) and owned.get(sk, False):
                    release(source)
            elif owned.get(pk, False):
                release(parent)
    return blocks.peak


@dataclass
class GraphBuilder:
    """Collects a graph's leafs and nodes in the order the engine builds them.

    ``layer`` is the block being built (-1 outside the blocks) and ``rows`` the token rows its
    ops work on: the builders set both, and every tensor made records them (the CUDA scheduler
    replay reads where a block's weights live and how large an op's batch is).
    """

    leafs: list[Tensor] = field(default_factory=list)
    nodes: list[Tensor] = field(default_factory=list)
    layer: int = -1
    rows: int = 0

    def w(self, role: str, layer: int | None = None) -> Tensor:
        """The weight ``role`` (its name past ``blk.N.``, or a whole name outside the blocks) of
        block ``layer`` (default: the block being built): external, in a weights buffer."""
        block = self.layer if layer is None else layer
        return Tensor(role, "NONE", 0, external=True, layer=block, role=role)

    def cache(
        self, role: str, ne: tuple[int, ...] = (), dtype: str = "", nbytes: int = 0
    ) -> Tensor:
        """The block's cache tensor ``role`` (``cache_k`` ...): external, not a weight;
        ``ne``/``dtype`` where a backend's attention rules read them, ``nbytes`` what a
        reader of the whole tensor reads (a copy of it takes as much)."""
        return Tensor(
            role, "NONE", nbytes, external=True, layer=self.layer, role=role, ne=ne, dtype=dtype
        )

    def input(self, name: str, nbytes: int) -> Tensor:
        t = Tensor(name, "NONE", nbytes, layout=("contiguous", nbytes), is_input=True)
        self.leafs.append(t)
        return t

    def op(
        self, name: str, op: str, nbytes: int, *srcs: Tensor, out: bool = False, host: bool = False
    ) -> Tensor:
        """A node; ``host``: it runs on the host whatever the backend (see ``Tensor.host``)."""
        t = Tensor(
            name,
            op,
            nbytes,
            srcs,
            layout=("contiguous", nbytes),
            is_output=out,
            host=host,
            layer=self.layer,
            rows=self.rows,
        )
        self.nodes.append(t)
        return t

    def view(
        self,
        name: str,
        src: Tensor,
        nbytes: int,
        *,
        contiguous: bool = False,
        op: str = "VIEW",
        ne: tuple[int, ...] = (),
        dtype: str = "",
    ) -> Tensor:
        """A view of ``src``; ``op`` names ggml's view op (``VIEW``, ``RESHAPE``, ``PERMUTE``)
        where a backend's graph rules match on it, ``ne``/``dtype`` where its size rules read
        them."""
        layout: tuple[object, ...] = ("contiguous", nbytes) if contiguous else ("view", name)
        base = src.view_of or src  # ggml points every view at the tensor that owns the memory
        t = Tensor(
            name,
            op,
            nbytes,
            (src,),
            layout=layout,
            view_of=base,
            ne=ne,
            dtype=dtype,
            layer=self.layer,
            rows=self.rows,
        )
        self.nodes.append(t)
        return t

    def write(self, name: str, op: str, target: Tensor, *srcs: Tensor) -> Tensor:
        """An op writing into ``target`` (SET_ROWS, CPY): its result is a view of the target,
        no memory of its own, and it keeps the target alive."""
        t = Tensor(name, op, 0, srcs, view_of=target, layer=self.layer, rows=self.rows)
        self.nodes.append(t)
        return t


class GraphSizes(Protocol):
    """What the graph builders read of a model (``ModelInfo`` has all of it)."""

    @property
    def n_embd(self) -> int: ...
    @property
    def n_head(self) -> int: ...
    @property
    def n_head_kv(self) -> int: ...
    @property
    def key_length(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def n_expert(self) -> int: ...
    @property
    def n_expert_used(self) -> int: ...
    @property
    def ffn_length(self) -> int: ...
    @property
    def expert_ffn_length(self) -> int: ...
    @property
    def shared_expert_ffn_length(self) -> int: ...
    @property
    def ssm_state_size(self) -> int: ...
    @property
    def ssm_group_count(self) -> int: ...
    @property
    def ssm_inner_size(self) -> int: ...
    @property
    def ssm_conv_kernel(self) -> int: ...
    @property
    def is_moe(self) -> bool: ...


@dataclass(frozen=True)
class ModelDims:
    """A model's sizes as the graph builders read them: hashable, so a replay can be cached
    (the budget asks for the same buffer many times while it searches a placement)."""

    n_embd: int
    n_head: int
    n_head_kv: int
    key_length: int
    vocab_size: int
    n_expert: int
    n_expert_used: int
    ffn_length: int
    expert_ffn_length: int
    shared_expert_ffn_length: int
    ssm_state_size: int
    ssm_group_count: int
    ssm_inner_size: int
    ssm_conv_kernel: int

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    @classmethod
    def of(cls, model: GraphSizes) -> ModelDims:
        if isinstance(model, ModelDims):
            return model
        return cls(
            model.n_embd,
            model.n_head,
            model.n_head_kv,
            model.key_length,
            model.vocab_size,
            model.n_expert,
            model.n_expert_used,
            model.ffn_length,
            model.expert_ffn_length,
            model.shared_expert_ffn_length,
            model.ssm_state_size,
            model.ssm_group_count,
            model.ssm_inner_size,
            model.ssm_conv_kernel,
        )
