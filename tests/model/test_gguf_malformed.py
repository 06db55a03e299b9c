"""Bad GGUF input ends in one clear GgufError that names the problem and its byte offset."""

from __future__ import annotations

import contextlib
import os
import re
import struct
import tempfile
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.gguf_builders import (
    KV,
    QT,
    VT,
    TensorSpec,
    raw_header,
    raw_kv,
    raw_string,
    raw_tensor_info,
    write_gguf,
)
from support.waiting import scaled

from mtpstudio.core.errors import GgufError
from mtpstudio.core.model import gguf
from mtpstudio.core.model.gguf import GgufFormatError, model_info_from_gguf, read_gguf

ARCH = raw_kv("general.architecture", VT.STRING, "llama")

# Per example: far above what one takes (milliseconds), so only a runaway path fails it.
EXAMPLE_DEADLINE = timedelta(seconds=scaled(5))


@dataclass(frozen=True)
class Bad:
    """A malformed file, what the error must say and where."""

    name: str
    data: bytes
    says: str  # regex the message must match
    offset: int


def _u32(v: int) -> bytes:
    return struct.pack("<I", v)


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def _corpus() -> list[Bad]:
    out: list[Bad] = []
    h = raw_header(0, 1)
    out.append(Bad("wrong-magic", b"GGML" + h[4:] + ARCH, r"not a GGUF file.*magic", 0))
    out.append(Bad("lowercase-magic", b"gguf" + h[4:] + ARCH, r"not a GGUF file", 0))
    out.append(Bad("empty", b"", r"empty", 0))
    out.append(Bad("three-bytes", b"GGU", r"too short", 0))
    out.append(Bad("magic-only", b"GGUF", r"truncated header: the version", 4))
    out.append(Bad("version-1", raw_header(0, 1, version=1) + ARCH, r"version 1 is not", 4))
    out.append(Bad("version-99", raw_header(0, 1, version=99) + ARCH, r"unsupported.*99", 4))
    out.append(Bad("version-0", raw_header(0, 1, version=0) + ARCH, r"unsupported.*0", 4))
    out.append(Bad("truncated-counts", h[:12], r"truncated header: the tensor count", 8))
    out.append(Bad("truncated-kv-count", h[:20], r"truncated header: the metadata entry count", 16))
    out.append(
        Bad("absurd-kv-count", raw_header(0, 2**60) + ARCH, r"claims \d+ metadata entries", 16)
    )
    out.append(Bad("absurd-tensor-count", raw_header(2**40, 1) + ARCH, r"\d+ tensors", 8))
    out.append(
        Bad(
            "absurd-key-length",
            h + raw_string("general.architecture", length=2**62) + _u32(8),
            rf"key of metadata entry 0 claims {2**62} bytes",
            24,
        )
    )
    key = raw_string("k")  # 9 bytes: the value type sits at 24 + 9 = 33
    out.append(
        Bad(
            "absurd-string-value",
            h + key + _u32(VT.STRING) + raw_string("abc", length=10**9) + b"\0" * 10,
            r"string value of key 'k' claims 1000000000 bytes",
            37,
        )
    )
    out.append(
        Bad(
            "unknown-value-type",
            h + key + _u32(13) + b"\0" * 16,
            r"unknown value type id 13 for the value type of key 'k'",
            33,
        )
    )
    out.append(
        Bad(
            "unknown-array-element-type",
            h + key + _u32(VT.ARRAY) + _u32(99) + _u64(1) + b"\0" * 16,
            r"unknown value type id 99 for the element type",
            37,
        )
    )
    out.append(
        Bad(
            "absurd-array-count",
            h + key + _u32(VT.ARRAY) + _u32(VT.UINT32) + _u64(2**50) + b"\0" * 64,
            rf"claims {2**50} u32 elements",
            41,
        )
    )
    out.append(
        Bad(
            "absurd-string-array-count",
            h + key + _u32(VT.ARRAY) + _u32(VT.STRING) + _u64(10**6) + raw_string("x") * 10,
            r"claims 1000000 string elements \(at least 8000000 bytes\)",
            41,
        )
    )
    arr = h + key + _u32(VT.ARRAY) + _u32(VT.STRING) + _u64(300)
    strings = b"".join(raw_string(f"s{i}") for i in range(299))
    out.append(
        Bad(
            "string-array-element-too-long",
            arr + strings + raw_string("last", length=5000) + b"\0" * 2000,
            r"element 299 of array key 'k' claims 5000 bytes",
            len(arr) + len(strings),
        )
    )
    out.append(
        Bad(
            "string-array-truncated",
            arr + strings + raw_string("last", length=100)[:5],
            r"truncated header: the length of element 299",
            len(arr) + len(strings),
        )
    )
    u64_kv = raw_kv("x.u64", VT.UINT64, 5)
    two = raw_header(0, 2) + ARCH
    out.append(
        Bad(
            "truncated-in-value",
            two + u64_kv[:-3],
            r"truncated header: the value of key 'x.u64' needs 8 bytes",
            len(two) + len(u64_kv) - 8,
        )
    )
    out.append(
        Bad(
            "truncated-in-key",
            two + raw_string("x.something")[:12],
            r"key of metadata entry 1 claims 11 bytes but only 4",
            len(two),
        )
    )
    out.append(
        Bad(
            "duplicate-key",
            raw_header(0, 2) + ARCH + ARCH,
            r"duplicate metadata key",
            len(ARCH) + 24,
        )
    )
    inner: tuple[int, list[object]] = (VT.STRING, ["deep"])
    for _ in range(8):  # 9 arrays in all: the 9th (depth 8) is refused before it is read
        inner = (VT.ARRAY, [inner])
    deep = raw_kv("deep", VT.ARRAY, inner[1], inner[0])
    out.append(Bad("nesting-too-deep", h + deep, r"more than 8 levels deep", 24 + 12 + 4 + 8 * 12))
    out.append(
        Bad(
            "bad-alignment",
            h + raw_kv("general.alignment", VT.UINT32, 24),
            r"general.alignment is 24; it must be a power of two",
            24 + 8 + len("general.alignment") + 4,
        )
    )
    out.append(
        Bad(
            "alignment-not-a-number",
            h + raw_kv("general.alignment", VT.STRING, "32"),
            r"general.alignment is '32'",
            24 + 8 + len("general.alignment") + 4,
        )
    )
    # Tensor-table problems: one tensor after the architecture key.
    t_head = raw_header(1, 1) + ARCH

    def tensor(name: str, shape: list[int], ggml_type: int, offset: int) -> bytes:
        return t_head + raw_tensor_info(name, shape, ggml_type, offset)

    name_end = len(t_head) + 8 + len("w")
    out.append(Bad("too-many-dims", tensor("w", [1] * 5, 0, 0), r"'w' has 5 dimensions", name_end))
    out.append(
        Bad(
            "absurd-dims",
            tensor("w", [2**40, 2**40], 0, 0),
            r"'w' has absurd dimensions",
            name_end + 4,
        )
    )
    out.append(
        Bad(
            "dim-above-int64",
            tensor("w", [2**64 - 1], 0, 0),
            r"'w' has absurd dimensions",
            name_end + 4,
        )
    )
    out.append(
        Bad(
            "removed-ggml-type",
            tensor("w", [32, 2], 4, 0),
            r"'w' has unknown ggml type id 4",
            name_end + 4 + 16,
        )
    )
    out.append(
        Bad(
            "unknown-ggml-type",
            tensor("w", [32], 200, 0),
            r"unknown ggml type id 200",
            name_end + 4 + 8,
        )
    )
    out.append(
        Bad(
            "not-a-block-multiple",
            tensor("w", [100, 2], int(QT.Q4_K), 0),
            r"first dimension 100 is not a multiple of the Q4_K block size 256",
            name_end + 4,
        )
    )
    out.append(
        Bad(
            "misaligned-offset",
            tensor("w", [32], 0, 7),
            r"data offset 7, not a multiple of the alignment 32",
            name_end + 4 + 8 + 4,
        )
    )
    ti = raw_tensor_info("w", [32], 0, 0)
    out.append(
        Bad(
            "duplicate-tensor",
            raw_header(2, 1) + ARCH + ti + ti,
            r"duplicate tensor name 'w'",
            len(t_head) + len(ti),
        )
    )
    out.append(
        Bad(
            "truncated-tensor-table",
            tensor("w", [32, 4], 0, 0)[:-6],
            r"truncated header: the data offset of tensor 'w'",
            name_end + 4 + 16 + 4,
        )
    )
    out.append(
        Bad(
            "tensor-table-missing",
            raw_header(2, 1) + ARCH + ti + b"\0" * 5,
            r"truncated header: the length of the name of tensor 1",
            len(t_head) + len(ti),
        )
    )
    return out


