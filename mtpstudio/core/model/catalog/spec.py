"""Model card specs: the architecture and quant recipe a demo GGUF header is built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtpstudio.core.model.ggml_types import TENSOR_TYPES, GGMLType

Q = GGMLType

# What llama-quantize falls back to when a row length is not a multiple of the block size
# (src/llama-quant.cpp, tensor_type_fallback).
_FALLBACK: dict[GGMLType, GGMLType] = {
    Q.IQ4_XS: Q.IQ4_NL,
    Q.Q4_K: Q.Q5_0,
    Q.Q5_K: Q.Q5_1,
    Q.Q6_K: Q.Q8_0,
}


@dataclass(frozen=True)
class QuantRecipe:
    """The ggml type of every tensor, following upstream ``llama-quantize`` for one ftype.

    The rules mirror ``llama_tensor_get_type`` in llama.cpp's src/llama-quant.cpp as it
    applies to Qwen3.5/3.6 hybrids quantized with an importance matrix (as published quants
    are): tensors quantize skips keep the converter's type (``unquantized``, F32 for norms,
    1-D tensors, the MoE router ``ffn_gate_inp`` and ``ssm_conv1d``); ``output.weight`` gets
    ``output``; ``attn_v`` and the DeltaNet's fused ``attn_qkv`` (an "attn_v-like" category)
    get ``attn_v_like`` when n_head / n_head_kv >= 4; everything else gets ``default``.
    """

    name: str
    file_type: int
    default: GGMLType
    token_embd: GGMLType
    output: GGMLType
    attn_v_like: GGMLType
    unquantized: GGMLType = Q.F32

    def type_for(self, name: str, ne: tuple[int, ...], n_gqa: int) -> GGMLType:
        """The type ``llama-quantize`` gives tensor ``name`` of ggml shape ``ne``."""
        skipped = (
            len(ne) < 2
            or not name.endswith("weight")
            or "_norm.weight" in name
            or "ffn_gate_inp.weight" in name
            or "ssm_conv1d" in name
        )
        if skipped:
            return self.unquantized
        if name == "output.weight":
            wanted = self.output
        elif name == "token_embd.weight":
            wanted = self.token_embd
        elif name.endswith(("attn_v.weight", "attn_qkv.weight")) and n_gqa >= 4:
            wanted = self.attn_v_like
        else:
            wanted = self.default
        block = TENSOR_TYPES[wanted][1]
        if ne[0] % block == 0:
            return wanted
        fallback = _FALLBACK.get(wanted, Q.F16)
        return fallback if ne[0] % TENSOR_TYPES[fallback][1] == 0 else Q.F16


# IQ4_XS as llama-quantize assigns it (LLAMA_FTYPE_MOSTLY_IQ4_XS = 30):
# * output.weight -> Q6_K: the "output" rule gives Q6_K to every ftype above the 2-3 bit IQ ones;
# * attn_v and attn_qkv -> Q5_K: "IQ4_NL/IQ4_XS && n_gqa() >= 4" (8 for 35B-A3B, 6 for 27B);
#   attn_qkv joined that category in llama.cpp commit 1dab5f5a44 (spring 2026), which made
#   Qwen3.6-27B IQ4_XS files grow from 14.7 to 15.1 GB;
# * token_embd, attn_q/k/output, attn_gate, ssm_out, ssm_alpha/beta, nextn.eh_proj, the dense
#   FFN and all expert tensors -> IQ4_XS (4.25 bpw); with an imatrix the first layers' ffn_down
#   are not bumped to Q5_K;
# * norms, ssm_a, ssm_dt, ssm_conv1d, ffn_gate_inp(_shexp) -> F32, as the converter stores them.
IQ4_XS_RECIPE = QuantRecipe(
    name="IQ4_XS",
    file_type=30,
    default=Q.IQ4_XS,
    token_embd=Q.IQ4_XS,
    output=Q.Q6_K,
    attn_v_like=Q.Q5_K,
)


def _k_recipe(name: str, file_type: int, default: Q, attn_v: Q, output: Q = Q.Q6_K) -> QuantRecipe:
    return QuantRecipe(name, file_type, default, default, output, attn_v)


QUANT_RECIPES: dict[str, QuantRecipe] = {
    "IQ4_XS": IQ4_XS_RECIPE,
    # the k-quant mixes as llama-quantize's ftype rules give them to the bulk of the tensors
    # (attn_v-like tensors one step up, output Q6_K; Q8_0 keeps Q8_0 everywhere); the finer
    # per-layer bumps of the _M mixes (some ffn_down one step up) are left out, so these files
    # come out a little smaller than the published ones
    "Q3_K_M": _k_recipe("Q3_K_M", 12, Q.Q3_K, Q.Q5_K),
    "IQ3_XXS": _k_recipe("IQ3_XXS", 23, Q.IQ3_XXS, Q.Q4_K, Q.Q5_K),
    "Q4_K_M": _k_recipe("Q4_K_M", 15, Q.Q4_K, Q.Q6_K),
    "Q5_K_M": _k_recipe("Q5_K_M", 17, Q.Q5_K, Q.Q6_K),
    "Q6_K": _k_recipe("Q6_K", 18, Q.Q6_K, Q.Q6_K),
    "Q8_0": _k_recipe("Q8_0", 7, Q.Q8_0, Q.Q8_0, Q.Q8_0),
}
"""The quant mixes a card can be built with (``ModelCardSpec.with_recipe``), by ftype name."""


@dataclass(frozen=True)
class CardTensor:
    """One tensor-table entry of a card: ``ne`` is in ggml order (fastest dimension first)."""

    name: str
    ne: tuple[int, ...]
    ggml_type: GGMLType

    @property
    def n_elements(self) -> int:
        n = 1
        for dim in self.ne:
            n *= dim
        return n

    @property
    def n_bytes(self) -> int:
        _, block, size = TENSOR_TYPES[self.ggml_type]
        return self.n_elements // block * size

    @property
    def layer(self) -> int | None:
        if not self.name.startswith("blk."):
            return None
        return int(self.name.split(".", 2)[1])


@dataclass(frozen=True)
class ModelCardSpec:
    """Everything a demo card's GGUF header says: hyperparameters, vocabulary, quant recipe.

    ``n_layer`` counts trunk layers; the GGUF ``block_count`` adds the MTP (nextn) layers, which
    follow the trunk. Every ``full_attention_interval``-th trunk layer is gated attention, the
    rest are Gated DeltaNet. The DeltaNet geometry follows the converter: state size = key head
    dim, group count = key heads, time-step rank = value heads, inner size = value heads x
    value head dim. ``published_size_bytes`` is the size of the published quant this card
    models, and ``published_covers_mtp`` says whether that file holds the MTP layer.
    """

    card_id: str
    title: str
    architecture: Literal["qwen35moe", "qwen35"]
    name: str
    basename: str
    size_label: str
    license: str
    n_vocab: int
    context_length: int
    n_embd: int
    n_layer: int
    n_nextn_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    full_attention_interval: int
    rope_dim: int
    rope_sections: tuple[int, int, int, int]
    rope_freq_base: float
    rms_eps: float
    ssm_conv_kernel: int
    ssm_state_size: int
    ssm_group_count: int
    ssm_time_step_rank: int
    recipe: QuantRecipe
    published_size_bytes: int
    published_covers_mtp: bool
    published_source: str
    ffn_length: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    expert_ffn_length: int = 0
    shared_expert_ffn_length: int = 0

    @property
    def block_count(self) -> int:
        return self.n_layer + self.n_nextn_layer

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    @property
    def ssm_inner_size(self) -> int:
        return self.ssm_state_size * self.ssm_time_step_rank

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv

    def is_recurrent(self, il: int) -> bool:
        """Whether trunk layer ``il`` is Gated DeltaNet (MTP layers never are)."""
        return il < self.n_layer and (il + 1) % self.full_attention_interval != 0

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.n_layer) if not self.is_recurrent(i))


def _layer_shapes(spec: ModelCardSpec, il: int) -> list[tuple[str, tuple[int, ...]]]:
    """Tensor names and ggml shapes of block ``il`` (src/models/qwen35{,moe}.cpp)."""
    e, hd = spec.n_embd, spec.head_dim
    p = f"blk.{il}."
    shapes: list[tuple[str, tuple[int, ...]]] = [
        (p + "attn_norm.weight", (e,)),
        (p + "post_attention_norm.weight", (e,)),
    ]
    if spec.is_recurrent(il):
        key_dim = spec.ssm_state_size * spec.ssm_group_count
        value_dim = spec.ssm_inner_size
        conv_dim = 2 * key_dim + value_dim
        shapes += [
            (p + "attn_qkv.weight", (e, conv_dim)),
            (p + "attn_gate.weight", (e, value_dim)),
            (p + "ssm_conv1d.weight", (spec.ssm_conv_kernel, conv_dim)),
            (p + "ssm_dt.bias", (spec.ssm_time_step_rank,)),
            (p + "ssm_a", (spec.ssm_time_step_rank,)),
            (p + "ssm_beta.weight", (e, spec.ssm_time_step_rank)),
            (p + "ssm_alpha.weight", (e, spec.ssm_time_step_rank)),
            (p + "ssm_norm.weight", (spec.ssm_state_size,)),
            (p + "ssm_out.weight", (value_dim, e)),
        ]
    else:
        shapes += [
            (p + "attn_q.weight", (e, hd * spec.n_head * 2)),  # query and its output gate
            (p + "attn_k.weight", (e, hd * spec.n_head_kv)),
            (p + "attn_v.weight", (e, hd * spec.n_head_kv)),
            (p + "attn_output.weight", (hd * spec.n_head, e)),
            (p + "attn_q_norm.weight", (hd,)),
            (p + "attn_k_norm.weight", (hd,)),
        ]
    if spec.is_moe:
        ff, sh, n_exp = spec.expert_ffn_length, spec.shared_expert_ffn_length, spec.n_expert
        shapes += [
            (p + "ffn_gate_inp.weight", (e, n_exp)),
            (p + "ffn_gate_exps.weight", (e, ff, n_exp)),
            (p + "ffn_up_exps.weight", (e, ff, n_exp)),
            (p + "ffn_down_exps.weight", (ff, e, n_exp)),
            (p + "ffn_gate_inp_shexp.weight", (e,)),
            (p + "ffn_gate_shexp.weight", (e, sh)),
            (p + "ffn_up_shexp.weight", (e, sh)),
            (p + "ffn_down_shexp.weight", (sh, e)),
        ]
    else:
        shapes += [
            (p + "ffn_gate.weight", (e, spec.ffn_length)),
            (p + "ffn_up.weight", (e, spec.ffn_length)),
            (p + "ffn_down.weight", (spec.ffn_length, e)),
        ]
    if il >= spec.n_layer:  # the MTP block: the converter maps mtp.fc/pre_fc_norm_*/norm here
        shapes += [
            (p + "nextn.eh_proj.weight", (2 * e, e)),
            (p + "nextn.enorm.weight", (e,)),
            (p + "nextn.hnorm.weight", (e,)),
            (p + "nextn.shared_head_norm.weight", (e,)),
        ]
    return shapes


def card_tensors(spec: ModelCardSpec) -> tuple[CardTensor, ...]:
    """The full tensor table of the card, in file order, with the recipe's types."""
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (spec.n_embd, spec.n_vocab))]
    for il in range(spec.block_count):
        shapes += _layer_shapes(spec, il)
    shapes += [
        ("output_norm.weight", (spec.n_embd,)),
        ("output.weight", (spec.n_embd, spec.n_vocab)),
    ]
    return tuple(
        CardTensor(name, ne, spec.recipe.type_for(name, ne, spec.n_gqa)) for name, ne in shapes
    )
