"""Byte counts of the engine's memory pieces: KV cache, recurrent state, outputs, compute."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from mtpstudio.core.memory.graph_alloc import CPU_RULES, AttentionShape, BackendRules
from mtpstudio.core.memory.hybrid_graph import (
    HYBRID_GRAPH_ARCHITECTURES,
    hybrid_compute_bytes,
)
from mtpstudio.core.memory.nextn_graph import nextn_compute_bytes
from mtpstudio.core.memory.trunk_graph import (
    NEXTN_BLOCK_ARCHITECTURES,
    TRUNK_GRAPH_ARCHITECTURES,
    TrunkShape,
    nextn_block_compute_bytes,
    sliding_window_layers,
    trunk_compute_bytes,
)
from mtpstudio.core.model.info import ModelInfo

# (block size, bytes per block) of the K/V cache types (ggml-common.h).
CACHE_TYPE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q6_0": (32, 26),
    "q5_1": (32, 24),
    "q5_0": (32, 22),
    "q4_1": (32, 20),
    "q4_0": (32, 18),
    "iq4_nl": (32, 18),
}
F32 = 4


def pad_to(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple``."""
    return -(-value // multiple) * multiple


def row_bytes(cache_type: str, n: int) -> int:
    """Bytes of one row of ``n`` elements of ``cache_type`` (ggml_row_size)."""
    block, size = CACHE_TYPE_BLOCKS[cache_type]
    return n // block * size


def kv_bytes_per_cell(model: ModelInfo, layers: int, type_k: str, type_v: str) -> int:
    """K plus V bytes for one context cell over ``layers`` attention layers."""
    k = row_bytes(type_k, model.key_length * model.n_head_kv)
    v = row_bytes(type_v, model.value_length * model.n_head_kv)
    return layers * (k + v)


def kv_cache_bytes(
    model: ModelInfo, layers: Collection[int], type_k: str, type_v: str, cells: int, swa: int
) -> int:
    """K plus V bytes of ``layers``: ``cells`` each, or ``swa`` on sliding-window layers."""
    windowed = sum(1 for i in layers if i in sliding_window_layers(model))
    full = len(layers) - windowed
    return kv_bytes_per_cell(model, 1, type_k, type_v) * (full * cells + windowed * swa)


def recurrent_state_parts(model: ModelInfo) -> tuple[int, int]:
    """Elements of one layer's recurrent state: the conv window and the delta-net state."""
    if not model.ssm_inner_size:
        return 0, 0
    conv = (model.ssm_conv_kernel - 1) * (
        model.ssm_inner_size + 2 * model.ssm_group_count * model.ssm_state_size
    )
    return conv, model.ssm_state_size * model.ssm_inner_size


def recurrent_row_bytes(model: ModelInfo) -> int:
    """Bytes of one recurrent-state row (conv + delta-net state) of one layer, F32."""
    conv, state = recurrent_state_parts(model)
    return F32 * (conv + state)


def recurrent_step_bytes(model: ModelInfo, steps: int) -> int:
    """ik_llama.cpp's per-step checkpoint of one recurrent layer for ``steps`` tokens (draft
    depth + 1): ``steps - 1`` delta-net states and ``steps`` conv windows, F32
    (``llama_kv_cache::per_step_alloc``, src/llama.cpp at 8337e4c)."""
    conv, state = recurrent_state_parts(model)
    return F32 * ((steps - 1) * state + steps * conv) if steps >= 1 else 0


def recurrent_shadow_bytes(model: ModelInfo) -> int:
    """ik_llama.cpp's conv-state shadow of one recurrent layer beside its per-step checkpoint
    (``checkpoint_alloc_shadows(true)``: one F32 conv window, logged as ``CPU shadow buffer``)."""
    conv, _state = recurrent_state_parts(model)
    return F32 * conv


@dataclass(frozen=True)
class ComputeShape:
    """What a worst-case graph reservation depends on."""

    n_tokens: int
    n_kv: int
    n_stream: int
    n_outputs: int
    flash_attn: bool
    quantized_k: bool = False
    quantized_v: bool = False
    n_seq: int = 1
    n_rs_seq: int = 0  # recurrent-state copies per sequence MTP keeps (its draft depth)
    type_k: str = "f16"  # the cache types, where a backend's attention rules need more than
    type_v: str = "f16"  # quantized or not (CUDA's F16 conversion copies)
    top_k: int = 0  # an MTP draft's backend top-k sampler (EngineMemoryFacts.draft_sampler_top_k)

    @property
    def quantized_kv(self) -> bool:
        return self.quantized_k or self.quantized_v


# Peak live floats per token, as (embedding, q, kv) for the attention block and (embedding,
# ffn width, recurrent width) for the FFN / delta-net block, per architecture family and flash
# attention. Measured on the CPU backend with llama-server -lv 4 over several model shapes
# (benchmarks/compute_buffer_sweep.py); the graph allocator reuses memory, so these are fitted
# counts of simultaneously live activations, not a structural derivation.
_ATTN = {
    ("dense", True): (5.0, 4.0, 0.0),
    ("dense", False): (3.0, 3.0, 2.0),
    ("moe", True): (0.0, 2.0, 10.0),
    ("moe", False): (0.0, 2.0, 10.0),
    ("hybrid", True): (0.0, 2.0, 10.0),
    ("hybrid", False): (0.0, 4.0, 8.0),
}
_FFN = {
    ("dense", True): (1.0, 3.5, 0.0),
    ("dense", False): (2.0, 3.5, 0.0),
    ("moe", True): (1.0, 4.0, 0.0),
    ("moe", False): (1.0, 4.0, 0.0),
    ("hybrid", True): (1.0, 3.0, 2.0),
    ("hybrid", False): (1.0, 3.0, 2.0),
}


# The MTP draft context runs only the nextn block (attention + MoE, no delta-net).
# Hybrid with flash attention refitted at full size (Qwen3.6 35B-A3B and 27B cards): the query
# with its output gate and the attention output (4 x q) plus two embedding-wide rows.
_MTP_ATTN = {
    ("hybrid", True): (2.0, 4.0, 0.0),
    ("hybrid", False): (0.0, 4.0, 6.0),
    ("moe", True): (0.0, 2.0, 8.0),
    ("moe", False): (0.0, 4.0, 6.0),
    ("dense", True): (5.0, 4.0, 0.0),
    ("dense", False): (3.0, 3.0, 2.0),
}
_QUANT_KV_EXTRA = {"dense": 8, "hybrid": 8, "moe": 0}


def hadamard_size(head_dim: int, *, largest: bool) -> int:
    """Side of upstream's Hadamard rotation for a quantized K or V cache (0: none).

    Upstream rotates Q/K (and V, and the attention output back) before a quantized cache when
    the head size is a multiple of 64: K uses the largest power-of-two multiple of 64 that
    divides the head size, V always 64 (llama-kv-cache.cpp). The matrix is an F32 graph input.
    """
    if head_dim <= 0 or head_dim % 64:
        return 0
    n = 64
    while largest and head_dim % (2 * n) == 0:
        n *= 2
    return n


def rotation_sides(model: ModelInfo, shape: ComputeShape) -> tuple[int, int]:
    """The sides of the K and V Hadamard rotations a quantized cache adds (0: none)."""
    k = hadamard_size(model.key_length, largest=True) if shape.quantized_k else 0
    v = hadamard_size(model.value_length, largest=False) if shape.quantized_v else 0
    return k, v


def model_family(model: ModelInfo) -> str:
    """``hybrid`` (recurrent + attention), ``moe`` or ``dense``."""
    if model.recurrent_layers:
        return "hybrid"
    return "moe" if model.is_moe else "dense"


def ffn_width(model: ModelInfo) -> int:
    """Feed-forward activations per token: routed experts used plus the shared expert."""
    if model.is_moe:
        experts = model.expert_ffn_length or _expert_width(model)
        return model.n_expert_used * experts + model.shared_expert_ffn_length
    return model.ffn_length


def _expert_width(model: ModelInfo) -> int:
    """The expert FFN width from the first layer's expert tensor (llama-style MoE files keep
    it in ``feed_forward_length``)."""
    up = next((t for t in model.tensors if t.name.endswith("ffn_up_exps.weight")), None)
    return up.shape[1] if up is not None and len(up.shape) > 1 else model.ffn_length


def recurrent_width(model: ModelInfo) -> int:
    """Delta-net conv channels per token (q, k and v of the gated DeltaNet)."""
    if not model.ssm_inner_size:
        return 0
    return 2 * model.ssm_state_size * model.ssm_group_count + model.ssm_inner_size


def moe_peak_floats(model: ModelInfo, *, mtp: bool = False) -> int:
    """Live floats per token at the routed-expert peak of a MoE layer (0 for dense models).

    The down projection's per-expert outputs and their router-weighted copy are both live
    (2 x n_embd x n_expert_used); the trunk graph also keeps the residual stream, the normed
    input and the shared-expert input (3 x n_embd), the MTP graph one expert width. Fitted on
    the full-size Qwen3.6-35B-A3B card at ubatch 256-2048 (benchmarks/fullsize_accuracy.py);
    on the small test models this term is never the largest.
    """
    if not model.is_moe:
        return 0
    experts = 2 * model.n_embd * model.n_expert_used
    return experts + (model.expert_ffn_length if mtp else 3 * model.n_embd)


NEXTN_GRAPH_ARCHITECTURES = frozenset({"qwen35", "qwen35moe"})
"""Architectures whose MTP draft graph (``nextn_graph``) is built tensor by tensor."""


def replays_nextn_graph(model: ModelInfo, shape: ComputeShape) -> bool:
    """True when the draft context's buffer is the replayed graph, not the fitted estimate.

    The replay covers upstream's Qwen3.5/3.6 nextn block with flash attention (one slot or
    several: the streams split the ubatch, the sizes add up the same) and GLM-4.5's with or
    without it.
    """
    if not model.has_mtp:
        return False
    if model.architecture in NEXTN_BLOCK_ARCHITECTURES:
        return True
    return model.architecture in NEXTN_GRAPH_ARCHITECTURES and shape.flash_attn


def replays_trunk_graph(model: ModelInfo) -> bool:
    """True when the trunk's compute buffer is the replayed graph (``trunk_graph``)."""
    return model.architecture in TRUNK_GRAPH_ARCHITECTURES


UNMODELLED_COMPUTE_MARGIN = 0.35
"""Safety term on a compute buffer mtpstudio cannot replay: the fitted estimate plus 35 %.

Against the replays (which match the engine's log allocation by allocation) the fitted
formula comes out at most 17.3 % low on the model widths of the accuracy table (llama,
qwen2, qwen3, qwen3moe, gemma3, glm4moe, qwen35, qwen35moe; ubatch 128-2048, ctx 4k-128k,
flash attention on and off, f16 and quantized caches: ``tests/memory/test_trunk_graph.py``); on
architectures it does not model, loaded by the real engine, at most 19.5 % low (phi3;
``benchmarks/arch_accuracy.py``).
35 % keeps at least 8 % above the worst of them."""


def replays_trunk(model: ModelInfo, shape: ComputeShape) -> bool:
    """True when upstream's trunk buffer for ``shape`` is replayed, not fitted."""
    return replays_trunk_graph(model) or replays_hybrid_graph(model, shape)


def unmodelled_reason(model: ModelInfo, shape: ComputeShape) -> str | None:
    """Why the trunk buffer is not replayed (``None`` when it is)."""
    if replays_trunk(model, shape):
        return None
    return f"mtpstudio does not model {model.architecture}'s compute graph"


def with_safety_margin(fitted: int) -> int:
    """A fitted compute buffer plus the safety term for graphs that are not replayed."""
    return int(fitted * (1 + UNMODELLED_COMPUTE_MARGIN))


def replays_hybrid_graph(model: ModelInfo, shape: ComputeShape) -> bool:
    """True when the hybrid trunk's buffer is replayed (``hybrid_graph``: Qwen3.5/3.6)."""
    return model.architecture in HYBRID_GRAPH_ARCHITECTURES and bool(model.recurrent_layers)


def swa_cells(model: ModelInfo, n_ctx_seq: int, n_ubatch: int) -> int:
    """Cells of the sliding-window cache (0 without one): the window plus a ubatch, padded
    to 256, at most the full cache (``llama_kv_cache_iswa``)."""
    if not sliding_window_layers(model):
        return 0
    return min(n_ctx_seq, pad_to(model.sliding_window + n_ubatch, 256))


def compute_bytes(
    model: ModelInfo,
    shape: ComputeShape,
    *,
    recurrent: bool = True,
    rules: BackendRules = CPU_RULES,
) -> int:
    """Estimate one context's compute buffer: the mask plus the largest activation peak.

    ``recurrent=False`` is the MTP draft context: it only runs the nextn layer (full attention
    + FFN, no delta-net), and its mask is live only during attention. For the Qwen3.5/3.6 nextn
    block the draft buffer is not estimated but replayed (``nextn_graph``). The logits are computed
    after the last FFN has been freed, so they are a peak of their own, not an addition.
    ``rules``: the backend the buffer is on; the replays follow them, and the fitted peaks take
    their attention node's extra bytes (CUDA's F16 copies of a converted K/V).
    """
    k_rot, v_rot = rotation_sides(model, shape)
    cache_types = (shape.type_k, shape.type_v)
    if not recurrent and replays_nextn_graph(model, shape):
        if model.architecture in NEXTN_BLOCK_ARCHITECTURES:
            return nextn_block_compute_bytes(
                model,
                TrunkShape(
                    pad_to(shape.n_tokens, shape.n_seq),
                    shape.n_outputs,
                    shape.n_kv,
                    flash_attn=shape.flash_attn,
                    k_rot=k_rot,
                    v_rot=v_rot,
                    n_seqs=shape.n_seq,
                    cache_types=cache_types,
                    top_k=shape.top_k,
                ),
                rules,
            )
        return nextn_compute_bytes(
            model,
            pad_to(shape.n_tokens, shape.n_seq),  # the reservation splits it evenly
            shape.n_kv,
            shape.n_outputs,
            k_rot=k_rot,
            v_rot=v_rot,
            n_seqs=shape.n_seq,
            rules=rules,
            cache_types=cache_types,
            layer=model.n_layer,
            top_k=shape.top_k,
        )
    if recurrent and replays_trunk(model, shape):
        graph = TrunkShape(
            pad_to(shape.n_tokens, shape.n_seq),  # the reservation splits it evenly
            shape.n_outputs,
            shape.n_kv,
            swa_cells(model, shape.n_kv, shape.n_tokens),
            shape.flash_attn,
            k_rot,
            v_rot,
            shape.n_rs_seq,
            shape.n_seq,
            cache_types,
        )
        if replays_trunk_graph(model):
            return trunk_compute_bytes(model, graph, rules)
        return hybrid_compute_bytes(model, graph, rules)
    # the rotation matrices are inputs, read by every attention layer: live all along
    rotation = F32 * (k_rot * k_rot + v_rot * v_rot)
    return rotation + _fitted_compute_bytes(model, shape, recurrent=recurrent, rules=rules)


def _fitted_compute_bytes(
    model: ModelInfo, shape: ComputeShape, *, recurrent: bool, rules: BackendRules = CPU_RULES
) -> int:
    """The fitted estimate: the mask plus the largest activation peak (see ``compute_bytes``)."""
    family = model_family(model)
    fa = shape.flash_attn
    t = shape.n_tokens
    q_dim = model.n_head * model.key_length
    kv_dim = model.n_head_kv * model.key_length
    # The reservation splits the ubatch over the streams, so the mask is n_kv x n_tokens.
    mask = shape.n_kv * t * (2 if fa else F32)
    mtp = not recurrent and model.has_mtp
    ae, aq, akv = (_MTP_ATTN if mtp else _ATTN)[(family, fa)]
    attn = F32 * t * (ae * model.n_embd + aq * q_dim + akv * kv_dim)
    if not fa:
        attn += shape.n_kv * t * model.n_head * F32
    fe, ff, fr = _FFN[(family, fa)]
    width_r = recurrent_width(model) if recurrent else 0
    ffn_floats = fe * model.n_embd + ff * ffn_width(model) + fr * width_r
    if mtp and family == "hybrid" and not model.is_moe:
        # the dense nextn block keeps the attention output alongside the FFN (Qwen3.6-27B)
        ffn_floats += 1.5 * q_dim
    ffn = F32 * t * max(ffn_floats, moe_peak_floats(model, mtp=mtp))
    if fa and shape.quantized_kv and recurrent:
        # a quantized K/V cache adds about 8 bytes per query element to the attention peak
        attn += _QUANT_KV_EXTRA[family] * t * q_dim
    if fa:
        operands = AttentionShape(
            model.key_length,
            model.value_length,
            t,
            model.n_head,
            model.n_head_kv,
            shape.n_kv,
            shape.type_k,
            shape.type_v,
        )
        attn += rules.attention_extra(operands, F32 * t * q_dim)
    logits = F32 * shape.n_outputs * model.vocab_size
    if mtp:
        return int(max(mask + attn, ffn, logits))
    return int(mask + max(attn, ffn, logits))


# ik_llama.cpp reserves its worst-case graph differently: logits for every token of the ubatch,
# an F32 mask without flash attention and F16 K/V copies (fitted the same way, CPU backend).
_IK_ATTN_FA = {"dense": (5.0, 3.0, 0.0), "moe": (0.0, 5.0, 0.0), "hybrid": (3.0, 4.0, 0.0)}
_IK_ATTN_PLAIN = {"dense": (2.0, 0.0, 0.0), "moe": (2.0, 0.0, 0.0), "hybrid": (2.0, 4.0, 0.0)}
_IK_FFN = {"dense": (2.0, 3.0, 0.0), "moe": (2.0, 2.0, 0.0), "hybrid": (2.0, 2.0, 1.0)}
# With quantized weights ik fuses the dense FFN and attention projections: smaller peaks.
_IK_DENSE_QUANTIZED_ATTN = (4.0, 0.0, 0.0)
_IK_DENSE_QUANTIZED_FFN = (2.0, 1.0, 0.0)


def mostly_quantized(model: ModelInfo) -> bool:
    """True when most weight bytes are block-quantized (not F32/F16/BF16)."""
    plain = sum(model.quant_mix.get(name, 0) for name in ("F32", "F16", "BF16"))
    return plain * 2 < model.tensor_bytes


def ik_all_outputs_bytes(model: ModelInfo, n_tokens: int) -> int:
    """What ik_llama.cpp's reservation keeps for a whole ubatch of outputs: every token's
    logits and embedding, F32 (its contexts reserve them all, the MTP context too)."""
    return F32 * n_tokens * (model.vocab_size + model.n_embd)


def compute_bytes_ik(model: ModelInfo, shape: ComputeShape) -> int:
    """Estimate ik_llama.cpp's compute buffer (its reservation keeps all ubatch logits)."""
    family = model_family(model)
    t = shape.n_tokens
    q_dim = model.n_head * model.key_length
    kv_dim = model.n_head_kv * model.key_length
    outputs = ik_all_outputs_bytes(model, t)
    fused = family == "dense" and mostly_quantized(model)
    fe, ff, fr = _IK_DENSE_QUANTIZED_FFN if fused else _IK_FFN[family]
    ffn = F32 * t * (fe * model.n_embd + ff * ffn_width(model) + fr * recurrent_width(model))
    if shape.flash_attn:
        ae, aq, akv = _IK_DENSE_QUANTIZED_ATTN if fused else _IK_ATTN_FA[family]
        mask = 2 * shape.n_kv * t
        attn = F32 * t * (ae * model.n_embd + aq * q_dim + akv * kv_dim)
    else:
        ae, aq, akv = _IK_ATTN_PLAIN[family]
        mask = F32 * shape.n_kv * t
        attn = F32 * t * (ae * model.n_embd + aq * q_dim + akv * kv_dim)
        attn += F32 * shape.n_kv * t * model.n_head + 2 * shape.n_kv * kv_dim
    return int(max(outputs, mask + max(attn, ffn)))


def output_buffer_bytes(model: ModelInfo, n_seq: int) -> int:
    """The host output buffer reserved at start: logits for ``n_seq`` outputs."""
    return F32 * model.vocab_size * max(1, n_seq)
