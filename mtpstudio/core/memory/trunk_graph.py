"""The trunk's worst-case graph of plain transformer architectures, tensor by tensor.

Upstream reserves the main context's compute buffer by walking its worst-case graphs (a full
ubatch, then one token per sequence) with ggml's graph allocator; ``graph_alloc`` replays that
walk. This module builds those graphs for the architectures whose layers are attention plus a
feed-forward block: ``llama`` (dense, or MoE with ``ffn_*_exps``), ``qwen2`` (Q/K/V biases),
``qwen3`` and ``qwen3moe`` (Q/K norms), ``gemma3`` (scaled embeddings, post-norms, GELU, and
sliding-window layers on a second, smaller cache), ``glm4moe`` (GLM-4.5: dense first layers,
sigmoid routing with a selection bias, scaled weights, an ungated shared expert; and its MTP
draft graph, ``nextn_block_graph``). The tensors follow ``src/models/<arch>.cpp`` and
``src/llama-graph.cpp`` of upstream 11434 in the order the engine adds them to its graph
(checked against its allocator traces, ``tests/fixtures/engine_logs``). The replays take a
backend's ``BackendRules`` (the CPU's unless said; CUDA's in ``cuda_rules``): the tensors carry
what those rules read (the attention operands' shapes and cache types, the token lookups that
run on the host).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache

from mtpstudio.core.memory.graph_alloc import (
    CPU_RULES,
    F16,
    F32,
    I32,
    I64,
    BackendRules,
    Graph,
    GraphBuilder,
    Tensor,
    reserved_bytes,
    walk_bytes,
)
from mtpstudio.core.memory.nextn_graph import (
    _moe_ffn,
    _norm,
    _rotated,
    _swiglu_ffn,
    backend_top_k,
)
from mtpstudio.core.memory.replay_store import stored
from mtpstudio.core.model.info import ModelInfo

TRUNK_GRAPH_ARCHITECTURES = frozenset({"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "glm4moe"})
"""Architectures whose trunk graph this module builds."""

MAX_ALIGNMENT = 256
"""At least any backend's tensor alignment (CPU 32 bytes, CUDA 128): a block is at most this
larger."""

GEMMA3_SWA_PATTERN = 6
"""gemma3: five sliding-window layers, then one global layer (``set_swa_pattern(6)``)."""


def sliding_window_layers(model: ModelInfo) -> frozenset[int]:
    """The layers upstream gives the small sliding-window cache (gemma3 with a window)."""
    if model.architecture != "gemma3" or not model.sliding_window:
        return frozenset()
    n = GEMMA3_SWA_PATTERN
    return frozenset(i for i in range(model.n_layer) if i % n < n - 1)


@dataclass(frozen=True)
class TrunkDims:
    """What the trunk graph reads of a model: hashable, so a replay can be cached.

    The optional pieces come from the tensor table (biases, Q/K norms, the experts' width and
    selection bias, the shared expert), the leading dense layers and the expert weights'
    normalisation and scale from the GGUF keys.
    """

    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    key_length: int
    head_v: int
    vocab_size: int
    ffn_length: int
    n_expert: int
    n_expert_used: int
    expert_ffn_length: int
    q_bias: bool
    k_bias: bool
    v_bias: bool
    o_bias: bool
    swa_layers: frozenset[int]
    qk_norm: bool = False
    n_dense_lead: int = 0
    shared_expert_ffn_length: int = 0
    experts_biased: bool = False
    experts_normalized: bool = True
    experts_scaled: bool = False
    layers: tuple[int, ...] = ()
    """The blocks a replay builds (empty: all ``n_layer``; see ``compressed_layers``)."""

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    @property
    def block_ids(self) -> tuple[int, ...]:
        return self.layers or tuple(range(self.n_layer))

    # no recurrent layers (what the shared graph pieces may ask)
    ssm_state_size = ssm_group_count = ssm_inner_size = ssm_conv_kernel = 0

    @classmethod
    def of(cls, model: ModelInfo) -> TrunkDims:
        lead = model.n_dense_lead if model.is_moe else 0
        first, moe = "blk.0.", f"blk.{lead}."
        shapes = {t.name: t.shape for t in model.tensors if t.name.startswith((first, moe))}
        experts = shapes.get(moe + "ffn_up_exps.weight")
        shared = shapes.get(moe + "ffn_up_shexp.weight")
        return cls(
            architecture=model.architecture,
            n_layer=model.n_layer,
            n_embd=model.n_embd,
            n_head=model.n_head,
            n_head_kv=model.n_head_kv,
            key_length=model.key_length,
            head_v=model.value_length,
            vocab_size=model.vocab_size,
            ffn_length=model.ffn_length,
            n_expert=model.n_expert,
            n_expert_used=model.n_expert_used,
            expert_ffn_length=experts[1] if experts else model.expert_ffn_length,
            q_bias=first + "attn_q.bias" in shapes,
            k_bias=first + "attn_k.bias" in shapes,
            v_bias=first + "attn_v.bias" in shapes,
            o_bias=first + "attn_output.bias" in shapes,
            swa_layers=sliding_window_layers(model),
            qk_norm=first + "attn_q_norm.weight" in shapes,
            n_dense_lead=lead,
            shared_expert_ffn_length=shared[1] if shared else 0,
            experts_biased=moe + "exp_probs_b.bias" in shapes,
            # GLM-4.5 reads the normalisation from its header; the others always normalise
            experts_normalized=model.expert_weights_norm or model.architecture != "glm4moe",
            experts_scaled=model.expert_weights_scale not in (0.0, 1.0),
        )


@dataclass(frozen=True)
class TrunkShape:
    """One worst-case graph: a ubatch of ``n_tokens`` (split evenly over ``n_seqs`` sequences)
    with ``n_outputs`` logits rows against ``n_kv`` cache cells (``n_kv_swa`` on a
    sliding-window cache); ``n_rs_seq`` recurrent-state copies MTP keeps per sequence; the
    sides of the Hadamard rotations of a quantized cache; the cache's K and V types (a
    backend's attention rules read them)."""

    n_tokens: int
    n_outputs: int
    n_kv: int
    n_kv_swa: int = 0
    flash_attn: bool = True
    k_rot: int = 0
    v_rot: int = 0
    n_rs_seq: int = 0
    n_seqs: int = 1
    cache_types: tuple[str, str] = ("f16", "f16")
    top_k: int = 0
    """An MTP draft's backend top-k sampler after its LM head (0: none)."""

    def one_token(self) -> TrunkShape:
        """The same graph for one token per sequence (the second reservation)."""
        return dataclasses.replace(self, n_tokens=self.n_seqs, n_outputs=self.n_seqs)


