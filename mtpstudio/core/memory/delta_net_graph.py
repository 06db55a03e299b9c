"""The trunk's first gated delta-net block (Qwen3.5/3.6), tensor by tensor, as far as its output.

At a small ubatch the trunk's compute buffer peaks here, not in the FFN: the graph inputs, the
token embeddings (and the mixed-batch embeddings the input select keeps), the QKV projection,
the conv window and its output are all placed before the delta-net op, whose output holds the
attention rows and one recurrent state per kept copy (with MTP, one per draft position).
The state part does not shrink with the ubatch, so below about 256 tokens it decides the size.

The tensors follow upstream's ``qwen35``/``qwen35moe`` graph for layer 0 in the engine's order
(checked against its allocator trace, ``tests/fixtures/engine_logs``); ``graph_alloc`` replays
the allocation. Larger ubatches peak later (MoE/FFN), which the fitted terms in ``terms`` cover.
"""

from __future__ import annotations

from functools import lru_cache

from mtpstudio.core.memory.graph_alloc import (
    CPU_RULES,
    F16,
    F32,
    I32,
    I64,
    BackendRules,
    GraphBuilder,
    GraphSizes,
    ModelDims,
    Tensor,
    reserved_bytes,
)


def delta_net_prefix(
    model: GraphSizes,
    n_tokens: int,
    n_kv: int,
    n_outputs: int,
    *,
    n_rs_seq: int = 0,
    k_rot: int = 0,
    v_rot: int = 0,
    flash_attn: bool = True,
) -> tuple[list[Tensor], list[Tensor]]:
    """(leafs, nodes) from the graph inputs to layer 0's delta-net output, for one sequence
    (one slot; several slots split the ubatch over their streams, which is not modelled).

    ``n_rs_seq``: the extra recurrent-state copies per sequence MTP keeps (its draft depth).
    The mixed-batch inputs (token rows written into embedding rows, for the draft hook) are
    part of every default-context graph of these architectures, MTP or not.
    """
    g = GraphBuilder()
    w = g.weight
    t = n_tokens
    embd = F32 * model.n_embd * t
    conv_width = 2 * model.ssm_state_size * model.ssm_group_count + model.ssm_inner_size
    heads = model.ssm_inner_size // model.ssm_state_size
    state = F32 * model.ssm_state_size * model.ssm_inner_size
    cache_r = Tensor("cache_r", "NONE", 0, external=True)
    cache_s = Tensor("cache_s", "NONE", 0, external=True)

    # inputs, in the graph's leaf order (the Q rotation of the first attention layer is
    # reached before anything it depends on, the V rotation after the positions)
    if k_rot:
        g.input("attn_inp_k_rot", F32 * k_rot * k_rot)
    tokens = g.input("inp_tokens", I32 * t)
    g.input("inp_embd", embd)
    mixed_tokens = g.input("inp_mixed_tokens", I32 * t)
    mixed_slots = g.input("inp_mixed_slots", I64 * t)
    mixed_embd = g.input("inp_mixed_embd", embd)
    rs_copy = g.input("rs_s_copy", I32)
    rs_copy.is_output = True  # every recurrent layer reads it: alive past this block
    g.input("inp_pos", I32 * 4 * t)
    if v_rot:
        g.input("attn_inp_v_rot", F32 * v_rot * v_rot)
    g.input("attn_inp_k_idxs", I64 * t)
    g.input("attn_inp_v_idxs", I64 * t)
    g.input("attn_inp_kq_mask", (F16 if flash_attn else F32) * n_kv * t)
    g.input("out_ids", I32 * n_outputs)

    # the residual stream and the normed input stay alive through the whole block
    x = g.op("model.input_embed", "GET_ROWS", embd, w, tokens, out=True)
    rows = g.op("mixed_rows", "GET_ROWS", embd, w, mixed_tokens)
    mixed = g.op("mixed_embd", "DUP", embd, mixed_embd)
    # one branch of the input select: the written rows keep `mixed` alive
    g.write("mixed_set", "SET_ROWS", mixed, rows, mixed_slots, mixed)
    normed = g.op("norm", "RMS_NORM", embd, x)
    attn_norm = g.op("attn_norm", "MUL", embd, normed, w, out=True)

    # conv window: the stored conv states of the sequence, then this ubatch's QKV
    kept = F32 * (model.ssm_conv_kernel - 1) * conv_width
    conv_states = g.op("conv_states", "GET_ROWS", kept, cache_r, rs_copy)
    states_view = g.view("conv_states_view", conv_states, kept)
    _copy_to_cache(g, g.view("conv_states_saved", conv_states, kept), cache_r)
    qkv = g.op("qkv_mixed", "MUL_MAT", F32 * conv_width * t, w, attn_norm)
    qkv_t = g.view("qkv_mixed_transposed", g.view("qkv_mixed_3d", qkv, qkv.nbytes), qkv.nbytes)
    window = F32 * conv_width * (t + model.ssm_conv_kernel - 1)
    states_3d = g.view("conv_states_3d", states_view, kept)
    conv_input = g.op("conv_input", "CONCAT", window, states_3d, qkv_t)
    for i in range(1 + n_rs_seq):  # the conv state each kept copy starts from
        _copy_to_cache(g, g.view(f"conv_input_tail_{i}", conv_input, 0), cache_r)
    ssm_states = g.op("ssm_states", "GET_ROWS", state, cache_s, rs_copy)
    state_in = g.view("ssm_states_view", ssm_states, ssm_states.nbytes)
    _copy_to_cache(g, g.view("ssm_states_saved", ssm_states, ssm_states.nbytes), cache_s)

    conv_out = g.op("conv_output_raw", "SSM_CONV", F32 * conv_width * t, conv_input, w)
    conv_act = g.op("conv_output_silu", "UNARY", conv_out.nbytes, conv_out)
    qk = F32 * model.ssm_state_size * model.ssm_group_count * t
    q_norm = g.op("q_norm", "RMS_NORM", qk, g.view("q_conv", conv_act, qk))
    q = g.op("q_conv_predelta", "SCALE", qk, q_norm)
    k_norm = g.op("k_norm", "RMS_NORM", qk, g.view("k_conv", conv_act, qk))
    k = g.op("k_conv_predelta", "SCALE", qk, k_norm)
    v = g.view("v_conv_predelta", conv_act, F32 * model.ssm_inner_size * t)
    per_head = F32 * heads * t
    alpha = g.view("alpha", g.op("alpha_proj", "MUL_MAT", per_head, w, attn_norm), per_head)
    biased = g.op("alpha_biased", "ADD", per_head, alpha, w)
    softplus = g.op("a_softplus", "UNARY", per_head, biased)
    gate = g.view("gate_3d", g.op("gate", "MUL", per_head, softplus, w), per_head)
    beta_raw = g.view("beta", g.op("beta_proj", "MUL_MAT", per_head, w, attn_norm), per_head)
    beta = g.op("beta_sigmoid", "UNARY", per_head, beta_raw)
    state_view = g.view("state_predelta", state_in, 0)
    # the output: the attention rows, then the final state and one per draft position
    out = F32 * model.ssm_inner_size * t + state * (1 + n_rs_seq)
    g.op("delta_net_out", "GATED_DELTA_NET", out, q, k, v, gate, beta, state_view)
    return g.leafs, g.nodes


