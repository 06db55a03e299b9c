"""core.gguf reads what gguf.GGUFWriter wrote: every value type, tensor tables, splits."""

from __future__ import annotations

import math
import random
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.gguf_builders import KV, QT, VT, TensorSpec, raw_header, raw_kv, write_gguf
from support.waiting import scaled

from mtpstudio.core.errors import GgufError
from mtpstudio.core.model.gguf import (
    GgufFile,
    LazyArray,
    LazyNumberArray,
    LazyStringArray,
    read_gguf,
    split_part_paths,
)

SHORT = {
    VT.UINT8: "u8",
    VT.INT8: "i8",
    VT.UINT16: "u16",
    VT.INT16: "i16",
    VT.UINT32: "u32",
    VT.INT32: "i32",
    VT.FLOAT32: "f32",
    VT.BOOL: "bool",
    VT.UINT64: "u64",
    VT.INT64: "i64",
    VT.FLOAT64: "f64",
    VT.STRING: "string",
}

SCALARS: list[KV] = [
    KV("t.u8", 255, VT.UINT8),
    KV("t.i8", -128, VT.INT8),
    KV("t.u16", 65535, VT.UINT16),
    KV("t.i16", -32768, VT.INT16),
    KV("t.u32", 2**32 - 1, VT.UINT32),
    KV("t.i32", -(2**31), VT.INT32),
    KV("t.u64", 2**64 - 1, VT.UINT64),
    KV("t.i64", -(2**63), VT.INT64),
    KV("t.f32", 0.1, VT.FLOAT32),
    KV("t.f64", math.pi, VT.FLOAT64),
    KV("t.bool.true", True, VT.BOOL),
    KV("t.bool.false", False, VT.BOOL),
    KV("t.string", "Grüße, 世界 🙂", VT.STRING),
]
ARRAYS: list[KV] = [
    KV("a.u8", [0, 1, 255], VT.ARRAY, VT.UINT8),
    KV("a.i8", [-128, 0, 127], VT.ARRAY, VT.INT8),
    KV("a.u16", [0, 65535], VT.ARRAY, VT.UINT16),
    KV("a.i16", [-32768, 32767], VT.ARRAY, VT.INT16),
    KV("a.u32", [0, 2**32 - 1, 7], VT.ARRAY, VT.UINT32),
    KV("a.i32", [-(2**31), 2**31 - 1], VT.ARRAY, VT.INT32),
    KV("a.u64", [0, 2**64 - 1], VT.ARRAY, VT.UINT64),
    KV("a.i64", [-(2**63), 2**63 - 1], VT.ARRAY, VT.INT64),
    KV("a.f32", [0.5, -1.25, 1e-6, 3.4e38], VT.ARRAY, VT.FLOAT32),
    KV("a.f64", [math.e, -0.0, 1e300], VT.ARRAY, VT.FLOAT64),
    KV("a.bool", [True, False, True, True], VT.ARRAY, VT.BOOL),
    KV("a.string", ["", "a", "ß", "x" * 300, "nul\x00inside"], VT.ARRAY, VT.STRING),
    KV("a.nested.strings", [["a", "bc"], ["", "d e", "ü"], ["only"]], VT.ARRAY, VT.ARRAY),
    KV("a.nested.ints", [[1, 2, 3], [-4]], VT.ARRAY, VT.ARRAY),  # GGUFWriter: i32 inside
    KV("a.nested.deep", [[["x"], ["y", "z"]], [["w"]]], VT.ARRAY, VT.ARRAY),
]

# Per example: far above what one takes (milliseconds), so only a runaway path fails it.
EXAMPLE_DEADLINE = timedelta(seconds=scaled(5))


