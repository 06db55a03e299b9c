"""Write GGUF files for the reader tests: real ones with gguf.GGUFWriter, broken ones by hand."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFEndian, GGUFValueType
from gguf.quants import quant_shape_to_byte_shape

VT = GGUFValueType
QT = GGMLQuantizationType


@dataclass(frozen=True)
class KV:
    """One metadata entry as GGUFWriter.add_key_value takes it."""

    key: str
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to put in the table; ``shape`` is in GGUF ``ne`` order (fastest first)."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType = QT.F32

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.qtype]
        return self.n_elements // block * size


def _tensor_data(spec: TensorSpec, rng: np.random.Generator) -> tuple[np.ndarray, QT | None]:
    np_shape = tuple(reversed(spec.shape))
    if spec.qtype == QT.F32:
        return rng.standard_normal(np_shape).astype(np.float32), None
    if spec.qtype == QT.F16:
        return rng.standard_normal(np_shape).astype(np.float16), None
    byte_shape = quant_shape_to_byte_shape(np_shape, spec.qtype)
    return rng.integers(0, 256, size=byte_shape, dtype=np.uint8), spec.qtype


def write_gguf(
    path: Path,
    arch: str = "llama",
    *,
    kv: Sequence[KV] = (),
    tensors: Sequence[TensorSpec] = (),
    with_data: bool = False,
    big_endian: bool = False,
    split_max_tensors: int = 0,
    version: int | None = None,
    alignment: int | None = None,
    seed: int = 0,
) -> list[Path]:
    """Writes a GGUF with GGUFWriter and returns the written file(s).

    Without ``with_data`` the file ends right after the tensor table (header only). With
    ``split_max_tensors`` the writer splits the model into ``X-0000i-of-0000N.gguf`` parts.
    ``version`` patches the version field afterwards (GGUFWriter always writes 3).
    """
    endian = GGUFEndian.BIG if big_endian else GGUFEndian.LITTLE
    writer = GGUFWriter(path, arch, endianess=endian, split_max_tensors=split_max_tensors)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for item in kv:
        writer.add_key_value(item.key, item.value, item.vtype, item.sub_type)
    rng = np.random.default_rng(seed)
    for spec in tensors:
        if with_data:
            data, raw = _tensor_data(spec, rng)
            writer.add_tensor(spec.name, data, raw_dtype=raw)
        else:
            writer.add_tensor_info(
                spec.name,
                tuple(reversed(spec.shape)),
                np.dtype(np.float32),
                spec.n_bytes,
                raw_dtype=spec.qtype,
            )
    paths = writer.format_shard_names(path) if tensors else [path]
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    if with_data:
        writer.write_tensors_to_file()
    else:
        writer.write_ti_data_to_file()
    writer.close()
    if version is not None:
        for p in paths:
            patch(p, 4, struct.pack(">I" if big_endian else "<I", version))
    return list(paths)


def patch(path: Path, offset: int, data: bytes) -> None:
    """Overwrites bytes of a file in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


# ------------------------------------------------------------------------------------------
# Raw encoding, independent of GGUFWriter, for malformed files with known byte offsets.

_FMT = {
    VT.UINT8: "B",
    VT.INT8: "b",
    VT.UINT16: "H",
    VT.INT16: "h",
    VT.UINT32: "I",
    VT.INT32: "i",
    VT.FLOAT32: "f",
    VT.BOOL: "?",
    VT.UINT64: "Q",
    VT.INT64: "q",
    VT.FLOAT64: "d",
}


def raw_string(text: str | bytes, *, length: int | None = None) -> bytes:
    """A GGUF string: u64 length then bytes (``length`` overrides the written length)."""
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data) if length is None else length) + data


def raw_value(vtype: int, value: Any, sub_type: int | None = None) -> bytes:
    """The encoding of a value without its type id. Arrays: ``value`` is a list; nested
    arrays are given as ``(inner_type, items)`` tuples."""
    if vtype in _FMT:
        return struct.pack("<" + _FMT[VT(vtype)], value)
    if vtype == VT.STRING:
        return raw_string(value)
    assert vtype == VT.ARRAY and sub_type is not None
    out = struct.pack("<IQ", sub_type, len(value))
    for item in value:
        if sub_type == VT.ARRAY:
            inner_type, inner_items = item
            out += raw_value(VT.ARRAY, inner_items, inner_type)
        else:
            out += raw_value(sub_type, item)
    return out


def raw_kv(key: str, vtype: int, value: Any, sub_type: int | None = None) -> bytes:
    """One metadata entry."""
    return raw_string(key) + struct.pack("<I", vtype) + raw_value(vtype, value, sub_type)


