"""Write a demo card as a real GGUF header (metadata and tensor table, no tensor data)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_VERSION, GGMLQuantizationType, GGUFType, TokenType

from mtpstudio.core.catalog.spec import ModelCardSpec, card_tensors

CARD_KEY_PREFIX = "mtpstudio."
"""Extra keys that mark a file as a demo card: ``mtpstudio.demo_card`` = the card id."""

# Qwen3.5/3.6 special tokens, in id order from 248044 (<|endoftext|>) to 248069 (</think>);
# the ids of <|endoftext|>, <|im_start|>, <|im_end|>, <|vision_start|>, <|image_pad|>, <think>
# and </think> match the real tokenizer. True = special ("control"), False = user-defined.
_SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
_N_REGULAR = 248_044  # ids below <|endoftext|>: byte-level BPE tokens
_EOS = "<|im_end|>"
_PAD = "<|endoftext|>"

# An abridged ChatML template with a thinking prompt; the real Qwen3.6 template is longer.
_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values (byte-level BPE base tokens)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def synthetic_vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """A valid byte-level BPE vocabulary of ``n_vocab`` unique tokens, with merges.

    The layout follows Qwen3.5/3.6: regular tokens (256 byte tokens, then merged tokens,
    each the merge of an earlier token and a byte token), the special tokens from id 248044,
    then ``[PAD<id>]`` padding up to the embedding size. Token strings are synthetic.
    """
    n_regular = min(_N_REGULAR, n_vocab - len(_SPECIAL_TOKENS))
    alphabet = _byte_alphabet()
    tokens = list(alphabet)
    merges: list[str] = []
    frontier = list(alphabet)
    while len(tokens) < n_regular:
        grown: list[str] = []
        for left in frontier:
            for right in alphabet:
                if len(tokens) == n_regular:
                    break
                tokens.append(left + right)
                merges.append(f"{left} {right}")
                grown.append(left + right)
            if len(tokens) == n_regular:
                break
        frontier = grown
    types = [int(TokenType.NORMAL)] * len(tokens)
    for text, special in _SPECIAL_TOKENS:
        tokens.append(text)
        types.append(int(TokenType.CONTROL if special else TokenType.USER_DEFINED))
    while len(tokens) < n_vocab:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(int(TokenType.UNUSED))
    return tokens, types, merges


def _add_metadata(writer: GGUFWriter, spec: ModelCardSpec) -> None:
    writer.add_type(GGUFType.MODEL)
    writer.add_name(spec.name)
    writer.add_basename(spec.basename)
    writer.add_size_label(spec.size_label)
    writer.add_license(spec.license)
    writer.add_string(CARD_KEY_PREFIX + "demo_card", spec.card_id)
    writer.add_string(CARD_KEY_PREFIX + "published_source", spec.published_source)

    writer.add_block_count(spec.block_count)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    if spec.ffn_length:
        writer.add_feed_forward_length(spec.ffn_length)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_freq_base(spec.rope_freq_base)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    if spec.is_moe:
        writer.add_expert_count(spec.n_expert)
        writer.add_expert_used_count(spec.n_expert_used)
        writer.add_expert_feed_forward_length(spec.expert_ffn_length)
        writer.add_expert_shared_feed_forward_length(spec.shared_expert_ffn_length)
    writer.add_ssm_conv_kernel(spec.ssm_conv_kernel)
    writer.add_ssm_state_size(spec.ssm_state_size)
    writer.add_ssm_group_count(spec.ssm_group_count)
    writer.add_ssm_time_step_rank(spec.ssm_time_step_rank)
    writer.add_ssm_inner_size(spec.ssm_inner_size)
    writer.add_full_attention_interval(spec.full_attention_interval)
    writer.add_rope_dimension_count(spec.rope_dim)
    writer.add_rope_dimension_sections(list(spec.rope_sections))
    if spec.n_nextn_layer:
        writer.add_nextn_predict_layers(spec.n_nextn_layer)
    writer.add_file_type(spec.recipe.file_type)
    writer.add_quantization_version(GGML_QUANT_VERSION)


def _add_tokenizer(writer: GGUFWriter, spec: ModelCardSpec) -> None:
    tokens, types, merges = synthetic_vocab(spec.n_vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen35")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokens.index(_EOS))  # each special token's text is unique
    writer.add_pad_token_id(tokens.index(_PAD))
    writer.add_bos_token_id(tokens.index(_PAD))
    writer.add_add_bos_token(False)
    writer.add_chat_template(_CHAT_TEMPLATE)


def write_card_header(spec: ModelCardSpec, path: Path) -> None:
    """Write ``spec`` to ``path`` as a GGUF file that stops where tensor data would begin.

    The tensor table is complete (names, ggml shapes, types, offsets as if the data
    followed), so header-only readers see the real model; the file itself is a few MB.
    ``GGUFWriter.add_tensor_info`` takes numpy order and writes dims reversed, so each
    ggml ``ne`` is passed reversed.
    """
    logging.getLogger("gguf.gguf_writer").setLevel(logging.WARNING)
    writer = GGUFWriter(path=None, arch=spec.architecture)
    _add_metadata(writer, spec)
    _add_tokenizer(writer, spec)
    for tensor in card_tensors(spec):
        writer.add_tensor_info(
            tensor.name,
            tuple(reversed(tensor.ne)),
            np.dtype(np.float32),
            tensor.n_bytes,
            raw_dtype=_gguf_type(tensor.ggml_type),
        )
    write_header_only(writer, path)


def _gguf_type(ggml_type: int) -> GGMLQuantizationType:
    """gguf's enum member for ``ggml_type``; an ik_llama.cpp type gguf lacks goes through as
    its id (the writer only packs the number)."""
    try:
        return GGMLQuantizationType(ggml_type)
    except ValueError:
        return cast(GGMLQuantizationType, int(ggml_type))


def write_header_only(writer: GGUFWriter, path: Path) -> None:
    """Write ``writer``'s metadata and tensor table to ``path``, padded to where the tensor
    data would start, and close it."""
    try:
        writer.write_header_to_file(path)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        out = writer.fout[0]
        writer.write_padding(out, out.tell())  # the file ends exactly where data would start
    finally:
        writer.close()
