"""A model repository's GGUF files, made in milliseconds: every quant of a catalogue card.

Writing a card header with GGUFWriter takes seconds (its 248k-token vocabulary); a repository
of ten quants is made instead from one cached card header: its metadata bytes are copied with
the file type (and, without MTP, the layer counts) patched, and the tensor table is written
for the other quant recipe. Files are zero-weight and sparse (real size, a few MB on disk);
split models follow llama.cpp's gguf-split layout (all metadata in part 1, ``split.*`` keys in
every part, each part's tensor data after its own header).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from devkit.hub_server import HostedFile, HostedRepo
from mtpstudio.core.catalog.models import model_card_path
from mtpstudio.core.catalog.spec import (
    QUANT_MIXES,
    CardTensor,
    ModelCardSpec,
    QuantMix,
    card_tensors,
)
from mtpstudio.core.model.ggml_types import GGMLType as Q
from mtpstudio.core.model.ggml_types import GGUFValueType
from mtpstudio.core.model.gguf import read_gguf

__all__ = [
    "QWEN_QUANTS",
    "RECIPES",
    "QuantFile",
    "not_gguf_bytes",
    "projector_bytes",
    "quant_repo",
    "write_quant",
]

# The quants a repository holds, each typed as the pinned llama-quantize types it (spec.QuantMix).
RECIPES: dict[str, QuantMix] = {
    name: QUANT_MIXES[name]
    for name in ("Q2_K", "Q3_K_M", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16")
}

_MAGIC_VERSION = b"GGUF" + struct.pack("<I", 3)


@dataclass(frozen=True)
class QuantFile:
    """One model written: its files in order and their full sizes."""

    paths: tuple[Path, ...]

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.paths)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, vtype: GGUFValueType, fmt: str, value: int) -> bytes:
    return _string(key) + struct.pack("<I", vtype) + struct.pack("<" + fmt, value)


def _patch_u32(kv: bytearray, key: str, value: int) -> None:
    needle = _string(key) + struct.pack("<I", GGUFValueType.UINT32)
    at = kv.find(needle)
    if at < 0:
        raise ValueError(f"the card header has no u32 key {key}")
    struct.pack_into("<I", kv, at + len(needle), value)


@functools.cache
def _card_metadata(spec: ModelCardSpec) -> tuple[bytes, int, int]:
    """The metadata bytes of the cached card header, its entry count and its alignment."""
    path = model_card_path(spec.card_id)
    g = read_gguf(path)
    table = sum(8 + len(t.name.encode()) + 4 + 8 * len(t.shape) + 4 + 8 for t in g.tensors)
    with open(path, "rb") as f:
        head = f.read(g.header_sizes[0])
    (n_kv,) = struct.unpack_from("<Q", head, 16)
    return head[24 : len(head) - table], n_kv, g.alignment


def _table(tensors: Sequence[CardTensor], alignment: int) -> tuple[bytes, int]:
    """A tensor table with offsets packed at ``alignment``, and the data size it describes."""
    out = bytearray()
    offset = 0
    for t in tensors:
        out += _string(t.name) + struct.pack("<I", len(t.ne))
        out += struct.pack(f"<{len(t.ne)}Q", *t.ne)
        out += struct.pack("<IQ", int(t.ggml_type), offset)
        offset += -(-t.n_bytes // alignment) * alignment
    return bytes(out), offset


def _write(path: Path, kv: bytes, n_kv: int, tensors: Sequence[CardTensor], align: int) -> None:
    table, data = _table(tensors, align)
    head = _MAGIC_VERSION + struct.pack("<QQ", len(tensors), n_kv) + kv + table
    head += bytes(-len(head) % align)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data)  # the weights: a hole that reads as zeros


def write_quant(
    spec: ModelCardSpec,
    quant: str,
    out: Path,
    *,
    mtp: bool = True,
    parts: int = 1,
) -> QuantFile:
    """Write ``spec`` at ``quant`` (a key of ``RECIPES``) as ``out`` (or ``parts`` split files).

    Args:
        spec: A catalogue card.
        quant: The recipe name.
        out: The file (a split model's parts are named ``<stem>-0000i-of-0000N.gguf`` beside it).
        mtp: Keep the card's MTP layer (False: a trunk-only conversion).
        parts: How many files to split the model into.
    """
    recipe = RECIPES[quant]
    kv_bytes, n_kv, align = _card_metadata(spec)
    kv = bytearray(kv_bytes)
    variant = replace(spec, recipe=recipe, n_nextn_layer=spec.n_nextn_layer if mtp else 0)
    _patch_u32(kv, "general.file_type", recipe.file_type)
    _patch_u32(kv, f"{spec.architecture}.block_count", variant.block_count)
    if spec.n_nextn_layer:
        _patch_u32(kv, f"{spec.architecture}.nextn_predict_layers", variant.n_nextn_layer)
    tensors = card_tensors(variant)
    out.parent.mkdir(parents=True, exist_ok=True)
    if parts <= 1:
        _write(out, bytes(kv), n_kv, tensors, align)
        return QuantFile((out,))
    stem = out.name.removesuffix(".gguf")
    per = -(-len(tensors) // parts)
    paths = []
    for i in range(parts):
        split = (
            _kv("split.no", GGUFValueType.UINT16, "H", i)
            + _kv("split.count", GGUFValueType.UINT16, "H", parts)
            + _kv("split.tensors.count", GGUFValueType.INT32, "i", len(tensors))
        )
        path = out.with_name(f"{stem}-{i + 1:05d}-of-{parts:05d}.gguf")
        chunk = tensors[i * per : (i + 1) * per]
        if i == 0:
            _write(path, bytes(kv) + split, n_kv + 3, chunk, align)
        else:
            _write(path, split, 3, chunk, align)
        paths.append(path)
    return QuantFile(tuple(paths))


def projector_bytes() -> bytes:
    """A small vision projector header (``general.architecture = clip``), as mmproj files are."""
    arch = "general.architecture"
    kv = _string(arch) + struct.pack("<I", GGUFValueType.STRING) + _string("clip")
    kv += _kv("clip.has_vision_encoder", GGUFValueType.BOOL, "?", True)
    tensor = CardTensor("v.patch_embd.weight", (14, 14, 3, 1024), Q.F16)
    table, data = _table([tensor], 32)
    head = _MAGIC_VERSION + struct.pack("<QQ", 1, 2) + kv + table
    head += bytes(-len(head) % 32)
    return head + bytes(data)


def not_gguf_bytes() -> bytes:
    """What a broken mirror sometimes stores under a .gguf name: an HTML page."""
    return b"<!DOCTYPE html><html><body>Moved to a new location.</body></html>\n" * 64


QWEN_QUANTS: tuple[tuple[str, str, bool, int], ...] = (
    # file name (without .gguf), recipe, MTP layer, parts
    ("Qwen3.6-35B-A3B-Q2_K", "Q2_K", True, 1),
    ("Qwen3.6-35B-A3B-Q3_K_M", "Q3_K_M", True, 1),
    ("Qwen3.6-35B-A3B-IQ4_XS", "IQ4_XS", True, 1),
    ("Qwen3.6-35B-A3B-IQ4_XS-noMTP", "IQ4_XS", False, 1),
    ("Qwen3.6-35B-A3B-Q4_K_M", "Q4_K_M", False, 1),
    ("Qwen3.6-35B-A3B-UD-Q4_K_XL", "Q4_K_M", True, 1),
    ("Qwen3.6-35B-A3B-Q5_K_M", "Q5_K_M", True, 1),
    ("Qwen3.6-35B-A3B-Q6_K", "Q6_K", True, 1),
    ("Q8_0/Qwen3.6-35B-A3B-Q8_0", "Q8_0", True, 3),
    ("BF16/Qwen3.6-35B-A3B-BF16", "BF16", True, 2),
)
"""Ten models of Qwen3.6-35B-A3B as a quant repository publishes them (two split)."""


def quant_repo(
    folder: Path, repo_id: str, spec: ModelCardSpec, quants: Sequence[tuple[str, str, bool, int]]
) -> HostedRepo:
    """A repository of ``spec`` at each quant (zero-weight, full size), plus its projector and
    README, written under ``folder``."""
    files: list[HostedFile] = []
    for name, recipe, mtp, parts in quants:
        out = folder / f"{name}.gguf"
        written = write_quant(spec, recipe, out, mtp=mtp, parts=parts)
        for path in written.paths:
            files.append(HostedFile(str(path.relative_to(folder)), path))
    projector = folder / "mmproj-F16.gguf"
    projector.write_bytes(projector_bytes())
    readme = folder / "README.md"
    readme.write_text(f"# {repo_id}\n\nGGUF quants of {spec.title}.\n")
    files += [HostedFile("mmproj-F16.gguf", projector), HostedFile("README.md", readme, lfs=False)]
    return HostedRepo(repo_id, files)
