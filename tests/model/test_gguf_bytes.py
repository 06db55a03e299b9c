"""read_gguf_bytes: the same header reader over the first bytes of a remote file, asking for
more bytes (GgufHeaderIncomplete) exactly when the header goes on past them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support.gguf_builders import KV, VT, Qwen35MoeParams, write_gguf, write_qwen35moe

from mtpstudio.core.errors import GgufError
from mtpstudio.core.model.gguf import (
    GgufFile,
    GgufFormatError,
    GgufHeaderIncomplete,
    HeaderBytes,
    model_info_from_gguf,
    read_gguf,
    read_gguf_bytes,
)


def _same(a: GgufFile, b: GgufFile) -> None:
    assert dict(a.value_types) == dict(b.value_types)
    for key, value in a.metadata.items():
        other = b.metadata[key]
        plain = value.to_list() if hasattr(value, "to_list") else value
        assert plain == (other.to_list() if hasattr(other, "to_list") else other), key
    assert a.tensors == b.tensors
    assert (a.data_offsets, a.file_sizes, a.header_sizes) == (
        b.data_offsets,
        b.file_sizes,
        b.header_sizes,
    )


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A qwen35moe header with a 300-token vocabulary (a lazy string array) and an MTP layer,
    followed by 1 MB of 'weights' (so the file goes on after the header)."""
    folder = tmp_path_factory.mktemp("bytes")
    tokens = tuple(f"tok{i}" + "x" * (i % 17) for i in range(300))
    [path] = write_qwen35moe(folder / "m.gguf", Qwen35MoeParams(n_trunk=4, tokens=tokens))
    with open(path, "ab") as f:
        f.write(bytes(1 << 20))
    return path


def _grow(path: Path, start: int) -> tuple[GgufFile, list[int]]:
    """Parse from the first ``start`` bytes, fetching exactly what each answer asks for."""
    data = path.read_bytes()
    held = start
    asked: list[int] = []
    while True:
        try:
            return read_gguf_bytes([HeaderBytes(path.name, data[:held], len(data))]), asked
        except GgufHeaderIncomplete as more:
            assert more.index == 0 and more.held == held
            assert held < more.needed <= len(data)  # always progress, never past the file
            asked.append(more.needed)
            held = more.needed


def test_the_whole_file_in_memory_reads_like_the_file(model_file: Path) -> None:
    data = model_file.read_bytes()
    g = read_gguf_bytes([HeaderBytes("repo/m.gguf", data, len(data))])
    _same(g, read_gguf(model_file))
    assert g.paths == (Path("repo/m.gguf"),)
    assert model_info_from_gguf(g).n_nextn_layer == 1


def test_a_header_larger_than_the_first_range_asks_for_more(model_file: Path) -> None:
    whole = read_gguf(model_file)
    g, asked = _grow(model_file, 64)
    _same(g, whole)
    assert len(asked) > 10  # every value, string and tensor entry crossed the held bytes once
    assert asked == sorted(asked)
    # and never more than the header itself
    assert max(asked) <= whole.header_size


@pytest.mark.parametrize("seed", range(2))
def test_any_cut_inside_the_header_asks_for_more_and_ends_identical(
    model_file: Path, seed: int
) -> None:
    whole = read_gguf(model_file)
    rng = random.Random(seed)
    for cut in sorted(rng.sample(range(4, whole.header_size), 8)):
        g, _ = _grow(model_file, cut)
        _same(g, whole)


def test_bytes_past_the_header_are_not_needed(model_file: Path) -> None:
    whole = read_gguf(model_file)
    data = model_file.read_bytes()
    exact = read_gguf_bytes([HeaderBytes("m", data[: whole.header_size], len(data))])
    _same(exact, whole)


def test_a_file_that_really_ends_inside_its_header_is_still_malformed(model_file: Path) -> None:
    data = model_file.read_bytes()[:5000]
    with pytest.raises(GgufFormatError, match=r"truncated header|claims"):
        read_gguf_bytes([HeaderBytes("m.gguf", data, len(data))])


def test_not_a_gguf_file_is_said_from_the_first_bytes() -> None:
    html = b"<!DOCTYPE html><html>" + bytes(100)
    with pytest.raises(GgufFormatError, match="not a GGUF file: the magic is b'<!DO'"):
        read_gguf_bytes([HeaderBytes("x.gguf", html, 10_000_000_000)])


def test_a_claim_past_the_end_of_the_whole_file_is_malformed_not_incomplete(
    tmp_path: Path,
) -> None:
    [path] = write_gguf(tmp_path / "s.gguf", kv=[KV("s", "x" * 100, VT.STRING)])
    data = bytearray(path.read_bytes())
    at = data.index(b"x" * 100) - 8
    data[at : at + 8] = (10**9).to_bytes(8, "little")  # the string claims 1 GB
    with pytest.raises(GgufFormatError, match="claims 1000000000 bytes"):
        read_gguf_bytes([HeaderBytes("s.gguf", bytes(data[:200]), 50_000)])


def test_split_parts_are_combined_and_each_part_can_ask_for_more(tmp_path: Path) -> None:
    parts = write_qwen35moe(tmp_path / "s.gguf", Qwen35MoeParams(n_trunk=4), split_max_tensors=40)
    assert len(parts) > 2
    whole = read_gguf(parts[0])
    blobs = [p.read_bytes() for p in parts]
    held = [64] * len(parts)
    asked_parts: set[int] = set()
    while True:
        try:
            g = read_gguf_bytes(
                [
                    HeaderBytes(p.name, b[:h], len(b))
                    for p, b, h in zip(parts, blobs, held, strict=True)
                ]
            )
            break
        except GgufHeaderIncomplete as more:
            asked_parts.add(more.index)
            held[more.index] = more.needed
    assert asked_parts == set(range(len(parts)))
    assert g.tensors == whole.tensors and len(g.paths) == len(parts)


def test_split_parts_must_all_be_given(tmp_path: Path) -> None:
    parts = write_qwen35moe(tmp_path / "s.gguf", Qwen35MoeParams(n_trunk=4), split_max_tensors=40)
    blobs = [HeaderBytes(p.name, p.read_bytes(), p.stat().st_size) for p in parts]
    with pytest.raises(GgufError, match=f"says the model has {len(parts)} parts, but 2 were given"):
        read_gguf_bytes(blobs[:2])
    with pytest.raises(GgufError, match="says it is split part 3, expected 2"):
        read_gguf_bytes([blobs[0], blobs[2], blobs[1], *blobs[3:]])