def expected_value(item: KV) -> Any:
    """What a reader should return for ``item``: f32 values rounded through float32."""

    def conv(value: Any, vtype: VT | None) -> Any:
        if vtype == VT.FLOAT32:
            return float(np.float32(value))
        return value

    if item.vtype == VT.ARRAY:
        if item.sub_type == VT.ARRAY:
            return item.value  # nested: ints/strings only, exact
        return [conv(v, item.sub_type) for v in item.value]
    return conv(item.value, item.vtype)


def expected_type(item: KV) -> str:
    if item.vtype != VT.ARRAY:
        return SHORT[item.vtype]
    if item.sub_type != VT.ARRAY:
        return f"array[{SHORT[item.sub_type]}]"  # type: ignore[index]

    def name(value: Any) -> str:
        if isinstance(value, list):
            return f"array[{name(value[0])}]"
        return SHORT[VT.get_type(value)]

    return name(item.value)


def plain(value: Any) -> Any:
    """Lazy arrays (at any depth) to lists."""
    if isinstance(value, LazyArray):
        return [plain(v) for v in value.to_list()]
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


@pytest.mark.parametrize("big_endian", [False, True], ids=["le", "be"])
@pytest.mark.parametrize("lazy_threshold", [256, 0], ids=["eager", "lazy"])
def test_every_value_type_round_trips(
    tmp_path: Path, big_endian: bool, lazy_threshold: int
) -> None:
    items = SCALARS + ARRAYS
    [path] = write_gguf(tmp_path / "m.gguf", "testarch", kv=items, big_endian=big_endian)
    g = read_gguf(path, lazy_threshold=lazy_threshold)
    assert g.version == 3
    assert g.big_endian is big_endian
    assert g.metadata["general.architecture"] == "testarch"
    assert g.architecture == "testarch"
    assert list(g.metadata) == ["general.architecture"] + [i.key for i in items]
    for item in items:
        got = g.metadata[item.key]
        assert plain(got) == expected_value(item), item.key
        assert g.value_types[item.key] == expected_type(item), item.key
        if item.vtype == VT.ARRAY and lazy_threshold == 0:
            assert isinstance(got, LazyArray) or item.sub_type == VT.ARRAY
        elif item.vtype == VT.ARRAY:
            assert isinstance(got, list)
    # exact Python types, not numpy scalars
    assert type(g.metadata["t.bool.true"]) is bool
    assert type(g.metadata["t.u64"]) is int
    assert type(g.metadata["t.f64"]) is float
    assert all(type(v) is bool for v in plain(g.metadata["a.bool"]))


def test_values_agree_with_gguf_reader(tmp_path: Path) -> None:
    items = SCALARS + [a for a in ARRAYS if a.sub_type != VT.ARRAY]
    [path] = write_gguf(
        tmp_path / "m.gguf", kv=items, tensors=[TensorSpec("w", (32, 2))], with_data=True
    )
    ours = read_gguf(path)
    ref = GGUFReader(path)
    for item in items:
        field = ref.fields[item.key]
        assert ours.metadata[item.key] == field.contents(), item.key


def test_header_fields_and_alignment(tmp_path: Path) -> None:
    specs = [TensorSpec("a", (8,)), TensorSpec("b", (64, 3), QT.F16)]
    [path] = write_gguf(tmp_path / "m.gguf", tensors=specs, with_data=True, alignment=64)
    g = read_gguf(path)
    ref = GGUFReader(path)
    assert g.alignment == 64 == ref.alignment
    assert g.data_offset == ref.data_offset
    assert g.data_offset % 64 == 0
    assert g.header_size <= g.data_offset < g.header_size + 64
    assert g.file_size == path.stat().st_size
    assert g.paths == (path,) and g.path == path
    assert g.has_tensor_data


