"""The MTP draft context's worst-case graph (Qwen3.5/3.6 nextn block), tensor by tensor.

The draft context runs one decoder block on the target's hidden state: norms of the token
embedding and the hidden state, their projection, gated full attention with flash attention,
an MoE FFN with a gated shared expert (35B-A3B) or a dense SwiGLU FFN (27B), the head norm and
the LM head for the outputs. The tensors below follow upstream's ``graph_mtp`` for ``qwen35moe``
and ``qwen35`` in the order the engine builds them (the attention inputs are expanded first:
Q, V, K, then the K and V cache writes), with the sizes of a ``n_tokens`` ubatch against
``n_kv`` cache cells. ``graph_alloc.reserved_bytes`` turns it into the buffer the engine
reserves.
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
from mtpstudio.core.memory.replay_store import stored


def nextn_graph(
    model: GraphSizes,
    n_tokens: int,
    n_kv: int,
    n_outputs: int,
    *,
    k_rot: int = 0,
    v_rot: int = 0,
    cache_types: tuple[str, str] = ("f16", "f16"),
    layer: int = -1,
    top_k: int = 0,
) -> tuple[list[Tensor], list[Tensor]]:
    """(leafs, nodes) of the draft context's graph for one ``n_tokens`` ubatch.

    ``k_rot``/``v_rot``: the side of the Hadamard rotation a quantized K/V cache adds (0: none).
    ``cache_types``: the draft cache's K and V types (a backend's attention rules read them).
    The token embedding lookup reads weights kept in system memory: it is marked ``host``.
    ``layer``: the MTP block's index (its weights and cache are that block's); ``top_k``: the
    draft's backend sampler (``backend_sampling``), appended after the LM head (0: none).
    """
    g = GraphBuilder(layer=layer, rows=n_tokens)
    t = n_tokens
    d = model.key_length
    embd = F32 * model.n_embd * t
    q = F32 * d * model.n_head * t
    kv = F32 * d * model.n_head_kv * t
    type_k, type_v = cache_types
    cache_k = g.cache("cache_k", (d, n_kv, model.n_head_kv), type_k)
    cache_v = g.cache("cache_v", (d, n_kv, model.n_head_kv), type_v)

    # inputs, in the order the graph first reaches them (Q's rotation comes before Q)
    k_rot_in = g.input("attn_inp_k_rot", F32 * k_rot * k_rot) if k_rot else None
    tokens = g.input("tokens", I32 * t)
    hidden = g.input("mtp_h_input", embd)
    pos = g.input("inp_pos", I32 * 4 * t)
    v_rot_in = g.input("attn_inp_v_rot", F32 * v_rot * v_rot) if v_rot else None
    k_idxs = g.input("attn_inp_k_idxs", I64 * t)
    v_idxs = g.input("attn_inp_v_idxs", I64 * t)
    mask = g.input("attn_inp_kq_mask", F16 * n_kv * t)
    out_ids = g.input("out_ids", I32 * n_outputs)

    tok = g.op("mtp_tok_embd", "GET_ROWS", embd, g.w("token_embd.weight", -1), tokens, host=True)
    e_norm = _norm(g, tok, embd, "mtp_enorm", "nextn.enorm.weight")
    h_norm = _norm(g, hidden, embd, "mtp_hnorm", "nextn.hnorm.weight")
    concat = g.op("mtp_concat", "CONCAT", 2 * embd, e_norm, h_norm)
    eh_proj = g.op("mtp_eh_proj", "MUL_MAT", embd, g.w("nextn.eh_proj.weight"), concat)
    attn_norm = _norm(g, eh_proj, embd, "mtp_attn_norm", "attn_norm.weight")

    q_full = g.op("mtp_Qcur_full", "MUL_MAT", 2 * q, g.w("attn_q.weight"), attn_norm)
    q_view = g.view("Qcur", q_full, q)
    q_cur = _norm(g, q_view, q, "mtp_Qcur_normed", "attn_q_norm.weight")
    q_rope = _rotated(g, g.op("Qcur_rope", "ROPE", q, q_cur, pos), k_rot_in)
    v_proj = g.op("Vcur", "MUL_MAT", kv, g.w("attn_v.weight"), attn_norm)
    v_cur = _rotated(g, g.view("mtp_Vcur", v_proj, kv, contiguous=True), v_rot_in)
    k_proj = g.op("Kcur", "MUL_MAT", kv, g.w("attn_k.weight"), attn_norm)
    k_raw = g.view("Kcur", k_proj, kv, contiguous=True)
    k_cur = _norm(g, k_raw, kv, "mtp_Kcur_normed", "attn_k_norm.weight")
    k_rope = _rotated(g, g.op("Kcur_rope", "ROPE", kv, k_cur, pos), k_rot_in)
    g.write("cache_k_set", "SET_ROWS", cache_k, g.view("k_rows", k_rope, kv), k_idxs, cache_k)
    g.write("cache_v_set", "SET_ROWS", cache_v, g.view("v_rows", v_cur, kv), v_idxs, cache_v)
    k_view = g.view("k_view", cache_k, 0, ne=(d, n_kv, model.n_head_kv), dtype=type_k)
    v_view = g.view("v_view", cache_v, 0, ne=(d, n_kv, model.n_head_kv), dtype=type_v)
    q_perm = g.view("q_perm", q_rope, q, ne=(d, t, model.n_head))
    attn = g.op("attn", "FLASH_ATTN_EXT", q, q_perm, k_view, v_view, mask)
    attn_2d = g.view("kqv_out", attn, q, contiguous=True)
    pregate = g.view("mtp_attn_pregate", _rotated(g, attn_2d, v_rot_in), q, contiguous=True)
    gate = g.op("mtp_gate", "CONT", q, g.view("gate", q_full, q))
    gated = g.op("gated", "MUL", q, pregate, g.op("gate_sigmoid", "UNARY", q, gate))
    attn_out = g.op("mtp_attn_out", "MUL_MAT", embd, g.w("attn_output.weight"), gated)
    residual = g.op("mtp_attn_residual", "ADD", embd, attn_out, eh_proj)
    post = _norm(g, residual, embd, "mtp_attn_post_norm", "post_attention_norm.weight")

    ffn = _moe_ffn(g, model, post, t) if model.is_moe else _dense_ffn(g, model, post, t)
    post_ffn = g.op("mtp_post_ffn", "ADD", embd, ffn, residual)
    # the hidden state is read back for the next draft step: an output, never freed
    h_nextn = _norm(g, post_ffn, embd, "h_nextn", "nextn.shared_head_norm.weight")
    h_nextn.is_output = True
    rows = F32 * model.n_embd * n_outputs
    head = g.op("mtp_shared_head_norm", "GET_ROWS", rows, h_nextn, out_ids)
    g.rows = n_outputs
    logits = F32 * model.vocab_size * n_outputs
    result = g.op("result_output", "MUL_MAT", logits, g.w("output.weight", -1), head, out=True)
    if top_k:
        backend_top_k(g, result, model.vocab_size, n_outputs, top_k)
    return g.leafs, g.nodes


def backend_top_k(g: GraphBuilder, logits: Tensor, n_vocab: int, n_outputs: int, k: int) -> None:
    """``build_sampling`` with one top-k sampler (llama-graph.cpp): the logits padded by a dummy
    row, then per output row a view, the top-k ids and their logits (both outputs)."""
    padded = g.op("logits_padded", "PAD", F32 * n_vocab * (n_outputs + 1), logits)
    for row in range(n_outputs):
        seq = g.view(f"logits_seq_{row}", padded, F32 * n_vocab)
        flat = g.view("logits_1d", seq, F32 * n_vocab, op="RESHAPE")
        rows = g.view("logits_rows", flat, F32 * n_vocab, op="RESHAPE")
        ids = g.op("top_k", "TOP_K", I32 * k, flat, out=True)
        g.op("top_k_rows", "GET_ROWS", F32 * k, rows, ids, out=True)


def _norm(g: GraphBuilder, x: Tensor, nbytes: int, name: str, weight: str) -> Tensor:
    """build_norm with RMS and a weight: the norm, then the weight ``weight`` multiplied in."""
    return g.op(name, "MUL", nbytes, g.op("norm", "RMS_NORM", nbytes, x), g.w(weight))


def _rotated(g: GraphBuilder, x: Tensor, rotation: Tensor | None) -> Tensor:
    """llama_mul_mat_hadamard on a contiguous ``x``: reshape, multiply, reshape back."""
    if rotation is None:
        return x
    rows = g.view(f"{x.name}_rows", x, x.nbytes, contiguous=True)
    turned = g.op(f"{x.name}_rotated", "MUL_MAT", x.nbytes, rotation, rows)
    return g.view(f"{x.name}_rotated_4d", turned, x.nbytes, contiguous=True)


def _swiglu_ffn(
    g: GraphBuilder, x: Tensor, width: int, t: int, embd: int, suffix: str = ""
) -> Tensor:
    """gate and up projections, SwiGLU, down projection (build_ffn, SILU, parallel);
    ``suffix``: ``_shexp`` for a shared expert's weights."""
    act = F32 * width * t
    gate = g.op("ffn_gate", "MUL_MAT", act, g.w(f"ffn_gate{suffix}.weight"), x)
    up = g.op("ffn_up", "MUL_MAT", act, g.w(f"ffn_up{suffix}.weight"), x)
    swiglu = g.op("ffn_swiglu", "GLU", act, gate, up)
    return g.op("ffn_down", "MUL_MAT", embd, g.w(f"ffn_down{suffix}.weight"), swiglu)