def raw_header(n_tensors: int, n_kv: int, *, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    """Magic, version and the two counts (24 bytes)."""
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def raw_tensor_info(name: str, shape: Sequence[int], ggml_type: int, offset: int) -> bytes:
    """One tensor-table entry; ``shape`` in ``ne`` order."""
    out = raw_string(name) + struct.pack("<I", len(shape))
    out += b"".join(struct.pack("<Q", d) for d in shape)
    return out + struct.pack("<IQ", ggml_type, offset)


# ------------------------------------------------------------------------------------------
# A qwen35moe-shaped header (Qwen3.6-35B-A3B layout, with an MTP layer), header only.


@dataclass(frozen=True)
class Qwen35MoeParams:
    """Hyperparameters of a qwen35moe header; the defaults are Qwen3.6-35B-A3B's."""

    n_trunk: int = 40
    n_nextn: int = 1
    n_embd: int = 2048
    n_head: int = 16
    n_head_kv: int = 2
    head_dim: int = 256
    n_expert: int = 256
    n_expert_used: int = 8
    n_ff_exp: int = 512
    n_ff_shexp: int = 512
    interval: int = 4
    ssm_conv: int = 4
    ssm_state: int = 128
    ssm_group: int = 16
    ssm_dt_rank: int = 32
    context_length: int = 262144
    vocab_size: int = 248320
    expert_type: GGMLQuantizationType = QT.IQ4_XS
    attn_type: GGMLQuantizationType = QT.Q8_0
    file_type: int = 30  # MOSTLY_IQ4_XS
    write_interval: bool = True
    recurrent_flags: tuple[bool, ...] | None = None
    tokens: tuple[str, ...] | None = None  # None: no tokenizer.ggml.tokens, vocab_size key

    @property
    def block_count(self) -> int:
        return self.n_trunk + self.n_nextn

    def is_recurrent(self, i: int) -> bool:
        if self.recurrent_flags is not None:
            return self.recurrent_flags[i]
        return (i + 1) % self.interval != 0


def qwen35moe_specs(p: Qwen35MoeParams) -> tuple[list[KV], list[TensorSpec]]:
    """Keys and tensor table (engines.md §7) of a qwen35moe model."""
    a = "qwen35moe"
    kv = [
        KV("general.name", "Qwen3.6-35B-A3B test", VT.STRING),
        KV("general.file_type", p.file_type, VT.UINT32),
        KV(f"{a}.block_count", p.block_count, VT.UINT32),
        KV(f"{a}.context_length", p.context_length, VT.UINT32),
        KV(f"{a}.embedding_length", p.n_embd, VT.UINT32),
        KV(f"{a}.attention.head_count", p.n_head, VT.UINT32),
        KV(f"{a}.attention.head_count_kv", p.n_head_kv, VT.UINT32),
        KV(f"{a}.attention.key_length", p.head_dim, VT.UINT32),
        KV(f"{a}.attention.value_length", p.head_dim, VT.UINT32),
        KV(f"{a}.attention.layer_norm_rms_epsilon", 1e-6, VT.FLOAT32),
        KV(f"{a}.expert_count", p.n_expert, VT.UINT32),
        KV(f"{a}.expert_used_count", p.n_expert_used, VT.UINT32),
        KV(f"{a}.expert_feed_forward_length", p.n_ff_exp, VT.UINT32),
        KV(f"{a}.expert_shared_feed_forward_length", p.n_ff_shexp, VT.UINT32),
        KV(f"{a}.rope.dimension_sections", [11, 11, 10, 0], VT.ARRAY, VT.INT32),
        KV(f"{a}.ssm.conv_kernel", p.ssm_conv, VT.UINT32),
        KV(f"{a}.ssm.inner_size", p.ssm_state * p.ssm_dt_rank, VT.UINT32),
        KV(f"{a}.ssm.state_size", p.ssm_state, VT.UINT32),
        KV(f"{a}.ssm.time_step_rank", p.ssm_dt_rank, VT.UINT32),
        KV(f"{a}.ssm.group_count", p.ssm_group, VT.UINT32),
        KV("tokenizer.ggml.model", "gpt2", VT.STRING),
        KV("tokenizer.ggml.pre", "qwen35", VT.STRING),
    ]
    if p.n_nextn:
        kv.append(KV(f"{a}.nextn_predict_layers", p.n_nextn, VT.UINT32))
    if p.write_interval:
        kv.append(KV(f"{a}.full_attention_interval", p.interval, VT.UINT32))
    if p.recurrent_flags is not None:
        kv.append(KV(f"{a}.attention.recurrent_layers", list(p.recurrent_flags), VT.ARRAY, VT.BOOL))
    if p.tokens is not None:
        kv.append(KV("tokenizer.ggml.tokens", list(p.tokens), VT.ARRAY, VT.STRING))
    else:
        kv.append(KV(f"{a}.vocab_size", p.vocab_size, VT.UINT32))

    e, f, fs, hd = p.n_embd, p.n_ff_exp, p.n_ff_shexp, p.head_dim
    d_state, n_group, dt_rank = p.ssm_state, p.ssm_group, p.ssm_dt_rank
    key_dim, value_dim = d_state * n_group, d_state * dt_rank
    conv_dim = 2 * key_dim + value_dim
    at, xt = p.attn_type, p.expert_type
    t = [
        TensorSpec("token_embd.weight", (e, p.vocab_size), QT.Q8_0),
        TensorSpec("output_norm.weight", (e,)),
        TensorSpec("output.weight", (e, p.vocab_size), QT.Q8_0),
    ]

    def moe(i: int) -> list[TensorSpec]:
        b = f"blk.{i}"
        return [
            TensorSpec(f"{b}.attn_norm.weight", (e,)),
            TensorSpec(f"{b}.post_attention_norm.weight", (e,)),
            TensorSpec(f"{b}.ffn_gate_inp.weight", (e, p.n_expert)),
            TensorSpec(f"{b}.ffn_up_exps.weight", (e, f, p.n_expert), xt),
            TensorSpec(f"{b}.ffn_gate_exps.weight", (e, f, p.n_expert), xt),
            TensorSpec(f"{b}.ffn_down_exps.weight", (f, e, p.n_expert), xt),
            TensorSpec(f"{b}.ffn_gate_inp_shexp.weight", (e,)),
            TensorSpec(f"{b}.ffn_gate_shexp.weight", (e, fs), at),
            TensorSpec(f"{b}.ffn_up_shexp.weight", (e, fs), at),
            TensorSpec(f"{b}.ffn_down_shexp.weight", (fs, e), at),
        ]

    def attention(i: int) -> list[TensorSpec]:
        b = f"blk.{i}"
        return [
            TensorSpec(f"{b}.attn_q.weight", (e, hd * p.n_head * 2), at),
            TensorSpec(f"{b}.attn_k.weight", (e, hd * p.n_head_kv), at),
            TensorSpec(f"{b}.attn_v.weight", (e, hd * p.n_head_kv), at),
            TensorSpec(f"{b}.attn_output.weight", (hd * p.n_head, e), at),
            TensorSpec(f"{b}.attn_q_norm.weight", (hd,)),
            TensorSpec(f"{b}.attn_k_norm.weight", (hd,)),
        ]

    for i in range(p.n_trunk):
        t += moe(i)
        if p.is_recurrent(i):
            b = f"blk.{i}"
            t += [
                TensorSpec(f"{b}.attn_qkv.weight", (e, conv_dim), at),
                TensorSpec(f"{b}.attn_gate.weight", (e, value_dim), at),
                TensorSpec(f"{b}.ssm_conv1d.weight", (p.ssm_conv, conv_dim)),
                TensorSpec(f"{b}.ssm_dt.bias", (dt_rank,)),
                TensorSpec(f"{b}.ssm_a", (dt_rank,)),
                TensorSpec(f"{b}.ssm_beta.weight", (e, dt_rank), at),
                TensorSpec(f"{b}.ssm_alpha.weight", (e, dt_rank), at),
                TensorSpec(f"{b}.ssm_norm.weight", (d_state,)),
                TensorSpec(f"{b}.ssm_out.weight", (value_dim, e), at),
            ]
        else:
            t += attention(i)
    for i in range(p.n_trunk, p.block_count):
        b = f"blk.{i}"
        t += moe(i) + attention(i)
        t += [
            TensorSpec(f"{b}.nextn.eh_proj.weight", (2 * e, e), at),
            TensorSpec(f"{b}.nextn.enorm.weight", (e,)),
            TensorSpec(f"{b}.nextn.hnorm.weight", (e,)),
        ]
    return kv, t


def write_qwen35moe(path: Path, p: Qwen35MoeParams | None = None, **kwargs: Any) -> list[Path]:
    """Writes a header-only qwen35moe GGUF; ``kwargs`` go to ``write_gguf``."""
    kv, tensors = qwen35moe_specs(p or Qwen35MoeParams())
    return write_gguf(path, "qwen35moe", kv=kv, tensors=tensors, **kwargs)