@dataclass
class KvInputs:
    """The graph inputs of one KV cache (a sliding-window cache has its own) and the cache."""

    k_idxs: Tensor
    v_idxs: Tensor
    mask: Tensor
    n_kv: int
    k: Tensor
    v: Tensor
    k_rot: Tensor | None
    v_rot: Tensor | None


@dataclass
class AttentionInputs:
    """The attention layers' graph inputs, made when a layer first reads them: the engine's
    graph lists its inputs in the order it reaches them, and that is the order they are
    placed in. A cache's first layer reaches its K rotation (the query's), the positions (only
    the first time), its V rotation, then its row indices and its mask."""

    g: GraphBuilder
    shape: TrunkShape
    v_gqa: int
    pos_per_token: int = 1  # four with multi-section RoPE
    head_dims: tuple[int, int, int] = (0, 0, 0)  # K and V head sizes, KV heads: the cache's ne
    pos: Tensor | None = None
    caches: dict[str, KvInputs] = field(default_factory=dict)

    def position(self) -> Tensor:
        if self.pos is None:
            self.pos = self.g.input("inp_pos", I32 * self.shape.n_tokens * self.pos_per_token)
        return self.pos

    def cache(self, tag: str, n_kv: int) -> KvInputs:
        """The inputs of KV cache ``tag`` ("" or "_swa") with ``n_kv`` cells."""
        if tag in self.caches:
            return self.caches[tag]
        g, s, t = self.g, self.shape, self.shape.n_tokens
        d_k, d_v, n_head_kv = self.head_dims
        type_k, type_v = s.cache_types
        k_rot = g.input(f"attn_inp_k_rot{tag}", F32 * s.k_rot**2) if s.k_rot else None
        self.position()
        v_rot = g.input(f"attn_inp_v_rot{tag}", F32 * s.v_rot**2) if s.v_rot else None
        cache = KvInputs(
            g.input(f"attn_inp_k_idxs{tag}", I64 * t),
            g.input(f"attn_inp_v_idxs{tag}", I64 * t * (1 if s.flash_attn else self.v_gqa)),
            g.input(f"attn_inp_kq_mask{tag}", (F16 if s.flash_attn else F32) * t * n_kv),
            n_kv,
            Tensor(
                f"cache_k{tag}", "NONE", 0, external=True, ne=(d_k, n_kv, n_head_kv), dtype=type_k
            ),
            Tensor(
                f"cache_v{tag}", "NONE", 0, external=True, ne=(d_v, n_kv, n_head_kv), dtype=type_v
            ),
            k_rot,
            v_rot,
        )
        self.caches[tag] = cache
        return cache