TENSORS = [
    TensorSpec("token_embd.weight", (256, 10), QT.Q8_0),
    TensorSpec("blk.0.attn_norm.weight", (256,)),
    TensorSpec("blk.0.ffn_up_exps.weight", (256, 64, 4), QT.Q4_K),
    TensorSpec("blk.0.ffn_down_exps.weight", (256, 256, 2), QT.IQ4_XS),
    TensorSpec("blk.0.attn_k.weight", (64, 32), QT.F16),
    TensorSpec("blk.1.ssm_conv1d.weight", (4, 96)),
    TensorSpec("blk.1.four_d", (32, 2, 3, 2), QT.Q4_0),
    TensorSpec("output.weight", (256, 10), QT.Q6_K),
]


def test_tensor_table_matches_gguf_reader(tmp_path: Path) -> None:
    [path] = write_gguf(tmp_path / "m.gguf", tensors=TENSORS, with_data=True)
    g = read_gguf(path)
    ref = GGUFReader(path)
    assert [t.name for t in g.tensors] == [t.name for t in TENSORS]
    assert len(ref.tensors) == len(g.tensors)
    for ours, theirs, spec in zip(g.tensors, ref.tensors, TENSORS, strict=True):
        assert ours.name == theirs.name == spec.name
        assert ours.ggml_type == int(theirs.tensor_type) == int(spec.qtype)
        assert ours.type_name == theirs.tensor_type.name == spec.qtype.name
        assert ours.shape == tuple(int(d) for d in theirs.shape) == spec.shape
        assert ours.n_elements == theirs.n_elements == spec.n_elements
        assert ours.n_bytes == theirs.n_bytes
        assert g.data_offset + ours.offset == theirs.data_offset
        assert ours.file_index == 0
    assert g.tensor("output.weight") is g.tensors[-1]
    assert g.tensor("missing") is None
    assert g.tensors[2].layer == 0 and g.tensors[0].layer is None
    # the data section ends where the last tensor (padded) ends
    last = g.tensors[-1]
    assert g.data_offset + last.offset + last.n_bytes <= g.file_size


def test_byte_sizes_come_from_the_quant_table(tmp_path: Path) -> None:
    [path] = write_gguf(tmp_path / "m.gguf", tensors=TENSORS)
    for t in read_gguf(path).tensors:
        block, size = GGML_QUANT_SIZES[QT(t.ggml_type)]
        assert t.n_bytes == t.n_elements // block * size


def test_file_truncated_right_after_header(tmp_path: Path) -> None:
    [full] = write_gguf(tmp_path / "full.gguf", kv=ARRAYS, tensors=TENSORS, with_data=True)
    [head] = write_gguf(tmp_path / "head.gguf", kv=ARRAYS, tensors=TENSORS)
    a, b = read_gguf(full), read_gguf(head)
    assert b.file_size == b.header_size == head.stat().st_size < b.data_offset + 1
    assert a.tensors == b.tensors
    assert plain(dict(a.metadata)) == plain(dict(b.metadata))
    assert a.data_offset == b.data_offset
    assert a.has_tensor_data and not b.has_tensor_data
    # also when the padding before the data section is present but nothing else
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[: a.data_offset])
    assert read_gguf(cut).tensors == a.tensors


def test_huge_sparse_file_reads_only_the_header(tmp_path: Path) -> None:
    [path] = write_gguf(tmp_path / "big.gguf", tensors=[TensorSpec("w", (1 << 20, 1 << 12))])
    size = 64 << 30
    with open(path, "r+b") as f:
        f.truncate(size)  # sparse: reading it all would take minutes
    g = read_gguf(path)
    assert g.file_size == size
    assert g.header_size < 4096
    assert g.has_tensor_data


def test_gguf_v2(tmp_path: Path) -> None:
    [v3] = write_gguf(tmp_path / "v3.gguf", kv=SCALARS + ARRAYS, tensors=TENSORS)
    [v2] = write_gguf(tmp_path / "v2.gguf", kv=SCALARS + ARRAYS, tensors=TENSORS, version=2)
    a, b = read_gguf(v3), read_gguf(v2)
    assert (a.version, b.version) == (3, 2)
    assert b.tensors == a.tensors
    assert dict(b.metadata) == dict(a.metadata)


