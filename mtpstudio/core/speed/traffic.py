"""What one forward pass reads and computes on each device, from where the weights live.

The memory model's ``Placement`` says where each block's tensors are (``core.memory``): a block's
non-expert tensors on the GPU or in RAM, its routed experts on the GPU or in RAM (the engine's
fit may split one block's experts). A pass of ``tokens`` tokens over some blocks then reads, on
the device that holds them:

* every non-expert weight once (attention, the recurrent mixer, the shared expert, a dense FFN);
* of each MoE block's routed experts, the ones the tokens pick: ``n_expert_used / n_expert`` of
  them for one token; for several tokens the union of their picks (a trained model's next token
  picks ``ROUTING_REUSE`` of the previous one's again and the rest at random: the share is
  ``1 - (1 - k/E)(1 - (1 - reuse)k/E)^(tokens - 1)``; a zero-weight model routes every token to
  the same experts);
* the KV cache of the attention blocks up to the filled context (a sliding-window block at most
  its window), and the recurrent state of the recurrent blocks (read and written);
* the output layer once (the input embedding when the model ties them).

Compute counts two operations per weight a token uses (each token uses ``k`` of ``E`` experts),
the attention over the filled cells, and the recurrent state update. A pass of 32 tokens or more
with ``op_offload`` runs a GPU block's experts that live in RAM on the GPU, copying them over
PCIe (``core.memory.budget.OP_OFFLOAD_MIN_BATCH``); shorter passes run them on the CPU, unless
the layer is in the GPU's MoE cache (``--moe-cache-mib``, ``core.memory.moe_cache``): a pass of
up to 32 tokens then runs its experts on the card, reading the cached ones there and copying the
others over PCIe first. Which experts are cached is a hit rate: the share of the layer's experts
the slots hold, as if every expert were equally likely and each token picked its own (a trained
model's routing is skewed and repeats from token to token, so the engine's own hit rate after a
benchmark is usually higher).

Devices are keyed by id (``CUDA0``; the host is ``CPU``): a block's device comes from the
placement (``block_device``), so a budget with several GPUs extends this by answering which
GPU holds a block.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from mtpstudio.core.memory.budget import OP_OFFLOAD_MIN_BATCH
from mtpstudio.core.memory.moe_cache import MoeCache
from mtpstudio.core.memory.placement import (
    EXPERT_TENSOR,
    INPUT_TENSORS,
    ModelWeights,
    PartialKind,
    Placement,
)
from mtpstudio.core.memory.terms import kv_bytes_per_cell, recurrent_state_parts
from mtpstudio.core.memory.trunk_graph import sliding_window_layers
from mtpstudio.core.model.info import ModelInfo, TensorInfo
from mtpstudio.core.speed.cpu_kernels import (
    CPU_KERNELS,
    NO_WORK,
    CpuKernels,
    CpuWork,
    tensor_rows,
)
from mtpstudio.core.speed.graph_nodes import (
    GraphNodes,
    NodeCount,
    graph_nodes,
    ik_fused,
    with_expert_sums,
)

HOST = "CPU"
"""The key of system RAM and the CPU that computes on it."""
MOE_CACHE_MAX_BATCH = 32
"""The MoE cache serves passes of 1 to 32 tokens (``llama-moe-cache.cpp`` ``max_batch``)."""


ROUTING_REUSE = 0.474
"""The share of a token's routed experts the next token picks again, measured on Qwen3-30B-A3B
(128 experts, 8 a token): Liang et al., "Not All Models Suit Expert Offloading: On Local Routing
Consistency of MoE Models" (arXiv 2505.16056, ICLR 2026; github.com/ljcleo/moe-lrc
``plot/mchr.pdf``): the hit rate of a least-recently-used cache of exactly 8 experts per layer,
which holds the previous token's picks, is 0.474 (random: 8/128). Measured on text the model
read, not text it wrote (a draft's tokens are its own): assumed the same."""


class Routing(StrEnum):
    """How a batch of tokens picks its experts."""

    INDEPENDENT = "independent"
    """Each token picks its own (a trained model): more tokens touch more experts, each
    picking ``ROUTING_REUSE`` of the previous token's again and the rest at random."""
    SAME = "same"
    """Every token picks the same experts (a zero-weight model's router ties)."""


@dataclass(frozen=True)
class BlockCost:
    """One block's weights as a pass sees them: bytes and weight counts, experts apart.

    ``moved`` gives, per way the engine's fit splits a block (``PartialKind``), the expert
    bytes, expert weights, other bytes and other weights that go to RAM. The ``*_cpu`` fields
    are the same weights as the CPU's kernels multiply them for one token (all the experts;
    ``moved_cpu``: the moved experts, then the moved rest).
    """

    dense_bytes: int
    dense_weights: int
    expert_bytes: int
    expert_weights: int
    moved: dict[PartialKind, tuple[int, int, int, int]] = field(default_factory=dict)
    dense_cpu: CpuWork = NO_WORK
    expert_cpu: CpuWork = NO_WORK
    moved_cpu: dict[PartialKind, tuple[CpuWork, CpuWork]] = field(default_factory=dict)


def cpu_work(tensors: Iterable[TensorInfo], kernels: CpuKernels) -> CpuWork:
    """The CPU kernels' work for one token through these tensors' products."""
    total = CpuWork()
    for t in tensors:
        if len(t.shape) >= 2:
            total += kernels.work(t.type_name, t.n_elements, tensor_rows(t.shape))
    return total


@dataclass(frozen=True)
class ModelCost:
    """Every block's cost and the output layer's (computed once per model)."""

    blocks: tuple[BlockCost, ...]
    output_bytes: int
    output_weights: int
    output_tied: bool
    output_cpu: CpuWork = NO_WORK
    nodes: GraphNodes | None = None
    kernels: CpuKernels = CPU_KERNELS

    @classmethod
    def from_model(
        cls,
        model: ModelInfo,
        weights: ModelWeights,
        kernels: CpuKernels = CPU_KERNELS,
        fused_moe: bool = False,
    ) -> ModelCost:
        """The costs of ``model``'s blocks with ``kernels`` on the CPU, and the nodes of the
        engine's graph (``fused_moe``: ik_llama.cpp's, which fuses some of upstream's)."""
        blocks = []
        for lw in weights.layers:
            experts = [t for t in lw.tensors if EXPERT_TENSOR.match(t.name)]
            dense = [t for t in lw.tensors if not EXPERT_TENSOR.match(t.name)]
            moved = {}
            moved_cpu = {}
            for kind in PartialKind:
                goes = [t for t in lw.ffn_tensors if kind.moves(t.name)]
                m_exp = [t for t in goes if EXPERT_TENSOR.match(t.name)]
                m_rest = [t for t in goes if not EXPERT_TENSOR.match(t.name)]
                moved[kind] = (
                    sum(t.n_bytes for t in m_exp),
                    sum(t.n_elements for t in m_exp),
                    sum(t.n_bytes for t in m_rest),
                    sum(t.n_elements for t in m_rest),
                )
                moved_cpu[kind] = (cpu_work(m_exp, kernels), cpu_work(m_rest, kernels))
            blocks.append(
                BlockCost(
                    sum(t.n_bytes for t in dense),
                    sum(t.n_elements for t in dense),
                    sum(t.n_bytes for t in experts),
                    sum(t.n_elements for t in experts),
                    moved,
                    cpu_work(dense, kernels),
                    cpu_work(experts, kernels),
                    moved_cpu,
                )
            )
        outputs = [t for t in model.tensors if t.name == "output.weight"]
        tied = not outputs
        if tied:  # the engine multiplies by the input embedding
            outputs = [t for t in model.tensors if t.name in INPUT_TENSORS and "embd" in t.name]
        moe = frozenset(i for i, b in enumerate(blocks) if b.expert_bytes)
        nodes = with_expert_sums(graph_nodes(model), moe, model.n_expert_used)
        if fused_moe:
            shared = bool(model.shared_expert_ffn_length)
            nodes = ik_fused(nodes, moe, model.n_expert_used, shared)
        return cls(
            tuple(blocks),
            sum(t.n_bytes for t in outputs),
            sum(t.n_elements for t in outputs),
            tied,
            cpu_work(outputs, kernels),
            nodes,
            kernels,
        )


@dataclass
class Load:
    """What a pass does on one device: bytes read from its memory, operations, blocks run."""

    bytes: float = 0.0
    flops: float = 0.0
    blocks: float = 0.0
    kv_bytes: float = 0.0
    attention_flops: float = 0.0  # of ``flops``: the attention over the cached cells
    attention_visits: float = 0.0  # cells times query heads times tokens (one visit each)
    cpu: CpuWork = NO_WORK  # the products as the CPU's kernels run them
    nodes: float = 0.0  # graph nodes computed (the CPU's per-node costs)
    syncs: float = 0.0  # points where several CPU threads wait for each other
    state_flops: float = 0.0  # of ``flops``: the recurrent state's update
    expert_flops: float = 0.0  # of ``flops``: the routed experts' products

    def add(self, n_bytes: float, flops: float, cpu: CpuWork | None = None) -> None:
        self.bytes += n_bytes
        self.flops += flops
        if cpu is not None:
            self.cpu += cpu

    def run_nodes(self, count: NodeCount, share: float = 1.0) -> None:
        self.nodes += count.nodes * share
        self.syncs += count.syncs * share


@dataclass
class PassLoad:
    """One forward pass: the load per device, the hops between devices, the PCIe copies."""

    tokens: int
    loads: dict[str, Load] = field(default_factory=dict)
    hops: int = 0
    pcie_bytes: float = 0.0

    def on(self, device: str) -> Load:
        return self.loads.setdefault(device, Load())


def expert_share(model: ModelInfo, tokens: int, routing: Routing) -> float:
    """The share of a block's routed experts ``tokens`` tokens read together."""
    if not model.is_moe or not model.n_expert:
        return 0.0
    one = min(1.0, model.n_expert_used / model.n_expert)
    if routing is Routing.SAME:
        return one
    fresh = one * (1.0 - ROUTING_REUSE)  # a later token's picks outside the previous one's
    return 1.0 - (1.0 - one) * (1.0 - fresh) ** (max(1, tokens) - 1)


def _cached_share(
    cache: MoeCache | None, model: ModelInfo, block: int, tokens: int, routing: Routing
) -> float:
    """The hit rate of ``block``'s experts in the MoE cache for a pass of ``tokens`` tokens
    (0: the pass does not use the cache); tokens that all pick the same experts find them
    cached after the first (a zero-weight model's router ties)."""
    if cache is None or block >= model.n_layer or not 1 <= tokens <= MOE_CACHE_MAX_BATCH:
        return 0.0
    share = cache.share_of(block)
    if not share:
        return 0.0
    for g in cache.groups:  # the pass's picks must fit the slots at once
        if block in g.layers and min(tokens * model.n_expert_used, g.n_expert) > g.n_slots:
            return 0.0
    return 1.0 if routing is Routing.SAME else share


def block_device(placement: Placement, gpu: str | None, block: int) -> str:
    """The device that holds ``block``'s non-expert tensors (and its caches)."""
    return gpu if gpu is not None and block in placement.gpu_layers else HOST


def expert_split(
    placement: Placement, gpu: str | None, block: int
) -> tuple[str, PartialKind | None]:
    """Where ``block``'s routed experts are: the device, and the fit's split when it splits
    the block (then the moved part is in RAM and the rest on the GPU)."""
    partial = placement.partial
    if partial is not None and partial.layer == block and gpu is not None:
        return gpu, partial.kind
    if gpu is None or block in placement.cpu_expert_layers or block not in placement.gpu_layers:
        return HOST, None
    return gpu, None


def cells_read(model: ModelInfo, block: int, depth: int, tokens: int) -> int:
    """KV cells an attention block reads: the filled context, at most a sliding window."""
    cells = depth + tokens
    if model.sliding_window and block in sliding_window_layers(model):
        return min(cells, model.sliding_window + tokens)
    return cells


def pass_load(
    model: ModelInfo,
    cost: ModelCost,
    placement: Placement,
    gpu: str | None,
    *,
    blocks: Iterable[int],
    tokens: int,
    outputs: int,
    depth: int,
    cache_types: tuple[str, str],
    routing: Routing = Routing.INDEPENDENT,
    op_offload: bool = True,
    moe_cache: MoeCache | None = None,
) -> PassLoad:
    """The load of one pass of ``tokens`` tokens over ``blocks`` and the output layer
    (``outputs`` rows of logits), with ``depth`` cells of context already filled; the trunk's
    layers in ``moe_cache`` run their experts on the card (the MTP context has no cache)."""
    out = PassLoad(tokens)
    share = expert_share(model, tokens, routing)
    used = model.n_expert_used / model.n_expert if model.is_moe and model.n_expert else 0.0
    offload = op_offload and gpu is not None and tokens >= OP_OFFLOAD_MIN_BATCH
    attention = set(model.attention_layers) | set(range(model.n_layer, model.block_count))
    recurrent = set(model.recurrent_layers)
    kv_cell = kv_bytes_per_cell(model, 1, *cache_types)
    conv, state = recurrent_state_parts(model)
    nodes = cost.nodes or graph_nodes(model)
    columns = cost.kernels.column_share  # a further token's use of a weight on the CPU
    last = None
    for b in blocks:
        if b not in placement.loaded_layers or b >= len(cost.blocks):
            continue
        c = cost.blocks[b]
        home = block_device(placement, gpu, b)
        where, kind = expert_split(placement, gpu, b)
        moved = c.moved.get(kind, (0, 0, 0, 0)) if kind is not None else (0, 0, 0, 0)
        no_work = (NO_WORK, NO_WORK)
        moved_cpu = c.moved_cpu.get(kind, no_work) if kind is not None else no_work
        block_nodes = nodes.block(b)
        # the non-expert weights (a split block's moved router / shared expert run in RAM)
        out.on(home).add(
            c.dense_bytes - moved[2],
            2.0 * (c.dense_weights - moved[3]) * tokens,
            (c.dense_cpu - moved_cpu[1]).batched(1.0, tokens, columns),
        )
        out.on(home).blocks += 1
        out.on(home).run_nodes(block_nodes)
        if moved[2]:
            out.on(HOST).add(
                moved[2], 2.0 * moved[3] * tokens, moved_cpu[1].batched(1.0, tokens, columns)
            )
        # the routed experts the tokens pick
        ram_b, ram_w = (moved[0], moved[1]) if kind is not None else (0, 0)
        ram_cpu = moved_cpu[0]
        if kind is None and where == HOST:
            ram_b, ram_w, ram_cpu = c.expert_bytes, c.expert_weights, c.expert_cpu
        card_b, card_w = c.expert_bytes - ram_b, c.expert_weights - ram_w
        if card_b:
            out.on(where).add(card_b * share, 2.0 * card_w * used * tokens)
            out.on(where).expert_flops += 2.0 * card_w * used * tokens
        cached = 0.0
        if ram_b and home != HOST:
            cached = _cached_share(moe_cache, model, b, tokens, routing)
        if cached:  # read from the cache, the misses copied in first
            out.pcie_bytes += ram_b * share * (1.0 - cached)
            out.on(home).add(ram_b * share, 2.0 * ram_w * used * tokens)
            out.on(home).expert_flops += 2.0 * ram_w * used * tokens
        elif ram_b and offload and home != HOST:  # copied to the card, run there
            out.pcie_bytes += ram_b
            out.on(home).add(ram_b, 2.0 * ram_w * used * tokens)
            out.on(home).expert_flops += 2.0 * ram_w * used * tokens
        elif ram_b:
            out.on(HOST).add(
                ram_b * share,
                2.0 * ram_w * used * tokens,
                ram_cpu.batched(share, used * tokens, columns),
            )
            if home != HOST:
                out.on(HOST).blocks += 0.5
                out.on(HOST).run_nodes(block_nodes, 0.5)
                out.hops += 2  # to RAM's experts and back
        # the caches
        if b in attention:
            cells = cells_read(model, b, depth, tokens)
            kv = kv_cell * cells
            flops = 2.0 * model.n_head * (model.key_length + model.value_length) * cells * tokens
            out.on(home).add(kv, flops)
            out.on(home).kv_bytes += kv
            out.on(home).attention_flops += flops
            out.on(home).attention_visits += float(model.n_head) * cells * tokens
        elif b in recurrent and state:
            out.on(home).add(8.0 * (conv + state), 6.0 * state * tokens)  # F32, read + write
            out.on(home).state_flops += 6.0 * state * tokens
        if last is not None and home != last:
            out.hops += 1
        last = home
    if outputs <= 0:  # no logits wanted (the MTP context's catch-up): no output layer
        return out
    head = gpu if gpu is not None and placement.output_on_gpu else HOST
    out.on(head).add(
        cost.output_bytes,
        2.0 * cost.output_weights * outputs,
        cost.output_cpu.batched(1.0, outputs, columns),
    )
    out.on(head).run_nodes(nodes.output)
    if last is not None and head != last:
        out.hops += 1
    return out