def _dense_ffn(g: GraphBuilder, model: GraphSizes, x: Tensor, t: int) -> Tensor:
    return _swiglu_ffn(g, x, model.ffn_length, t, F32 * model.n_embd * t)


def _moe_ffn(
    g: GraphBuilder,
    model: GraphSizes,
    x: Tensor,
    t: int,
    *,
    biased: bool = False,
    normalized: bool = True,
    scaled: bool = False,
    gated_shared: bool = True,
) -> Tensor:
    """Routed experts (softmax or sigmoid gating, top-k weights) plus the shared expert.

    ``biased``: the experts are chosen on the probabilities plus a bias (``exp_probs_b``, a new
    tensor); ``normalized``: the top-k weights are divided by their sum; ``scaled``: then
    multiplied by ``expert_weights_scale``; ``gated_shared``: the shared expert's output is
    gated by its own sigmoid (Qwen3.5/3.6) instead of added as it is (GLM-4.5).
    """
    n_used = model.n_expert_used
    embd = F32 * model.n_embd * t
    router = F32 * model.n_expert * t
    logits = g.op("ffn_moe_logits", "MUL_MAT", router, g.w("ffn_gate_inp.weight"), x)
    probs = g.op("ffn_moe_probs", "SOFT_MAX", router, logits)  # or a sigmoid: in place too
    probs_rows = g.view("ffn_moe_probs_rows", probs, router, op="RESHAPE")
    selection = (
        g.op("ffn_moe_probs_biased", "ADD", router, probs, g.w("exp_probs_b.bias"))
        if biased
        else probs
    )
    argsort = g.op("ffn_moe_argsort", "ARGSORT", I32 * model.n_expert * t, selection)
    topk = g.view("ffn_moe_topk", argsort, I32 * n_used * t)
    weights = g.op("ffn_moe_weights", "GET_ROWS", F32 * n_used * t, probs_rows, topk)
    if normalized:
        weights_2d = g.view("ffn_moe_weights_2d", weights, F32 * n_used * t, op="RESHAPE")
        weights_sum = g.op("ffn_moe_weights_sum", "SUM_ROWS", F32 * t, weights_2d)
        clamped = g.op("ffn_moe_weights_sum_clamped", "CLAMP", F32 * t, weights_sum)
        norm = g.op("ffn_moe_weights_norm", "DIV", F32 * n_used * t, weights_2d, clamped)
        weights = g.view("ffn_moe_weights_norm_3d", norm, F32 * n_used * t, op="RESHAPE")
    if scaled:
        weights = g.op("ffn_moe_weights_scaled", "SCALE", F32 * n_used * t, weights)
    norm_3d = weights
    x_3d = g.view("ffn_moe_input", x, embd, op="RESHAPE")
    act = F32 * model.expert_ffn_length * n_used * t
    gate = g.op("ffn_moe_gate", "MUL_MAT_ID", act, g.w("ffn_gate_exps.weight"), x_3d, topk)
    up = g.op("ffn_moe_up", "MUL_MAT_ID", act, g.w("ffn_up_exps.weight"), x_3d, topk)
    swiglu = g.op("ffn_moe_swiglu", "GLU", act, gate, up)
    out = F32 * model.n_embd * n_used * t
    down = g.op("ffn_moe_down", "MUL_MAT_ID", out, g.w("ffn_down_exps.weight"), swiglu, topk)
    weighted = g.op("ffn_moe_weighted", "MUL", down.nbytes, down, norm_3d)
    # one row block per expert (views of `weighted`, all taken before the sums); the first sum
    # allocates, the next ones add in place into it and the last frees `weighted`: one view and
    # one sum stand for the blocks past the second (the same allocations, fewer nodes to walk)
    first = g.view("ffn_moe_expert_0", weighted, embd)
    if n_used == 1:  # a single expert's rows are copied out (ggml_cont)
        moe_out = g.op("ffn_moe_out", "CONT", embd, first)
    else:
        second = g.view("ffn_moe_expert_1", weighted, embd)
        rest = g.view("ffn_moe_experts_2_on", weighted, embd) if n_used > 2 else None
        moe_out = g.op("ffn_moe_sum", "ADD", embd, first, second)
        if rest is not None:
            moe_out = g.op("ffn_moe_sum", "ADD", embd, moe_out, rest)
    if not model.shared_expert_ffn_length:
        return moe_out
    shared = _swiglu_ffn(g, x, model.shared_expert_ffn_length, t, embd, "_shexp")
    if not gated_shared:
        return g.op("ffn_out", "ADD", embd, moe_out, shared)
    gate_logit = g.op("shexp_gate_inp", "MUL_MAT", F32 * t, g.w("ffn_gate_inp_shexp.weight"), x)
    shared_gate = g.op("shexp_gate", "UNARY", F32 * t, gate_logit)
    gated = g.op("mtp_ffn_shexp_gated", "MUL", embd, shared, shared_gate)
    return g.op("mtp_ffn_out", "ADD", embd, moe_out, gated)


