"""The trunk's worst-case graph of the Qwen3.5/3.6 hybrids (``qwen35``, ``qwen35moe``).

Every ``full_attention_interval``-th layer is gated full attention (a query with its output
gate, Q/K norms, multi-section RoPE); the others are gated delta-nets: the QKV projection runs
through a short causal convolution whose window starts with the stored conv state, the gated
delta-net op reads the stored recurrent state and writes the attention rows followed by one
final state per kept copy (with MTP, one per draft position), and the output is normed, gated
by a second projection and projected back. The FFN is routed experts plus a gated shared expert
(``qwen35moe``) or a dense SwiGLU (``qwen35``). With several slots the ubatch is split over
their sequences, each with its own states. The tensors follow upstream 11434's
``src/models/qwen35{,moe}.cpp`` and ``delta-net-base.cpp`` in the engine's order (checked
against its allocator traces, ``tests/fixtures/engine_logs``); ``graph_alloc`` replays them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import lru_cache

from mtpstudio.core.memory.graph_alloc import (
    CPU_RULES,
    F32,
    I32,
    I64,
    BackendRules,
    GraphBuilder,
    ModelDims,
    Tensor,
)
from mtpstudio.core.memory.nextn_graph import _moe_ffn, _norm, _rotated, _swiglu_ffn
from mtpstudio.core.memory.replay_store import stored
from mtpstudio.core.memory.trunk_graph import (
    AttentionInputs,
    KvInputs,
    TrunkShape,
    compressed_layers,
    kv_attention,
    largest_reservation,
    replayed_layers,
)
from mtpstudio.core.model.info import ModelInfo

HYBRID_GRAPH_ARCHITECTURES = frozenset({"qwen35", "qwen35moe"})


@dataclass(frozen=True)
class HybridDims:
    """The model sizes the hybrid trunk reads, and which layers are recurrent."""

    sizes: ModelDims
    n_layer: int
    recurrent_layers: frozenset[int]
    layers: tuple[int, ...] = ()
    """The blocks a replay builds (empty: all ``n_layer``; see ``compressed_layers``)."""

    @classmethod
    def of(cls, model: ModelInfo) -> HybridDims:
        return cls(ModelDims.of(model), model.n_layer, frozenset(model.recurrent_layers))


def hybrid_trunk_graph(dims: HybridDims, shape: TrunkShape) -> tuple[list[Tensor], list[Tensor]]:
    """(leafs, nodes) of the trunk's graph for one ubatch, in the engine's order."""
    m = dims.sizes
    g = GraphBuilder(rows=shape.n_tokens)
    token_embd = g.w("token_embd.weight")
    t = shape.n_tokens
    embd = F32 * m.n_embd * t

    # inputs, in the order the engine's graph reaches them (its leaf order): the attention
    # inputs with the first attention layer, the output rows after the last layer
    tokens = g.input("inp_tokens", I32 * t)
    g.input("inp_embd", embd)
    mixed_tokens = g.input("inp_mixed_tokens", I32 * t)
    mixed_slots = g.input("inp_mixed_slots", I64 * t)
    mixed_embd = g.input("inp_mixed_embd", embd)
    rs_copy = g.input("rs_s_copy", I32 * shape.n_seqs)
    heads = (m.key_length, m.key_length, m.n_head_kv)
    attention = AttentionInputs(g, shape, m.key_length * m.n_head_kv, 4, head_dims=heads)

    # the lookups into the token embedding (kept in system memory) run on the host
    x = g.op("model.input_embed", "GET_ROWS", embd, token_embd, tokens, host=True)
    rows = g.op("mixed_rows", "GET_ROWS", embd, token_embd, mixed_tokens, host=True)
    mixed = g.op("mixed_embd", "DUP", embd, mixed_embd)
    # one branch of the input select: the written rows keep `mixed` alive
    g.write("mixed_set", "SET_ROWS", mixed, rows, mixed_slots, mixed)

    for il in dims.layers or range(dims.n_layer):
        g.layer = il
        attn_norm = _norm(g, x, embd, "attn_norm", "attn_norm.weight")
        if il in dims.recurrent_layers:
            cur = _delta_net(g, m, shape, attn_norm, rs_copy)
        else:
            cache = attention.cache("", shape.n_kv)
            cur = _gated_attention(g, m, shape, attn_norm, attention.position(), cache)
        residual = g.op("attn_residual", "ADD", embd, cur, x)
        post = _norm(g, residual, embd, "attn_post_norm", "post_attention_norm.weight")
        ffn = _moe_ffn(g, m, post, t) if m.is_moe else _swiglu_ffn(g, post, m.ffn_length, t, embd)
        x = g.op("l_out", "ADD", embd, ffn, residual)

    # the post-norm hidden state of every token is an output (the MTP seed), then the rows
    # of the outputs go through the LM head
    g.layer = -1
    h = _norm(g, x, embd, "h_nextn", "output_norm.weight")
    h.is_output = True
    out_ids = g.input("out_ids", I32 * shape.n_outputs)
    rows_out = F32 * m.n_embd * shape.n_outputs
    head = g.op("result_norm", "GET_ROWS", rows_out, h, out_ids, out=True)
    g.rows = shape.n_outputs
    logits = F32 * m.vocab_size * shape.n_outputs
    g.op("result_output", "MUL_MAT", logits, g.w("output.weight"), head, out=True)
    return g.leafs, g.nodes


def _copy_to_cache(g: GraphBuilder, src: Tensor, cache: Tensor) -> None:
    """A CPY of ``src`` into a view of the recurrent cache (no memory here; the cache's view,
    outside the compute buffer, is left out)."""
    g.write("cache_copy", "CPY", cache, src)


def _delta_net(
    g: GraphBuilder, m: ModelDims, shape: TrunkShape, attn_norm: Tensor, rs_copy: Tensor
) -> Tensor:
    """build_layer_attn_linear: conv window, gated delta-net, gated norm, output projection."""
    t = shape.n_tokens
    seqs = shape.n_seqs
    conv_width = 2 * m.ssm_state_size * m.ssm_group_count + m.ssm_inner_size
    heads = m.ssm_inner_size // m.ssm_state_size
    state = F32 * m.ssm_state_size * m.ssm_inner_size * seqs  # one per sequence
    inner = F32 * m.ssm_inner_size * t
    cache_r = g.cache("cache_r")
    cache_s = g.cache("cache_s")

    # conv window: the stored conv states of the sequence, then this ubatch's QKV
    kept = F32 * (m.ssm_conv_kernel - 1) * conv_width * seqs
    conv_states = g.op("conv_states", "GET_ROWS", kept, cache_r, rs_copy)
    states_3d = g.view("conv_states_3d", conv_states, kept)
    _copy_to_cache(g, g.view("conv_states_saved", conv_states, kept), cache_r)
    qkv = g.op("qkv_mixed", "MUL_MAT", F32 * conv_width * t, g.w("attn_qkv.weight"), attn_norm)
    qkv_t = g.view("qkv_mixed_transposed", qkv, qkv.nbytes)
    window = F32 * conv_width * (t + (m.ssm_conv_kernel - 1) * seqs)
    conv_input = g.op("conv_input", "CONCAT", window, states_3d, qkv_t)
    for i in range(1 + shape.n_rs_seq):  # the conv state each kept copy starts from
        _copy_to_cache(g, g.view(f"conv_input_tail_{i}", conv_input, 0), cache_r)
    ssm_states = g.op("ssm_states", "GET_ROWS", state, cache_s, rs_copy)
    state_in = g.view("state_predelta", ssm_states, ssm_states.nbytes)
    _copy_to_cache(g, g.view("ssm_states_saved", ssm_states, ssm_states.nbytes), cache_s)

    conv_weight = g.w("ssm_conv1d.weight")
    conv_out = g.op("conv_output_raw", "SSM_CONV", F32 * conv_width * t, conv_input, conv_weight)
    conv_act = g.op("conv_output_silu", "UNARY", conv_out.nbytes, conv_out)
    qk = F32 * m.ssm_state_size * m.ssm_group_count * t
    q_norm = g.op("q_norm", "RMS_NORM", qk, g.view("q_conv", conv_act, qk))
    q = g.op("q_conv_predelta", "SCALE", qk, q_norm)
    k_norm = g.op("k_norm", "RMS_NORM", qk, g.view("k_conv", conv_act, qk))
    k = g.op("k_conv_predelta", "SCALE", qk, k_norm)
    v = g.view("v_conv_predelta", conv_act, inner)
    per_head = F32 * heads * t
    alpha_proj = g.op("alpha_proj", "MUL_MAT", per_head, g.w("ssm_alpha.weight"), attn_norm)
    alpha = g.view("alpha", alpha_proj, per_head)
    biased = g.op("alpha_biased", "ADD", per_head, alpha, g.w("ssm_dt.bias"))
    softplus = g.op("a_softplus", "UNARY", per_head, biased)
    gate = g.view("gate_3d", g.op("gate", "MUL", per_head, softplus, g.w("ssm_a")), per_head)
    beta_proj = g.op("beta_proj", "MUL_MAT", per_head, g.w("ssm_beta.weight"), attn_norm)
    beta_raw = g.view("beta", beta_proj, per_head)
    beta = g.op("beta_sigmoid", "UNARY", per_head, beta_raw)
    # the output: the attention rows, then the final state and one per draft position
    out = inner + state * (1 + shape.n_rs_seq)
    gdn = g.op("delta_net_out", "GATED_DELTA_NET", out, q, k, v, gate, beta, state_in)
    rows = g.view("attn_output", gdn, inner)
    _copy_to_cache(g, g.view("new_states", gdn, 0), cache_s)

    # gated norm: norm(rows) * silu(z), z projected from the block input only now
    normed = _norm(g, rows, inner, "ssm_norm", "ssm_norm.weight")
    z = g.view("z_4d", g.op("z", "MUL_MAT", inner, g.w("attn_gate.weight"), attn_norm), inner)
    gated = g.op("gated", "MUL", inner, normed, g.op("z_silu", "UNARY", inner, z))
    final = g.view("final_output", gated, inner)
    out_proj = g.op("linear_attn_out", "MUL_MAT", F32 * m.n_embd * t, g.w("ssm_out.weight"), final)
    return g.view("linear_attn_out_2d", out_proj, out_proj.nbytes)


def _gated_attention(
    g: GraphBuilder,
    m: ModelDims,
    shape: TrunkShape,
    attn_norm: Tensor,
    pos: Tensor,
    cache: KvInputs,
) -> Tensor:
    """build_layer_attn: the query with its output gate, Q/K norms, RoPE, attention, gate."""
    t = shape.n_tokens
    d = m.key_length
    q = F32 * d * m.n_head * t
    kv = F32 * d * m.n_head_kv * t
    q_full = g.op("Qcur_full", "MUL_MAT", 2 * q, g.w("attn_q.weight"), attn_norm)
    q_view = g.view("Qcur", q_full, q)
    q_cur = _norm(g, q_view, q, "Qcur_normed", "attn_q_norm.weight")
    q_rope = _rotated(g, g.op("Qcur_rope", "ROPE", q, q_cur, pos), cache.k_rot)
    v_proj = g.op("Vcur", "MUL_MAT", kv, g.w("attn_v.weight"), attn_norm)
    v_cur = _rotated(g, g.view("Vcur", v_proj, kv, contiguous=True), cache.v_rot)
    k_proj = g.op("Kcur", "MUL_MAT", kv, g.w("attn_k.weight"), attn_norm)
    k_raw = g.view("Kcur", k_proj, kv, contiguous=True)
    k_cur = _norm(g, k_raw, kv, "Kcur_normed", "attn_k_norm.weight")
    k_rope = _rotated(g, g.op("Kcur_rope", "ROPE", kv, k_cur, pos), cache.k_rot)
    attn = kv_attention(g, cache, q_rope, k_rope, v_cur, q, m.n_head, shape)
    pregate = _rotated(g, attn, cache.v_rot)  # a view with flash attention, else the CONT
    gate = g.op("gate_reshaped", "CONT", q, g.view("gate", q_full, q))
    gated = g.op("attn_gated", "MUL", q, pregate, g.op("gate_sigmoid", "UNARY", q, gate))
    return g.op("attn_output", "MUL_MAT", F32 * m.n_embd * t, g.w("attn_output.weight"), gated)


def hybrid_compute_bytes(
    model: ModelInfo, shape: TrunkShape, rules: BackendRules = CPU_RULES
) -> int:
    """The trunk's compute buffer: the largest of its ubatch graph and its one-token graph,
    on the backend ``rules`` describe."""
    return _hybrid_bytes(HybridDims.of(model), shape, rules)


@lru_cache(maxsize=512)
@stored("hybrid_trunk", int)
def _hybrid_bytes(dims: HybridDims, shape: TrunkShape, rules: BackendRules) -> int:
    period = _period(dims)
    if rules.uniform_blocks:
        n = replayed_layers(dims.n_layer, period, 2 * period)
        short = HybridDims(dims.sizes, n, frozenset(i for i in dims.recurrent_layers if i < n))
    else:  # blocks placed differently (some read from RAM): runs of alike blocks shortened

        def kind(i: int) -> Hashable:
            return (i in dims.recurrent_layers, rules.block_key(i))

        layers = compressed_layers(dims.n_layer, period, kind)
        short = HybridDims(dims.sizes, dims.n_layer, dims.recurrent_layers, layers)
    return largest_reservation(lambda s: _built_graph(short, s), shape, rules)


@lru_cache(maxsize=16)
def _built_graph(dims: HybridDims, shape: TrunkShape) -> tuple[list[Tensor], list[Tensor]]:
    """``hybrid_trunk_graph``, built once per shortened model and shape: a budget replays the
    same graph for the card's buffer and the host's, and the fit's layouts that keep the same
    blocks share it (the replays read a graph, never change it)."""
    return hybrid_trunk_graph(dims, shape)


def _period(dims: HybridDims) -> int:
    """The layer pattern's period (the attention interval), or the layer count if the
    pattern does not repeat."""
    rec = dims.recurrent_layers
    attn = [i for i in range(dims.n_layer) if i not in rec]
    period = attn[0] + 1 if attn else 1
    repeats = all((i in rec) == (i + period in rec) for i in range(dims.n_layer - period))
    return period if repeats else dims.n_layer