def test_big_endian_matches_little_endian(tmp_path: Path) -> None:
    kv = [*SCALARS, KV("tok", [f"t{i}" for i in range(600)], VT.ARRAY, VT.STRING)]
    kv.append(KV("ids", list(range(-300, 300)), VT.ARRAY, VT.INT32))
    [le] = write_gguf(tmp_path / "le.gguf", kv=kv, tensors=TENSORS)
    [be] = write_gguf(tmp_path / "be.gguf", kv=kv, tensors=TENSORS, big_endian=True)
    a, b = read_gguf(le), read_gguf(be)
    assert b.big_endian and not a.big_endian
    assert b.tensors == a.tensors
    assert plain(dict(b.metadata)) == plain(dict(a.metadata))
    ids = b.metadata["ids"]
    assert isinstance(ids, LazyNumberArray)
    assert ids.to_numpy().tolist() == list(range(-300, 300))


# ------------------------------------------------------------------------------------------
# Lazy arrays


def test_big_arrays_are_lazy_and_decode_on_request(tmp_path: Path) -> None:
    rng = random.Random(1)
    tokens = ["", "\x00", "a\x00b"] + [
        "".join(rng.choice("abcĠé漢") for _ in range(rng.choice((1, 3, 8, 40, 200, 400))))
        for _ in range(997)
    ]
    ids = [rng.randint(-(2**31), 2**31 - 1) for _ in range(1000)]
    flags = [rng.random() < 0.5 for _ in range(1000)]
    scores = [rng.uniform(-10, 10) for _ in range(1000)]
    kv = [
        KV("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING),
        KV("ids", ids, VT.ARRAY, VT.INT32),
        KV("flags", flags, VT.ARRAY, VT.BOOL),
        KV("scores", scores, VT.ARRAY, VT.FLOAT32),
        KV("small", ["x"] * 256, VT.ARRAY, VT.STRING),
    ]
    [path] = write_gguf(tmp_path / "m.gguf", kv=kv)
    g = read_gguf(path)
    tok = g.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tok, LazyStringArray)
    assert isinstance(g.metadata["small"], list)  # at the threshold: plain
    assert len(tok) == 1000 and tok.value_type == VT.STRING and tok.type_name == "string"
    assert tok.to_list() == tokens
    assert list(tok) == tokens
    assert tok[0] == "" and tok[2] == "a\x00b" and tok[-1] == tokens[-1]
    assert tok[10:20] == tokens[10:20] and tok[::-97] == tokens[::-97]
    assert tok.raw(5) == tokens[5].encode()
    assert tok == tokens and tok != tokens[:-1]
    assert tokens[7] in tok
    assert "len=1000" in repr(tok)
    with pytest.raises(IndexError):
        tok[1000]
    with pytest.raises(IndexError):
        tok[-1001]
    n = g.metadata["ids"]
    assert isinstance(n, LazyNumberArray) and n.type_name == "i32"
    assert n.to_list() == ids and n[3] == ids[3] and n[-1] == ids[-1] and n[5:9] == ids[5:9]
    assert n.nbytes == 4000
    with pytest.raises(IndexError):
        n[1000]
    f = g.metadata["flags"]
    assert isinstance(f, LazyNumberArray) and f.to_list() == flags
    assert all(type(v) is bool for v in f.to_list()) and type(f[0]) is bool
    s = g.metadata["scores"]
    assert isinstance(s, LazyNumberArray)
    assert s.to_list() == [float(np.float32(v)) for v in scores]