def nextn_compute_bytes(
    model: GraphSizes,
    n_tokens: int,
    n_kv: int,
    n_outputs: int,
    *,
    k_rot: int = 0,
    v_rot: int = 0,
    n_seqs: int = 1,
    rules: BackendRules = CPU_RULES,
    cache_types: tuple[str, str] = ("f16", "f16"),
    layer: int = -1,
    top_k: int = 0,
) -> int:
    """The draft context's compute buffer: the largest of its ubatch graph and its graph of
    one token per sequence (``n_seqs`` slots split the ubatch; sizes add up the same), on the
    backend ``rules`` describe (``cache_types``: the draft cache's K and V types; ``layer``:
    the MTP block's index, where the rules look up its weights). With a backend sampler
    (``top_k``) the context is reserved again once it is set: the buffer is the larger."""
    dims = ModelDims.of(model)
    args = (dims, n_tokens, n_kv, n_outputs, k_rot, v_rot, n_seqs)
    return max(_nextn_bytes(*args, rules, cache_types, layer, k) for k in {0, top_k})


@lru_cache(maxsize=256)
@stored("nextn", int)
def _nextn_bytes(
    dims: ModelDims,
    n_tokens: int,
    n_kv: int,
    n_outputs: int,
    k_rot: int,
    v_rot: int,
    n_seqs: int,
    rules: BackendRules,
    cache_types: tuple[str, str],
    layer: int,
    top_k: int,
) -> int:
    return max(
        reserved_bytes(
            *nextn_graph(
                dims,
                n,
                n_kv,
                min(n_outputs, n),
                k_rot=k_rot,
                v_rot=v_rot,
                cache_types=cache_types,
                layer=layer,
                top_k=top_k,
            ),
            rules=rules,
        )
        for n in {n_tokens, n_seqs}
    )
