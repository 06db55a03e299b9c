"""Zero-weight GGUFs of common architectures at realistic sizes, for the accuracy table.

``ArchSpec`` names an architecture (llama dense or MoE, qwen2, qwen3, qwen3moe, gemma3) and its
sizes; ``write_zero_arch`` writes its header (hyperparameters, a synthetic byte-level BPE
vocabulary, the tensor table the engine's loader asks for) followed by a hole as large as the
tensor data, so the file is sparse and every weight reads as zero (see ``zero_gguf``). The
Qwen3.5/3.6 hybrids come from the catalogue's card writer with other sizes (``hybrid_spec``).

Weights are IQ4_XS where a row allows it (F16 otherwise, F32 for norms and biases): a type the
CPU backend does not repack, so a load maps the file and allocates nothing for the weights.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import (
    GGML_QUANT_SIZES,
    GGML_QUANT_VERSION,
    ExpertGatingFuncType,
    GGMLQuantizationType,
)

from devkit.zero_gguf import write_zero_gguf
from mtpstudio.core.catalog.header import (
    synthetic_vocab,
    write_card_header,
    write_header_only,
)
from mtpstudio.core.catalog.qwen36 import QWEN36_27B_IQ4_XS, QWEN36_35B_A3B_IQ4_XS
from mtpstudio.core.catalog.spec import ModelCardSpec

Q = GGMLQuantizationType
_EOS = "<|im_end|>"
_PAD = "<|endoftext|>"


@dataclass(frozen=True)
class ArchSpec:
    """One generated model: an architecture and the sizes its GGUF header states.

    ``ffn_length`` is the dense FFN width (or, for a llama MoE, the expert width when
    ``expert_ffn_length`` is 0); ``shared_expert_ffn_length`` adds qwen2moe's gated shared
    expert; ``sliding_window`` makes gemma3 interleave five sliding-window layers with one
    global layer; ``qkv_bias`` adds qwen2's Q/K/V biases. ``phi3`` fuses Q/K/V into one
    projection and the FFN's gate and up into one. ``glm4moe`` (GLM-4.5) has ``dense_lead``
    dense layers first, sigmoid routing with a selection bias, scaled normalised weights and
    ``shared_experts`` ungated shared experts, and ``nextn`` MTP blocks after the trunk (a whole
    MoE block plus its ``nextn.*`` projection and norms, as GLM-4.5's converter writes them).
    """

    architecture: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    ffn_length: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    expert_ffn_length: int = 0
    shared_expert_ffn_length: int = 0
    dense_lead: int = 0
    shared_experts: int = 0
    sliding_window: int = 0
    qkv_bias: bool = False
    qk_norm: bool = False
    tied_output: bool = False
    context_length: int = 131072
    nextn: int = 0
    weight_type: str = "IQ4_XS"
    """The matrices' type where a row allows it (F16 otherwise)."""

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0


def _weight_type(name: str, ne: tuple[int, ...], wanted: str = "IQ4_XS") -> GGMLQuantizationType:
    if len(ne) < 2 or not name.endswith("weight") or "norm" in name or "gate_inp" in name:
        return Q.F32
    qtype = GGMLQuantizationType[wanted]
    return qtype if ne[0] % GGML_QUANT_SIZES[qtype][0] == 0 else Q.F16


def _tensor_shapes(spec: ArchSpec) -> list[tuple[str, tuple[int, ...]]]:
    """Names and ggml shapes of every tensor (src/models/<arch>.cpp, load_arch_tensors)."""
    e, hd, a = spec.n_embd, spec.head_dim, spec.architecture
    q, kv = hd * spec.n_head, hd * spec.n_head_kv
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (e, spec.n_vocab))]
    for il in range(spec.n_layer + spec.nextn):
        p = f"blk.{il}."
        if il >= spec.n_layer:  # an MTP block: its projection and norms, then a whole block
            shapes += [(p + "nextn.eh_proj.weight", (2 * e, e))]
            norms = ("enorm", "hnorm", "shared_head_norm")
            shapes += [(p + f"nextn.{n}.weight", (e,)) for n in norms]
        shapes += [(p + "attn_norm.weight", (e,))]
        if a == "phi3":
            shapes += [(p + "attn_qkv.weight", (e, q + 2 * kv))]
        else:
            shapes += [(p + "attn_q.weight", (e, q)), (p + "attn_k.weight", (e, kv))]
            shapes += [(p + "attn_v.weight", (e, kv))]
        shapes += [(p + "attn_output.weight", (q, e))]
        if spec.qkv_bias:
            shapes += [(p + "attn_q.bias", (q,)), (p + "attn_k.bias", (kv,))]
            shapes += [(p + "attn_v.bias", (kv,))]
        if spec.qk_norm or a == "gemma3":
            shapes += [(p + "attn_q_norm.weight", (hd,)), (p + "attn_k_norm.weight", (hd,))]
        if a == "gemma3":
            shapes += [(p + "post_attention_norm.weight", (e,))]
        if a == "glm4moe":  # its norm before the FFN
            shapes += [(p + "post_attention_norm.weight", (e,))]
        else:
            shapes += [(p + "ffn_norm.weight", (e,))]
        if spec.is_moe and a == "glm4moe" and il >= spec.dense_lead:
            ff, n = spec.expert_ffn_length, spec.n_expert
            sh = ff * spec.shared_experts
            shapes += [
                (p + "ffn_gate_inp.weight", (e, n)),
                (p + "exp_probs_b.bias", (n,)),
                (p + "ffn_gate_exps.weight", (e, ff, n)),
                (p + "ffn_down_exps.weight", (ff, e, n)),
                (p + "ffn_up_exps.weight", (e, ff, n)),
                (p + "ffn_gate_shexp.weight", (e, sh)),
                (p + "ffn_down_shexp.weight", (sh, e)),
                (p + "ffn_up_shexp.weight", (e, sh)),
            ]
        elif spec.is_moe and a != "glm4moe":
            ff = spec.expert_ffn_length or spec.ffn_length
            n = spec.n_expert
            shapes += [
                (p + "ffn_gate_inp.weight", (e, n)),
                (p + "ffn_gate_exps.weight", (e, ff, n)),
                (p + "ffn_down_exps.weight", (ff, e, n)),
                (p + "ffn_up_exps.weight", (e, ff, n)),
            ]
            if spec.shared_expert_ffn_length:
                sh = spec.shared_expert_ffn_length
                shapes += [
                    (p + "ffn_gate_inp_shexp.weight", (e,)),
                    (p + "ffn_gate_shexp.weight", (e, sh)),
                    (p + "ffn_down_shexp.weight", (sh, e)),
                    (p + "ffn_up_shexp.weight", (e, sh)),
                ]
        elif a == "phi3":
            ff = spec.ffn_length
            shapes += [(p + "ffn_down.weight", (ff, e)), (p + "ffn_up.weight", (e, 2 * ff))]
        else:
            ff = spec.ffn_length
            shapes += [
                (p + "ffn_gate.weight", (e, ff)),
                (p + "ffn_down.weight", (ff, e)),
                (p + "ffn_up.weight", (e, ff)),
            ]
        if a == "gemma3":
            shapes += [(p + "post_ffw_norm.weight", (e,))]
    shapes += [("output_norm.weight", (e,))]
    if not spec.tied_output:
        shapes += [("output.weight", (e, spec.n_vocab))]
    return shapes