def trunk_graph(dims: TrunkDims, shape: TrunkShape) -> tuple[list[Tensor], list[Tensor]]:
    """(leafs, nodes) of the trunk's graph for one ubatch, in the engine's order."""
    g = GraphBuilder(rows=shape.n_tokens)
    token_embd = g.w("token_embd.weight")
    t = shape.n_tokens
    e = dims.n_embd
    embd = F32 * e * t
    v_gqa = dims.head_v * dims.n_head_kv

    # inputs, in the order the engine's graph reaches them (its leaf order)
    tokens = g.input("inp_tokens", I32 * t)
    g.input("inp_embd", embd)
    mixed_tokens = g.input("inp_mixed_tokens", I32 * t)
    mixed_slots = g.input("inp_mixed_slots", I64 * t)
    mixed_embd = g.input("inp_mixed_embd", embd)
    scale_rows = g.input("inp_scale_rows", F32 * t) if dims.architecture == "gemma3" else None
    heads = (dims.key_length, dims.head_v, dims.n_head_kv)
    attention = AttentionInputs(g, shape, v_gqa, head_dims=heads)

    # the embeddings: the token rows, and the mixed-batch branch the input select keeps (the
    # lookups into the token embedding, kept in system memory, run on the host)
    x = g.op("inp_embd_rows", "GET_ROWS", embd, token_embd, tokens, host=True)
    rows = g.op("mixed_rows", "GET_ROWS", embd, token_embd, mixed_tokens, host=True)
    mixed = g.op("mixed_embd", "DUP", embd, mixed_embd)
    g.write("mixed_set", "SET_ROWS", mixed, rows, mixed_slots, mixed)
    if scale_rows is not None:
        x = g.op("inp_scaled", "MUL", embd, x, scale_rows)

    blocks = dims.block_ids
    for il in blocks:
        g.layer = il
        windowed = il in dims.swa_layers
        cache = attention.cache(
            "_swa" if windowed else "", shape.n_kv_swa if windowed else shape.n_kv
        )
        out_ids = g.input("out_ids", I32 * shape.n_outputs) if il == blocks[-1] else None
        x = _layer(g, dims, shape, x, attention.position(), cache, out_ids, il)

    g.layer, g.rows = -1, shape.n_outputs
    rows_out = F32 * e * shape.n_outputs
    normed = _norm(g, x, rows_out, "result_norm", "output_norm.weight")
    normed.is_output = True
    logits = F32 * dims.vocab_size * shape.n_outputs
    g.op("result_output", "MUL_MAT", logits, g.w("output.weight"), normed, out=True)
    return g.leafs, g.nodes