def test_empty_arrays(tmp_path: Path) -> None:
    # GGUFWriter refuses empty arrays; llama.cpp writes them (e.g. empty merges).
    data = raw_header(0, 4)
    data += raw_kv("general.architecture", VT.STRING, "llama")
    data += raw_kv("tokenizer.ggml.merges", VT.ARRAY, [], VT.STRING)
    data += raw_kv("nums", VT.ARRAY, [], VT.FLOAT32)
    data += raw_kv("nested", VT.ARRAY, [], VT.ARRAY)
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    for threshold in (0, 256):
        g = read_gguf(path, lazy_threshold=threshold)
        assert plain(g.metadata["tokenizer.ggml.merges"]) == []
        assert plain(g.metadata["nums"]) == []
        assert g.value_types["nums"] == "array[f32]"
        assert g.metadata["nested"] == [] and g.value_types["nested"] == "array[array]"
        assert g.value_types["tokenizer.ggml.merges"] == "array[string]"


def _string_lists() -> st.SearchStrategy[list[bytes]]:
    length = st.one_of(
        st.integers(0, 12), st.integers(0, 12), st.integers(250, 300), st.integers(0, 600)
    )
    element = st.one_of(
        length.map(lambda n: b"a" * n),
        st.binary(max_size=40),
        length.map(lambda n: b"\x00" * n),
        st.text(max_size=20).map(str.encode),
    )
    return st.lists(element, min_size=0, max_size=120)


@pytest.fixture(scope="module")
def scratch() -> Any:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@pytest.mark.timeout(120, method="thread")  # a hang fails fast, not after 600 s
@settings(max_examples=150, deadline=EXAMPLE_DEADLINE, suppress_health_check=[HealthCheck.too_slow])
@given(strings=_string_lists(), big_endian=st.booleans(), tail=st.binary(max_size=16))
def test_string_array_scanning_property(
    scratch: Path, strings: list[bytes], big_endian: bool, tail: bytes
) -> None:
    path = scratch / "s.gguf"
    kv = [KV("tail", tail or b"t", VT.STRING)]
    if strings:
        kv.insert(0, KV("s", strings, VT.ARRAY, VT.STRING))
    write_gguf(path, kv=kv, tensors=[TensorSpec("x", (4,))], big_endian=big_endian)
    g = read_gguf(path, lazy_threshold=0)
    if strings:
        arr = g.metadata["s"]
        assert isinstance(arr, LazyStringArray)
        assert [arr.raw(i) for i in range(len(arr))] == strings
        assert arr.to_list() == [s.decode("utf-8", "replace") for s in strings]
    assert g.metadata["tail"] == (tail or b"t").decode("utf-8", "replace")
    assert [t.name for t in g.tensors] == ["x"]


