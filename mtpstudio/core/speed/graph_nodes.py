"""How many nodes the engine computes per block for one token, and where its threads synchronise.

The CPU backend runs a graph node by node; views (``VIEW``, ``RESHAPE``, ``PERMUTE``,
``TRANSPOSE``) and ``NONE`` are skipped, an ``RMS_NORM`` followed by its ``MUL`` runs as one
(``ggml_cpu_try_fuse_ops``), and with several threads every node computed ends at a barrier, a
product (``MUL_MAT``, ``MUL_MAT_ID``) at one more after preparing its input
(``ggml_compute_forward_mul_mat``). The counts come from the same one-token graphs the memory model
replays (``memory.trunk_graph``, ``memory.hybrid_graph``); an architecture without one is counted
as a plain transformer block (``PLAIN_BLOCK``), which its estimate says.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mtpstudio.core.memory.graph_alloc import Graph, Tensor
from mtpstudio.core.memory.hybrid_graph import (
    HYBRID_GRAPH_ARCHITECTURES,
    HybridDims,
    hybrid_trunk_graph,
)
from mtpstudio.core.memory.replay_store import stored
from mtpstudio.core.memory.trunk_graph import (
    TRUNK_GRAPH_ARCHITECTURES,
    TrunkDims,
    TrunkShape,
    trunk_graph,
)
from mtpstudio.core.model.info import ModelInfo

SKIPPED_OPS = frozenset({"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
PRODUCT_OPS = frozenset({"MUL_MAT", "MUL_MAT_ID"})


@dataclass(frozen=True)
class NodeCount:
    """Nodes computed and synchronisation points (nodes plus products) of one part of a graph."""

    nodes: int
    syncs: int


PLAIN_BLOCK = NodeCount(nodes=17, syncs=24)
"""A llama block for one token (``trunk_graph`` of a llama: 17 nodes, 7 products), for the
architectures whose graph mtpstudio does not build."""
PLAIN_OUTPUT = NodeCount(nodes=3, syncs=4)


@dataclass(frozen=True)
class GraphNodes:
    """Per block (by index) and for the output layer: what one token's pass computes."""

    blocks: tuple[NodeCount, ...]
    output: NodeCount
    modelled: bool

    def block(self, index: int) -> NodeCount:
        if 0 <= index < len(self.blocks):
            return self.blocks[index]
        return self.blocks[-1] if self.blocks else PLAIN_BLOCK


def count_nodes(nodes: list[Tensor]) -> dict[int, NodeCount]:
    """Computed nodes and synchronisation points by block (-1: outside the blocks)."""
    counts: dict[int, list[int]] = {}
    previous: Tensor | None = None
    for t in nodes:
        if t.op in SKIPPED_OPS:
            continue
        fused = (
            previous is not None
            and previous.op == "RMS_NORM"
            and t.op == "MUL"
            and previous in t.srcs
        )
        previous = t
        if fused:
            continue
        c = counts.setdefault(t.layer, [0, 0])
        c[0] += 1
        c[1] += 2 if t.op in PRODUCT_OPS else 1
    return {layer: NodeCount(n, s) for layer, (n, s) in counts.items()}


ONE_TOKEN = TrunkShape(n_tokens=1, n_outputs=1, n_kv=256, n_kv_swa=256)


@lru_cache(maxsize=32)
def _counted(dims: TrunkDims | HybridDims, n_layer: int) -> GraphNodes:
    flat = _counts(dims, n_layer)
    pairs = [NodeCount(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    return GraphNodes(tuple(pairs[1:]), pairs[0], modelled=True)


@stored("graph_nodes", tuple)
def _counts(dims: TrunkDims | HybridDims, n_layer: int) -> tuple[int, ...]:
    """The output's (nodes, syncs), then each block's, flat: kept between runs like the
    memory model's replays (the graph of every block is built for it)."""
    graph: Graph = (
        trunk_graph(dims, ONE_TOKEN)
        if isinstance(dims, TrunkDims)
        else hybrid_trunk_graph(dims, ONE_TOKEN)
    )
    counts = count_nodes(graph[1])
    flat: list[int] = []
    for part in (-1, *range(n_layer)):
        count = counts.get(part, NodeCount(0, 0))
        flat += (count.nodes, count.syncs)
    return tuple(flat)


def graph_nodes(model: ModelInfo) -> GraphNodes:
    """What one token's pass over ``model``'s trunk computes, block by block."""
    if model.architecture in TRUNK_GRAPH_ARCHITECTURES:
        return _counted(TrunkDims.of(model), model.n_layer)
    if model.architecture in HYBRID_GRAPH_ARCHITECTURES and model.recurrent_layers:
        return _counted(HybridDims.of(model), model.n_layer)
    return GraphNodes((PLAIN_BLOCK,) * model.n_layer, PLAIN_OUTPUT, modelled=False)


def with_expert_sums(
    nodes: GraphNodes, moe_blocks: frozenset[int], n_expert_used: int
) -> GraphNodes:
    """The counts with every MoE block's sum over its experts as the engine builds it: one
    ``ADD`` per expert past the first (``llm_build_moe_ffn``); the memory model's replay keeps
    two of them, which allocate the same."""
    extra = max(0, n_expert_used - 3)
    return _adjusted(nodes, moe_blocks, extra)


def ik_fused(
    nodes: GraphNodes, moe_blocks: frozenset[int], n_expert_used: int, shared: bool
) -> GraphNodes:
    """ik_llama.cpp's graph of the same blocks: its default fusions (``src/llama-build-context.cpp``
    8337e4c) make the experts' up, gate and activation one node (``fused_moe_up_gate``), their
    weighting and sum one (``fused_mmad``: the multiply and the adds), and the shared expert's
    up, gate and activation one (``fused_up_gate``)."""
    saved = 2 + n_expert_used + (2 if shared else 0)
    return _adjusted(nodes, moe_blocks, -saved)


def _adjusted(nodes: GraphNodes, blocks: frozenset[int], delta: int) -> GraphNodes:
    if not delta or not blocks:
        return nodes
    out = tuple(
        NodeCount(max(1, c.nodes + delta), max(1, c.syncs + delta)) if i in blocks else c
        for i, c in enumerate(nodes.blocks)
    )
    return GraphNodes(out, nodes.output, nodes.modelled)