NEXTN_BLOCK_ARCHITECTURES = frozenset({"glm4moe"})
"""Architectures whose MTP draft graph ``nextn_block_graph`` builds."""


def nextn_block_graph(dims: TrunkDims, shape: TrunkShape) -> tuple[list[Tensor], list[Tensor]]:
    """(leafs, nodes) of the MTP draft context's graph of GLM-4.5 (upstream's ``graph_mtp``):
    the token embedding and the target's hidden state normed, concatenated and projected, one
    decoder block with MoE like the trunk's, the head norm of every token (an output), then
    the LM head on the output rows."""
    g = GraphBuilder(layer=dims.n_layer, rows=shape.n_tokens)
    t = shape.n_tokens
    embd = F32 * dims.n_embd * t
    # inputs in the order the graph reaches them: Q's rotation, the tokens, the hidden state,
    # then the attention inputs; the output rows last
    k_rot = g.input("attn_inp_k_rot", F32 * shape.k_rot**2) if shape.k_rot else None
    tokens = g.input("tokens", I32 * t)
    hidden = g.input("mtp_h_input", embd)
    v_gqa = dims.head_v * dims.n_head_kv
    heads = (dims.key_length, dims.head_v, dims.n_head_kv)
    attention = AttentionInputs(g, dataclasses.replace(shape, k_rot=0), v_gqa, head_dims=heads)
    cache = attention.cache("", shape.n_kv)
    cache.k_rot = k_rot

    token_embd = g.w("token_embd.weight", -1)
    tok = g.op("mtp_tok_embd", "GET_ROWS", embd, token_embd, tokens, host=True)
    h_norm = _norm(g, hidden, embd, "mtp_hnorm", "nextn.hnorm.weight")
    e_norm = _norm(g, tok, embd, "mtp_enorm", "nextn.enorm.weight")
    concat = g.op("mtp_concat", "CONCAT", 2 * embd, e_norm, h_norm)
    eh_proj = g.op("mtp_eh_proj", "MUL_MAT", embd, g.w("nextn.eh_proj.weight"), concat)
    x = _layer(g, dims, shape, eh_proj, attention.position(), cache, None, dims.n_layer)
    h_nextn = _norm(g, x, embd, "h_nextn", "nextn.shared_head_norm.weight")
    h_nextn.is_output = True  # read back for the next draft step: never freed
    out_ids = g.input("out_ids", I32 * shape.n_outputs)
    rows = F32 * dims.n_embd * shape.n_outputs
    head = g.op("mtp_shared_head_norm", "GET_ROWS", rows, h_nextn, out_ids)
    g.rows = shape.n_outputs
    logits = F32 * dims.vocab_size * shape.n_outputs
    result = g.op("result_output", "MUL_MAT", logits, g.w("output.weight", -1), head, out=True)
    if shape.top_k:
        backend_top_k(g, result, dims.vocab_size, shape.n_outputs, shape.top_k)
    return g.leafs, g.nodes


def nextn_block_compute_bytes(
    model: ModelInfo, shape: TrunkShape, rules: BackendRules = CPU_RULES
) -> int:
    """The MTP draft context's buffer of a ``NEXTN_BLOCK_ARCHITECTURES`` model: the largest
    of its ubatch graph and its one-token graph, on the backend ``rules`` describe (with a
    backend sampler, reserved once without and once with it: the larger)."""
    dims = TrunkDims.of(model)
    shapes = {dataclasses.replace(shape, top_k=0), shape}
    return max(_nextn_block_bytes(dims, s, rules) for s in shapes)


@lru_cache(maxsize=256)
@stored("nextn_block", int)
def _nextn_block_bytes(dims: TrunkDims, shape: TrunkShape, rules: BackendRules) -> int:
    return largest_reservation(lambda s: nextn_block_graph(dims, s), shape, rules)


