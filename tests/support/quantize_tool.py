"""The real ``llama-quantize`` on card-shaped models: a reduced model of a card's layout (its
F16 conversion, zero weights, sparse), an importance matrix of ones for it, the tool run on it
(or ``--dry-run`` on a full-size card), and the types it wrote or printed."""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

from mtpstudio.core.catalog.header import write_card_header
from mtpstudio.core.catalog.spec import QUANT_MIXES, ModelCardSpec, QuantMix, card_tensors
from mtpstudio.core.model.gguf import read_gguf
from support.servers import clean_env

F16 = QuantMix("F16")


def reduced(spec: ModelCardSpec) -> ModelCardSpec:
    """``spec``'s layout at a small size: 8 trunk layers (two of them attention) and its MTP
    layer, 16 experts, narrow widths; every width keeps whether it is a multiple of 256 (the
    k-quants' block) as the full model's does, and the head ratio (``n_gqa``) and the expert
    thresholds the rules test (4 and 8) stay on the same side."""
    narrow = replace(
        spec,
        card_id=f"{spec.model_id}-reduced-f16",
        n_vocab=1024,
        n_embd=256,
        n_layer=8,
        head_dim=64,
        rope_dim=64,
        ssm_state_size=32,
        ssm_group_count=4,
        ssm_time_step_rank=8,
        recipe=F16,
        published_size_bytes=None,
    )
    if spec.is_moe:
        return replace(narrow, n_expert=16, expert_ffn_length=256, shared_expert_ffn_length=256)
    return replace(narrow, ffn_length=512)


def write_model(spec: ModelCardSpec, path: Path) -> Path:
    """``spec`` as a GGUF with its data: the card's header, then zero weights (a sparse hole
    as long as the tensors)."""
    write_card_header(spec, path)
    g = read_gguf(path)
    end = max(g.data_offsets[t.file_index] + t.offset + t.n_bytes for t in g.tensors)
    with open(path, "r+b") as f:
        f.truncate(end)
    return path


def write_imatrix(spec: ModelCardSpec, path: Path) -> Path:
    """An importance matrix of ones for every 2-D and 3-D tensor of ``spec`` (the legacy
    ``.dat`` layout ``llama-quantize --imatrix`` reads: count, then per entry its name, calls,
    values; ``ne[0]`` values per expert)."""
    entries = [t for t in card_tensors(spec) if len(t.ne) >= 2 and t.name.endswith("weight")]
    out = bytearray(struct.pack("<i", len(entries)))
    for t in entries:
        name = t.name.encode()
        n = t.ne[0] * (t.ne[2] if len(t.ne) > 2 else 1)
        out += struct.pack("<i", len(name)) + name + struct.pack("<ii", 1, n)
        out += struct.pack(f"<{n}f", *([1.0] * n))
    path.write_bytes(bytes(out))
    return path


def quantize(
    tool: Path, source: Path, out: Path, quant: str, imatrix: Path, *, dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``tool`` as a user would: ``llama-quantize --imatrix M SRC [DST] TYPE 2``."""
    args = [str(tool), "--imatrix", str(imatrix)]
    if dry_run:
        args += ["--dry-run", str(source), quant, "2"]
    else:
        args += [str(source), str(out), quant, "2"]
    return subprocess.run(
        args, capture_output=True, text=True, timeout=1800, env=clean_env(), check=False
    )


def written_types(path: Path) -> dict[str, str]:
    """The type of every tensor of the file the tool wrote, by its GGUF header."""
    return {t.name: t.type_name for t in read_gguf(path).tensors}


_DRY_LINE = re.compile(
    r"\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s+(\S+),.*?"
    r"(?:->\s+[\d.]+ MiB \((\S+)\)|$)"
)
_CONVERTING = re.compile(r"converting to (\S+) \.\.")  # how ik prints the new type


def printed_types(log: str) -> dict[str, str]:
    """The type ``--dry-run`` printed for every tensor (``[ i/ n] NAME - [dims], type = SRC,
    size = … -> … (NEW)``, or ik's ``converting to NEW ..`` on that line or one after it; a
    tensor it leaves keeps its type)."""
    found: dict[str, str] = {}
    name = ""
    for line in log.splitlines():
        m = _DRY_LINE.search(line)
        if m:
            name, source, new = m.groups()
            found[name] = (new or source).upper()
        if name and (c := _CONVERTING.search(line)):
            found[name] = c.group(1).upper()
    return found


def card_types(spec: ModelCardSpec, quant: str) -> dict[str, str]:
    """The card's own type for every tensor of ``spec`` at ``quant``."""
    card = replace(spec, recipe=QUANT_MIXES[quant])
    return {t.name: t.ggml_type.name for t in card_tensors(card)}
