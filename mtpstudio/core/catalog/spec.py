"""Model card specs: the architecture and quant recipe a demo GGUF header is built from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from mtpstudio.core.catalog.quant_rules import QuantHparams, quantized_types
from mtpstudio.core.model.ggml_types import GGMLType, tensor_bytes

Q = GGMLType


@dataclass(frozen=True)
class QuantMix:
    """One quant type of a card, every tensor typed as the pinned ``llama-quantize`` types it
    (``quant_rules``: upstream b11434's rules, or ik_llama.cpp 8337e4c's for its own types).

    Attributes:
        name: the ftype as the tool's command line names it (``Q4_K_M``, ``IQ4_XS``, ``IQ4_KS``).
        engine: whose ``llama-quantize`` makes it (``ik``: only ik_llama.cpp loads the file).
        imatrix: quantized with an importance matrix, as published quants are (it changes a few
            rules: the first layers' ``ffn_down`` of IQ4_XS, say).
    """

    name: str
    engine: Literal["upstream", "ik"] = "upstream"
    imatrix: bool = True

    @property
    def file_type(self) -> int:
        """The ``general.file_type`` the tool writes (``llama_ftype``)."""
        from mtpstudio.core.catalog.quant_rules import ftype_id

        return ftype_id(self.name, self.engine)

    @property
    def slug(self) -> str:
        """The mix in a card id: ``q4_k_m``."""
        return self.name.lower()

    @property
    def loader_note(self) -> str:
        """Which engine alone loads the file, in words (empty: every engine does)."""
        from mtpstudio.core.catalog.quant_rules import IK

        return "ik_llama.cpp only" if self.engine == IK else ""


UPSTREAM_QUANTS: tuple[str, ...] = (
    "Q2_K",
    "Q2_K_S",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_0",
    "Q4_1",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_0",
    "Q5_1",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "IQ1_S",
    "IQ1_M",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ2_M",
    "IQ3_XXS",
    "IQ3_XS",
    "IQ3_S",
    "IQ3_M",
    "IQ4_NL",
    "IQ4_XS",
)
"""The standard quant types a card is made at (every ftype of upstream's ``llama-quantize``
below 16 bits, but the ternary and MXFP4 ones)."""

IK_QUANTS: tuple[str, ...] = ("IQ4_KS", "IQ4_K")
"""ik_llama.cpp's own 4-bit types people publish (ubergarm's and others' quants)."""

QUANT_MIXES: dict[str, QuantMix] = {
    **{name: QuantMix(name) for name in UPSTREAM_QUANTS},
    **{name: QuantMix(name, engine="ik") for name in IK_QUANTS},
    "BF16": QuantMix("BF16"),
}
"""Every quant mix a card can be built with (``ModelCardSpec.with_quant``), by ftype name."""

IQ4_XS_MIX = QUANT_MIXES["IQ4_XS"]


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
        return tensor_bytes(self.ggml_type, self.ne)

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
    recipe: QuantMix
    published_size_bytes: int | None
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
    def model_id(self) -> str:
        """The card id without its quant: ``qwen3.6-35b-a3b``."""
        return self.card_id.removesuffix(f"-{self.recipe.slug}")

    def with_quant(self, quant: str, published: PublishedFile | None = None) -> ModelCardSpec:
        """This model at another quant mix (a key of ``QUANT_MIXES``), with the published file
        of that quant where one is known."""
        mix = QUANT_MIXES[quant]
        kind = "ik_llama.cpp " if mix.loader_note else ""
        return replace(
            self,
            card_id=f"{self.model_id}-{mix.slug}",
            title=f"{self.basename}-{self.size_label} {quant} ({kind}demo card)",
            recipe=mix,
            published_size_bytes=None if published is None else published.size_bytes,
            published_covers_mtp=published is not None and published.covers_mtp,
            published_source="" if published is None else published.source,
        )

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
    mix = spec.recipe
    types = quantized_types(
        [(name, ne, Q.F32) for name, ne in shapes],  # the converter's types for what stays
        mix.name,
        QuantHparams(
            arch=spec.architecture,
            n_head=spec.n_head,
            n_head_kv=spec.n_head_kv,
            n_expert=spec.n_expert,
            n_layer_all=spec.block_count,
        ),
        imatrix=mix.imatrix,
        engine=mix.engine,
    )
    return tuple(CardTensor(name, ne, types[name]) for name, ne in shapes)


@dataclass(frozen=True)
class PublishedFile:
    """A published GGUF file of a card's model and quant: its size and where it is from."""

    size_bytes: int
    covers_mtp: bool
    source: str