@pytest.mark.parametrize(
    "kind", ["short", "all-long", "every-50th-long", "zeros-inside", "empty-runs"]
)
def test_large_string_arrays_scan_correctly(tmp_path: Path, kind: str) -> None:
    rng = random.Random(kind)
    n = 30_000 if kind in ("short", "every-50th-long") else 3_000
    out: list[str] = []
    for i in range(n):
        k = rng.randint(1, 20)
        s = "".join(rng.choice("abcdefghĠ") for _ in range(k))
        if kind == "all-long" or (kind == "every-50th-long" and i % 50 == 0):
            s = s * (300 // len(s) + 1)
        elif kind == "zeros-inside" and i % 3 == 0:
            s = s + "\x00" * rng.randint(1, 12) + s
        elif kind == "empty-runs" and i % 4:
            s = ""
        out.append(s)
    kv = [KV("tok", out, VT.ARRAY, VT.STRING), KV("after", 7, VT.UINT32)]
    [path] = write_gguf(tmp_path / "m.gguf", kv=kv, tensors=[TensorSpec("x", (4,))])
    g = read_gguf(path)
    tok = g.metadata["tok"]
    assert isinstance(tok, LazyStringArray)
    assert len(tok) == n
    assert tok.to_list() == out
    assert g.metadata["after"] == 7
    assert g.tensors[0].name == "x"


# ------------------------------------------------------------------------------------------
# Split models


def _split(tmp_path: Path, **kwargs: Any) -> list[Path]:
    kv = [KV("general.name", "splitty", VT.STRING), KV("llama.block_count", 2, VT.UINT32)]
    return write_gguf(
        tmp_path / "model.gguf", kv=kv, tensors=TENSORS[:5], split_max_tensors=2, **kwargs
    )


@pytest.mark.parametrize("with_data", [False, True], ids=["header-only", "with-data"])
def test_split_model_is_combined(tmp_path: Path, with_data: bool) -> None:
    paths = _split(tmp_path, with_data=with_data)
    assert [p.name for p in paths] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert split_part_paths(paths[1]) == tuple(paths)
    for given_path in paths:  # any part finds them all
        g = read_gguf(given_path)
        assert g.paths == tuple(paths)
        assert [t.name for t in g.tensors] == [t.name for t in TENSORS[:5]]
        assert [t.file_index for t in g.tensors] == [0, 0, 1, 1, 2]
        assert g.metadata["split.count"] == 3 and g.metadata["split.no"] == 0
        assert g.metadata["general.name"] == "splitty"
        assert g.file_sizes == tuple(p.stat().st_size for p in paths)
        assert g.file_size == sum(g.file_sizes)
        assert len(g.data_offsets) == len(g.header_sizes) == 3
        assert g.has_tensor_data is with_data
    if with_data:
        g = read_gguf(paths[0])
        for t in g.tensors:
            ref = GGUFReader(paths[t.file_index])
            [theirs] = [r for r in ref.tensors if r.name == t.name]
            assert g.data_offsets[t.file_index] + t.offset == theirs.data_offset
            assert t.n_bytes == theirs.n_bytes


def test_split_model_with_a_missing_part(tmp_path: Path) -> None:
    paths = _split(tmp_path)
    paths[2].unlink()
    with pytest.raises(GgufError, match=r"part 3 of 3 is missing: .*model-00003-of-00003"):
        read_gguf(paths[0])
    paths[0].unlink()
    with pytest.raises(GgufError, match=r"part 1 of 3 is missing: .*model-00001-of-00003"):
        read_gguf(paths[1])


def test_split_part_renamed(tmp_path: Path) -> None:
    paths = _split(tmp_path)
    renamed = tmp_path / "renamed.gguf"
    paths[0].rename(renamed)
    with pytest.raises(GgufError, match="3-part split model"):
        read_gguf(renamed)


def test_split_parts_out_of_order(tmp_path: Path) -> None:
    paths = _split(tmp_path)
    tmp = tmp_path / "t"
    paths[1].rename(tmp)
    paths[2].rename(paths[1])
    tmp.rename(paths[2])
    with pytest.raises(GgufError, match="split part 3, expected 2"):
        read_gguf(paths[0])


def test_split_pattern_names() -> None:
    assert split_part_paths("a/b/plain.gguf") is None
    assert split_part_paths("x-00002-of-00001.gguf") is None
    parts = split_part_paths("/m/Qwen3.6-35B-A3B-IQ4_XS-00002-of-00002.gguf")
    assert parts == (
        Path("/m/Qwen3.6-35B-A3B-IQ4_XS-00001-of-00002.gguf"),
        Path("/m/Qwen3.6-35B-A3B-IQ4_XS-00002-of-00002.gguf"),
    )


def test_single_file_named_like_a_split_part(tmp_path: Path) -> None:
    [path] = write_gguf(tmp_path / "m-00001-of-00001.gguf", tensors=TENSORS[:2])
    g = read_gguf(path)
    assert g.paths == (path,) and len(g.tensors) == 2


# ------------------------------------------------------------------------------------------
# Files that are not there


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(GgufError, match="not found"):
        read_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GgufError, match="directory"):
        read_gguf(tmp_path)


def test_returns_a_gguf_file(tmp_path: Path) -> None:
    [path] = write_gguf(tmp_path / "m.gguf")
    assert isinstance(read_gguf(str(path)), GgufFile)