CORPUS = _corpus()


def test_corpus_is_large_and_distinct() -> None:
    assert len(CORPUS) >= 15
    assert len({b.data for b in CORPUS}) == len(CORPUS)
    assert len({b.name for b in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("bad", CORPUS, ids=[b.name for b in CORPUS])
def test_malformed_file_raises_gguf_error(tmp_path: Path, bad: Bad) -> None:
    path = tmp_path / f"{bad.name}.gguf"
    path.write_bytes(bad.data)
    with pytest.raises(GgufError) as info:
        read_gguf(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert f"at byte offset {bad.offset}" in message, message
    assert isinstance(info.value, GgufFormatError)
    assert info.value.offset == bad.offset
    assert info.value.hint
    assert re.search(bad.says, message), message


def test_absurd_counts_do_not_allocate(tmp_path: Path) -> None:
    cases = [b for b in CORPUS if b.name.startswith("absurd")]
    assert len(cases) >= 5
    for bad in cases:
        path = tmp_path / f"{bad.name}.gguf"
        path.write_bytes(bad.data)
        tracemalloc.start()
        try:
            with pytest.raises(GgufError):
                read_gguf(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 256 * 1024, (bad.name, peak)


def test_a_directory_or_missing_file_is_a_gguf_error(tmp_path: Path) -> None:
    with pytest.raises(GgufError, match="is a directory"):
        read_gguf(tmp_path)
    with pytest.raises(GgufError, match="not found"):
        read_gguf(tmp_path / "missing.gguf")


@pytest.mark.timeout(30, method="thread")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GgufError, match="not a regular file"):
        read_gguf(fifo)


# ------------------------------------------------------------------------------------------
# Fuzzing: random mutations and truncations of a valid header


def _valid_header(path: Path, *, big_endian: bool = False) -> bytes:
    kv = [
        KV("llama.block_count", 2, VT.UINT32),
        KV("llama.embedding_length", 64, VT.UINT32),
        KV("llama.attention.head_count", 4, VT.UINT32),
        KV("llama.attention.head_count_kv", [2, 0], VT.ARRAY, VT.INT32),
        KV("llama.context_length", 4096, VT.UINT64),
        KV("general.alignment", 32, VT.UINT32),
        KV("general.file_type", 7, VT.UINT32),
        KV("f", 1.5, VT.FLOAT32),
        KV("b", [True, False], VT.ARRAY, VT.BOOL),
        KV("nested", [["a", "b"], ["c"]], VT.ARRAY, VT.ARRAY),
        KV("tokenizer.ggml.tokens", [f"tok{i}" for i in range(40)], VT.ARRAY, VT.STRING),
        KV("tokenizer.ggml.scores", [float(i) for i in range(40)], VT.ARRAY, VT.FLOAT32),
        KV("name", "fuzz", VT.STRING),
    ]
    tensors = [
        TensorSpec("token_embd.weight", (64, 40), QT.Q8_0),
        TensorSpec("blk.0.attn_norm.weight", (64,)),
        TensorSpec("blk.1.ffn_up.weight", (256, 8), QT.Q4_K),
    ]
    [p] = write_gguf(path, kv=kv, tensors=tensors, big_endian=big_endian)
    return p.read_bytes()


@pytest.fixture(scope="module")
def fuzz_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


INTERESTING_U64 = [0, 1, 5, 255, 256, 2**31, 2**32 - 1, 2**32, 2**62, 2**63, 2**64 - 1]


@st.composite
def _mutation(draw: st.DrawFn, size: int) -> list[tuple[int, bytes]]:
    edits = []
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, size - 1))
        if draw(st.booleans()):
            value = draw(st.sampled_from([*INTERESTING_U64, size, size - at, size * 2]))
            edits.append((at, struct.pack("<Q", value % 2**64)))
        else:
            edits.append((at, draw(st.binary(min_size=1, max_size=4))))
    return edits


def _apply(data: bytes, edits: list[tuple[int, bytes]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for at, chunk in edits:
        buf[at : at + len(chunk)] = chunk
    return bytes(buf[:cut] if cut is not None else buf)


def _read_or_gguf_error(path: Path, lazy_threshold: int) -> None:
    try:
        g = read_gguf(path, lazy_threshold=lazy_threshold)
    except GgufError as exc:
        assert "\n" not in str(exc)
        return
    with contextlib.suppress(GgufError):
        model_info_from_gguf(g)
    for value in g.metadata.values():  # lazy values decode without surprises
        if hasattr(value, "to_list"):
            value.to_list()


@pytest.mark.timeout(120, method="thread")  # a hang fails fast, not after 600 s
@settings(max_examples=400, deadline=EXAMPLE_DEADLINE, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), lazy=st.sampled_from([0, 256]))
def test_mutated_headers_end_in_result_or_gguf_error(
    fuzz_dir: Path, data: st.DataObject, lazy: int
) -> None:
    base_path = fuzz_dir / "base.gguf"
    base = base_path.read_bytes() if base_path.exists() else _valid_header(base_path)
    edits = data.draw(_mutation(len(base)))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(base))))
    path = fuzz_dir / "mutated.gguf"
    path.write_bytes(_apply(base, edits, cut))
    _read_or_gguf_error(path, lazy)