def kv_attention(
    g: GraphBuilder,
    cache: KvInputs,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out_bytes: int,
    n_head: int,
    shape: TrunkShape,
) -> Tensor:
    """build_attn from the cache writes on: K and V rows into the cache, then attention of
    ``q`` over its ``n_kv`` cells (flash attention, or scores, softmax in place and their
    product with the transposed V cache); the result before any rotation back."""
    t = shape.n_tokens
    # the block's own cache tensors (where they live is the block's placement)
    cache_k = g.cache("cache_k", cache.k.ne, cache.k.dtype)
    cache_v = g.cache("cache_v", cache.v.ne, cache.v.dtype)
    g.write(
        "cache_k_set", "SET_ROWS", cache_k, g.view("k_rows", k, k.nbytes), cache.k_idxs, cache_k
    )
    if shape.flash_attn:
        v_rows = g.view("v_rows", v, v.nbytes)
    else:  # the transposed V cache takes one element per row
        v_rows = g.view("v_elems", g.view("v_rows", v, v.nbytes, contiguous=True), v.nbytes)
    g.write("cache_v_set", "SET_ROWS", cache_v, v_rows, cache.v_idxs, cache_v)
    # the query split into streams and permuted (one view stands for both); the cache's
    # views, outside the compute buffer, are left out
    q_perm = g.view("q_perm", q, q.nbytes, ne=(q.nbytes // (F32 * t * n_head), t, n_head))
    k_perm, v_perm = cache_k, cache_v
    if shape.flash_attn:
        attn = g.op("fattn", "FLASH_ATTN_EXT", out_bytes, q_perm, k_perm, v_perm, cache.mask)
        return g.view("kqv_out", attn, out_bytes, contiguous=True)
    kq = g.op("kq", "MUL_MAT", F32 * cache.n_kv * t * n_head, k_perm, q_perm)
    kq = g.op("kq_soft_max", "SOFT_MAX", kq.nbytes, kq, cache.mask)
    kqv = g.op("kqv", "MUL_MAT", out_bytes, v_perm, kq)
    return g.op("kqv_out", "CONT", out_bytes, g.view("kqv_merged", kqv, out_bytes))


def _projection(
    g: GraphBuilder, x: Tensor, nbytes: int, bias: bool, name: str, role: str
) -> Tensor:
    """build_lora_mm of weight ``role`` (``attn_q``) plus an optional bias (added in place),
    reshaped to heads (a view)."""
    p = g.op(name, "MUL_MAT", nbytes, g.w(f"{role}.weight"), x)
    if bias:
        p = g.op(f"{name}_b", "ADD", nbytes, p, g.w(f"{role}.bias"))
    return g.view(f"{name}_3d", p, nbytes, contiguous=True)


def _layer(
    g: GraphBuilder,
    dims: TrunkDims,
    shape: TrunkShape,
    x: Tensor,
    pos: Tensor,
    cache: KvInputs,
    out_ids: Tensor | None,
    layer: int,
) -> Tensor:
    """One decoder block: attention and the feed-forward network, with their residuals."""
    t = shape.n_tokens
    e = dims.n_embd
    embd = F32 * e * t
    q_bytes = F32 * dims.key_length * dims.n_head * t
    k_bytes = F32 * dims.key_length * dims.n_head_kv * t
    v_bytes = F32 * dims.head_v * dims.n_head_kv * t
    qk_norm = dims.qk_norm
    gemma = dims.architecture == "gemma3"
    k_rot, v_rot = cache.k_rot, cache.v_rot

    attn_norm = _norm(g, x, embd, "attn_norm", "attn_norm.weight")
    # the engine adds Q's chain to the graph first, then V's, then K's (build_attn; with a
    # sliding-window cache, build_attn's iswa variant adds K's before V's)
    q = _projection(g, attn_norm, q_bytes, dims.q_bias, "Qcur", "attn_q")
    if qk_norm:
        q = _norm(g, q, q_bytes, "Qcur_normed", "attn_q_norm.weight")
    q = g.op("Qcur_rope", "ROPE", q_bytes, q, pos)
    if gemma:
        q = g.op("Qcur_scaled", "SCALE", q_bytes, q)
    q = _rotated(g, q, k_rot)

    def v_chain() -> Tensor:
        v = _projection(g, attn_norm, v_bytes, dims.v_bias, "Vcur", "attn_v")
        return _rotated(g, v, v_rot)

    v = None if dims.swa_layers else v_chain()
    k = _projection(g, attn_norm, k_bytes, dims.k_bias, "Kcur", "attn_k")
    if qk_norm:
        k = _norm(g, k, k_bytes, "Kcur_normed", "attn_k_norm.weight")
    k = _rotated(g, g.op("Kcur_rope", "ROPE", k_bytes, k, pos), k_rot)
    if v is None:
        v = v_chain()

    out_bytes = F32 * dims.head_v * dims.n_head * t
    attn = kv_attention(g, cache, q, k, v, out_bytes, dims.n_head, shape)
    attn = _rotated(g, attn, v_rot)
    cur = g.op("attn_out", "MUL_MAT", embd, g.w("attn_output.weight"), attn)
    if dims.o_bias:
        cur = g.op("attn_out_b", "ADD", embd, cur, g.w("attn_output.bias"))

    if out_ids is not None:  # the last layer keeps only the output rows
        t = g.rows = shape.n_outputs
        embd = F32 * e * t
        cur = g.op("attn_out_rows", "GET_ROWS", embd, cur, out_ids)
        x = g.op("inp_rows", "GET_ROWS", embd, x, out_ids)
    if gemma:
        cur = _norm(g, cur, embd, "attn_post_norm", "post_attention_norm.weight")
    ffn_inp = g.op("ffn_inp", "ADD", embd, cur, x)
    # GLM-4.5 calls its norm before the FFN post_attention_norm
    ffn_norm_weight = "post_attention_norm" if dims.architecture == "glm4moe" else "ffn_norm"
    ffn_norm = _norm(g, ffn_inp, embd, "ffn_norm", f"{ffn_norm_weight}.weight")
    if dims.is_moe and layer >= dims.n_dense_lead:
        ffn = _moe_ffn(
            g,
            dims,
            ffn_norm,
            t,
            biased=dims.experts_biased,
            normalized=dims.experts_normalized,
            scaled=dims.experts_scaled,
            gated_shared=False,
        )
    else:
        ffn = _swiglu_ffn(g, ffn_norm, dims.ffn_length, t, embd)
    if gemma:
        ffn = _norm(g, ffn, embd, "ffn_post_norm", "post_ffw_norm.weight")
    return g.op("l_out", "ADD", embd, ffn, ffn_inp)


def replayed_layers(n_layer: int, period: int, minimum: int) -> int:
    """How many layers a replay builds: at least ``minimum``, and as many modulo ``period`` as
    the model has, so the last layer keeps its kind (only the last layer trims its rows to the
    outputs). Layers repeat with ``period`` (their kinds and sizes); once the allocator has
    gone through a layer or two its free blocks repeat too, so further periods reach the same
    peak: the shortened replay is the whole graph's (checked count against count over random
    shapes in ``tests/memory/test_trunk_graph.py``: plain layers repeat from the third layer on,
    gemma3 from the seventh, the hybrids from the eighth), and the budget slider stays fast."""
    if n_layer <= minimum:
        return n_layer
    return minimum + (n_layer - minimum) % period


def trunk_replay_layers(dims: TrunkDims) -> int:
    """The layer count ``_trunk_bytes`` replays (see ``replayed_layers``); leading dense
    layers are all kept."""
    if dims.swa_layers:
        return replayed_layers(dims.n_layer, GEMMA3_SWA_PATTERN, 2 * GEMMA3_SWA_PATTERN)
    lead = dims.n_dense_lead
    return lead + replayed_layers(dims.n_layer - lead, 1, 4)


def trunk_compute_bytes(
    model: ModelInfo, shape: TrunkShape, rules: BackendRules = CPU_RULES
) -> int:
    """The trunk's compute buffer: the largest of its ubatch graph and its one-token graph
    (both reserved at load, ``llama_context::sched_reserve``), on the backend ``rules``
    describe."""
    return _trunk_bytes(TrunkDims.of(model), shape, rules)


@lru_cache(maxsize=512)
@stored("trunk", int)
def _trunk_bytes(dims: TrunkDims, shape: TrunkShape, rules: BackendRules) -> int:
    if rules.uniform_blocks:
        n = trunk_replay_layers(dims)
        swa = frozenset(i for i in dims.swa_layers if i < n)
        dims = dataclasses.replace(dims, n_layer=n, swa_layers=swa)
    else:  # blocks placed differently (some read from RAM): runs of alike blocks shortened
        period = GEMMA3_SWA_PATTERN if dims.swa_layers else 1
        lead = dims.n_dense_lead

        def kind(i: int) -> Hashable:
            return (i in dims.swa_layers, i < lead, rules.block_key(i))

        layers = compressed_layers(dims.n_layer, period, kind)
        dims = dataclasses.replace(dims, layers=layers)
    return largest_reservation(lambda s: trunk_graph(dims, s), shape, rules)


RUN_KEPT = 2
"""Periods of alike blocks a shortened replay keeps of each run (see ``compressed_layers``)."""


def compressed_layers(
    n_layer: int, period: int, kind: Callable[[int], Hashable], keep: int = RUN_KEPT
) -> tuple[int, ...]:
    """The blocks a replay builds when blocks are not all placed alike (some read weights or
    caches from RAM): the layers in periods of ``period`` (the pattern of block kinds), and of
    each run of periods whose blocks are of the same ``kind`` the first ``keep``; the last
    period is always kept (the last block trims its rows to the outputs). Once the allocator
    has gone through two alike periods its free blocks repeat, as for ``replayed_layers``:
    the shortened replay reaches the whole graph's peak (checked against whole replays over
    n-cpu-moe, fit and -ngl placements in ``tests/memory/test_cuda_schedule.py``)."""
    periods = [tuple(range(b, min(b + period, n_layer))) for b in range(0, n_layer, period)]
    kinds = [tuple(kind(i) for i in p) for p in periods]
    kept: list[int] = []
    run = 0
    for k, p in enumerate(periods):
        run = run + 1 if k and kinds[k] == kinds[k - 1] else 1
        if run <= keep or k == len(periods) - 1:
            kept += p
    return tuple(kept)


def largest_reservation(
    build: Callable[[TrunkShape], Graph], shape: TrunkShape, rules: BackendRules = CPU_RULES
) -> int:
    """The buffer of the ubatch graph and the one-token graph together (their largest).

    The one-token graph is replayed only when it could be the larger: a walk never reaches
    past the sum of the blocks it allocates, so when that sum is below the ubatch graph's
    buffer the second walk cannot change the answer (the budget slider skips it).
    """
    whole = reserved_bytes(*build(shape), rules=rules)
    single = shape.one_token()
    if single == shape:
        return whole
    leafs, nodes = build(single)
    # what a backend adds before its walk (the scheduler's copies) is bounded by the graph's
    # own tensors unless it copies weights or caches from RAM: then sum the prepared graph
    prepared = None if rules.copies_within(nodes) else rules.prepare(leafs, nodes)
    tensors = (*leafs, *nodes) if prepared is None else (*prepared.leafs, *prepared.nodes)
    ceiling = sum(
        rules.alloc_size(t) + MAX_ALIGNMENT for t in tensors if not t.external and t.view_of is None
    )
    if ceiling <= whole:
        return whole
    return max(whole, walk_bytes(prepared or rules.prepare(leafs, nodes), rules=rules))