def _copy_to_cache(g: GraphBuilder, src: Tensor, cache: Tensor) -> None:
    """A CPY of ``src`` into a view of the recurrent cache (no memory here)."""
    g.write("cache_copy", "CPY", cache, src, g.view("cache_view", cache, 0))


def delta_net_peak_bytes(
    model: GraphSizes,
    n_tokens: int,
    n_kv: int,
    n_outputs: int,
    *,
    n_rs_seq: int = 0,
    k_rot: int = 0,
    v_rot: int = 0,
    flash_attn: bool = True,
    rules: BackendRules = CPU_RULES,
) -> int:
    """The buffer the trunk needs up to layer 0's delta-net output (0 without recurrent layers),
    on the backend ``rules`` describe. Its ops are the same on every backend (no attention, no
    MoE); the input lookups are not marked ``host``, so on CUDA only the alignment differs."""
    if not model.ssm_inner_size or not model.ssm_state_size:
        return 0
    dims = ModelDims.of(model)
    args = (dims, n_tokens, n_kv, n_outputs, n_rs_seq, k_rot, v_rot, flash_attn)
    return _prefix_bytes(*args, rules)


@lru_cache(maxsize=256)
def _prefix_bytes(
    dims: ModelDims,
    n_tokens: int,
    n_kv: int,
    n_outputs: int,
    n_rs_seq: int,
    k_rot: int,
    v_rot: int,
    flash_attn: bool,
    rules: BackendRules,
) -> int:
    graph = delta_net_prefix(
        dims,
        n_tokens,
        n_kv,
        n_outputs,
        n_rs_seq=n_rs_seq,
        k_rot=k_rot,
        v_rot=v_rot,
        flash_attn=flash_attn,
    )
    return reserved_bytes(*graph, rules=rules)