@pytest.mark.timeout(120, method="thread")  # a hang fails fast, not after 600 s
@settings(max_examples=100, deadline=EXAMPLE_DEADLINE, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 10_000), lazy=st.sampled_from([0, 256]))
def test_every_truncation_ends_in_result_or_gguf_error(fuzz_dir: Path, cut: int, lazy: int) -> None:
    base_path = fuzz_dir / "base.gguf"
    base = base_path.read_bytes() if base_path.exists() else _valid_header(base_path)
    path = fuzz_dir / "cut.gguf"
    path.write_bytes(base[: cut % (len(base) + 1)])
    _read_or_gguf_error(path, lazy)


def test_all_truncations_of_the_header(fuzz_dir: Path) -> None:
    base_path = fuzz_dir / "base.gguf"
    base = base_path.read_bytes() if base_path.exists() else _valid_header(base_path)
    path = fuzz_dir / "all-cuts.gguf"
    ok = 0
    for cut in range(0, len(base) + 1, 7):
        path.write_bytes(base[:cut])
        try:
            read_gguf(path)
            ok += 1
        except GgufError:
            pass
    path.write_bytes(base)
    read_gguf(path)  # the full header reads
    assert ok <= 1  # only the complete header (cut == len) can succeed


def _outcome(path: Path) -> tuple[object, ...]:
    try:
        g = read_gguf(path, lazy_threshold=0)
    except GgufError as exc:
        return ("error", type(exc).__name__, str(exc))
    values = {k: v.to_list() if hasattr(v, "to_list") else v for k, v in g.metadata.items()}
    return ("read", values, [t.name for t in g.tensors])


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
def test_the_plain_string_walk_agrees_with_numpys_on_damaged_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, big_endian: bool
) -> None:
    """The plain walk trusts every length first and walks again, checking, only when it ends
    past the bytes held (the elements' offsets are found when one is asked for): for every
    truncation and every odd length of the token array's elements it reads what numpy's walk
    reads, or fails with the same error."""
    u64 = ">Q" if big_endian else "<Q"
    base = _valid_header(tmp_path / "base.gguf", big_endian=big_endian)
    at = base.index(b"tokenizer.ggml.tokens") + len(b"tokenizer.ggml.tokens") + 4 + 4 + 8
    cases = [base[:cut] for cut in range(0, len(base) + 1, 3)]
    for element in (0, 1, 39):  # the first, the second and the last token's length
        pos = at
        for _ in range(element):
            pos += 8 + struct.unpack_from(u64, base, pos)[0]
        for length in [*INTERESTING_U64, len(base) - pos - 8, len(base) - pos - 7]:
            cases.append(base[:pos] + struct.pack(u64, length) + base[pos + 8 :])
    path = tmp_path / "walked.gguf"
    plain_errors = 0
    for data in cases:
        path.write_bytes(data)
        monkeypatch.setattr(gguf, "_walk_plainly", lambda count: False)
        vectorised = _outcome(path)
        monkeypatch.setattr(gguf, "_walk_plainly", lambda count: True)
        plain = _outcome(path)
        assert plain == vectorised, len(data)
        plain_errors += plain[0] == "error"
    assert 0 < plain_errors < len(cases)