def _add_metadata(w: GGUFWriter, spec: ArchSpec) -> None:
    w.add_name("zero-weight model")  # a name with "phi3" in it asks for a llama vocabulary
    w.add_block_count(spec.n_layer + spec.nextn)
    if spec.nextn:
        w.add_nextn_predict_layers(spec.nextn)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.ffn_length)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if spec.is_moe:
        w.add_expert_count(spec.n_expert)
        w.add_expert_used_count(spec.n_expert_used)
        if spec.expert_ffn_length:
            w.add_expert_feed_forward_length(spec.expert_ffn_length)
        if spec.shared_expert_ffn_length:
            w.add_expert_shared_feed_forward_length(spec.shared_expert_ffn_length)
    if spec.sliding_window:
        w.add_sliding_window(spec.sliding_window)
    if spec.architecture == "glm4moe":
        w.add_leading_dense_block_count(spec.dense_lead)
        w.add_expert_shared_count(spec.shared_experts)
        w.add_expert_weights_scale(2.5)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_file_type(30)  # mostly IQ4_XS
    w.add_quantization_version(GGML_QUANT_VERSION)


def _add_tokenizer(w: GGUFWriter, n_vocab: int) -> None:
    tokens, types, merges = synthetic_vocab(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index(_EOS))
    w.add_bos_token_id(tokens.index(_PAD))
    w.add_add_bos_token(False)


def write_arch_header(spec: ArchSpec, path: Path) -> None:
    """``spec``'s GGUF header: metadata and tensor table, ending where the data would start."""
    logging.getLogger("gguf.gguf_writer").setLevel(logging.WARNING)
    writer = GGUFWriter(path=None, arch=spec.architecture)
    _add_metadata(writer, spec)
    _add_tokenizer(writer, spec.n_vocab)
    for name, ne in _tensor_shapes(spec):
        qtype = _weight_type(name, ne, spec.weight_type)
        block, size = GGML_QUANT_SIZES[qtype]
        n_bytes = int(np.prod(ne)) // block * size
        writer.add_tensor_info(
            name, tuple(reversed(ne)), np.dtype(np.float32), n_bytes, raw_dtype=qtype
        )
    write_header_only(writer, path)


def hybrid_spec(base: str, **sizes: int) -> ModelCardSpec:
    """A Qwen3.5/3.6 hybrid with the 35B-A3B (``moe``) or 27B (``dense``) card's geometry and
    other sizes (``n_layer``, ``n_embd``, ``n_vocab``, ...)."""
    card = QWEN36_35B_A3B_IQ4_XS if base == "moe" else QWEN36_27B_IQ4_XS
    return dataclasses.replace(card, card_id=f"zero-{card.architecture}", **sizes)  # type: ignore[arg-type]


def write_zero_arch(spec: ArchSpec | ModelCardSpec, out: Path) -> Path:
    """A loadable zero-weight GGUF of ``spec`` at ``out`` (sparse: the data is a hole)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    header = out.with_name(f".{out.name}.header")
    try:
        if isinstance(spec, ModelCardSpec):
            write_card_header(spec, header)
        else:
            write_arch_header(spec, header)
        return write_zero_gguf(header, out)
    finally:
        if header.exists():
            os.unlink(header)
