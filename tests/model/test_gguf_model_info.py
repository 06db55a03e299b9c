"""ModelInfo derived from GGUF headers matches what was written (qwen35moe + MTP, dense, SSM)."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path
from typing import Any

import pytest
from support.gguf_builders import (
    KV,
    QT,
    VT,
    Qwen35MoeParams,
    TensorSpec,
    qwen35moe_specs,
    raw_header,
    raw_kv,
    write_gguf,
    write_qwen35moe,
)

from mtpstudio.core.errors import GgufError
from mtpstudio.core.model.gguf import model_info_from_gguf, read_gguf, read_model_info
from mtpstudio.core.model.info import ModelInfo

QWEN36 = Qwen35MoeParams()


@pytest.fixture(scope="module")
def qwen36(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelInfo]:
    [path] = write_qwen35moe(tmp_path_factory.mktemp("q") / "Qwen3.6-35B-A3B-IQ4_XS.gguf")
    return path, read_model_info(path)


def _layers_with(info: ModelInfo, suffix: str) -> tuple[int, ...]:
    return tuple(
        sorted({t.layer for t in info.tensors if t.name.endswith(suffix) and t.layer is not None})
    )


def test_qwen35moe_hyperparameters(qwen36: tuple[Path, ModelInfo]) -> None:
    _, m = qwen36
    p = QWEN36
    assert m.architecture == "qwen35moe"
    assert m.name == "Qwen3.6-35B-A3B test"
    assert m.block_count == p.n_trunk + p.n_nextn
    assert m.n_layer == p.n_trunk and m.n_nextn_layer == p.n_nextn
    assert m.has_mtp and m.is_moe
    assert m.n_embd == p.n_embd
    assert (m.n_head, m.n_head_kv) == (p.n_head, p.n_head_kv)
    assert (m.key_length, m.value_length) == (p.head_dim, p.head_dim)
    assert m.context_length == p.context_length
    assert m.vocab_size == p.vocab_size
    assert (m.n_expert, m.n_expert_used) == (p.n_expert, p.n_expert_used)
    assert (m.expert_ffn_length, m.shared_expert_ffn_length) == (p.n_ff_exp, p.n_ff_shexp)
    assert m.ffn_length == 0  # not written
    assert m.full_attention_interval == p.interval
    assert m.ssm_conv_kernel == p.ssm_conv
    assert m.ssm_inner_size == p.ssm_state * p.ssm_dt_rank
    assert m.ssm_state_size == p.ssm_state
    assert m.ssm_time_step_rank == p.ssm_dt_rank
    assert m.ssm_group_count == p.ssm_group
    assert m.file_type == "IQ4_XS"


def test_qwen35moe_layer_layout_matches_the_tensor_table(qwen36: tuple[Path, ModelInfo]) -> None:
    _, m = qwen36
    # recurrent layers are the ones with SSM tensors; attention layers the trunk ones with Q
    assert m.recurrent_layers == _layers_with(m, ".ssm_a")
    trunk_q = tuple(i for i in _layers_with(m, ".attn_q.weight") if i < m.n_layer)
    assert m.attention_layers == trunk_q
    assert len(m.attention_layers) == m.n_layer // QWEN36.interval
    assert _layers_with(m, ".nextn.eh_proj.weight") == tuple(range(m.n_layer, m.block_count))


def test_qwen35moe_sizes(qwen36: tuple[Path, ModelInfo]) -> None:
    path, m = qwen36
    _, specs = qwen35moe_specs(QWEN36)
    assert m.n_params == sum(s.n_elements for s in specs)
    assert m.tensor_bytes == sum(s.n_bytes for s in specs)
    mix: dict[str, int] = {}
    for s in specs:
        mix[s.qtype.name] = mix.get(s.qtype.name, 0) + s.n_bytes
    assert m.quant_mix == mix
    assert set(mix) == {"IQ4_XS", "Q8_0", "F32"}
    assert m.bits_per_weight == pytest.approx(8 * m.tensor_bytes / m.n_params)
    assert 4.0 < m.bits_per_weight < 5.0  # an IQ4_XS-expert model
    assert 34e9 < m.n_params < 36e9  # "35B"
    assert m.file_size == path.stat().st_size
    assert m.paths == (str(path),)
    assert len(m.tensors) == len(specs)


def test_explicit_recurrent_layer_flags_win(tmp_path: Path) -> None:
    rng = random.Random(3)
    flags = tuple(rng.random() < 0.6 for _ in range(8))
    p = dataclasses.replace(
        QWEN36, n_trunk=8, n_nextn=1, recurrent_flags=(*flags, False), n_expert=4
    )
    [path] = write_qwen35moe(tmp_path / "m.gguf", p)
    m = read_model_info(path)
    assert m.recurrent_layers == tuple(i for i, f in enumerate(flags) if f)
    assert m.recurrent_layers == _layers_with(m, ".ssm_a")


@pytest.mark.parametrize("interval", [2, 3, 4])
def test_recurrent_layers_derived_from_interval(tmp_path: Path, interval: int) -> None:
    p = dataclasses.replace(QWEN36, n_trunk=9, n_nextn=2, interval=interval, n_expert=4)
    [path] = write_qwen35moe(tmp_path / "m.gguf", p)
    m = read_model_info(path)
    assert m.full_attention_interval == interval
    assert (m.n_layer, m.n_nextn_layer, m.block_count) == (9, 2, 11)
    assert m.recurrent_layers == _layers_with(m, ".ssm_a")
    assert all(i < m.n_layer for i in m.recurrent_layers)


def test_interval_defaults_to_four_for_hybrid_archs(tmp_path: Path) -> None:
    p = dataclasses.replace(QWEN36, n_trunk=8, n_nextn=0, write_interval=False, n_expert=4)
    [path] = write_qwen35moe(tmp_path / "m.gguf", p)
    m = read_model_info(path)
    assert m.full_attention_interval == 4
    assert m.recurrent_layers == _layers_with(m, ".ssm_a") == (0, 1, 2, 4, 5, 6)
    assert not m.has_mtp


def test_vocab_size_from_tokens_array(tmp_path: Path) -> None:
    tokens = tuple(f"t{i}" for i in range(1000))
    p = dataclasses.replace(QWEN36, n_trunk=4, n_expert=4, vocab_size=1000, tokens=tokens)
    [path] = write_qwen35moe(tmp_path / "m.gguf", p)
    g = read_gguf(path)
    assert "qwen35moe.vocab_size" not in g.metadata
    assert model_info_from_gguf(g).vocab_size == len(tokens)


def _dense(tmp_path: Path, arch: str = "llama", extra: list[KV] | None = None, **kw: Any) -> Path:
    kv = [
        KV(f"{arch}.block_count", 4, VT.UINT32),
        KV(f"{arch}.embedding_length", 512, VT.UINT32),
        KV(f"{arch}.attention.head_count", 8, VT.UINT32),
        KV(f"{arch}.feed_forward_length", 1376, VT.UINT32),
        KV(f"{arch}.context_length", 8192, VT.UINT32),
        *(extra or []),
    ]
    tensors = [
        TensorSpec("token_embd.weight", (512, 3000), QT.Q4_K),
        TensorSpec("blk.0.attn_q.weight", (512, 512), QT.Q6_K),
        TensorSpec("output_norm.weight", (512,)),
    ]
    [path] = write_gguf(tmp_path / "dense-7b.gguf", arch, kv=kv, tensors=tensors, **kw)
    return path


def test_dense_model_defaults(tmp_path: Path) -> None:
    m = read_model_info(_dense(tmp_path))
    assert m.architecture == "llama" and m.name == "dense-7b"
    assert (m.block_count, m.n_layer, m.n_nextn_layer) == (4, 4, 0)
    assert m.n_head_kv == m.n_head == 8  # head_count_kv defaults to head_count
    assert m.key_length == m.value_length == 512 // 8
    assert m.ffn_length == 1376 and m.context_length == 8192
    assert m.vocab_size == 3000  # from token_embd's second dimension
    assert not m.is_moe and not m.has_mtp
    assert m.recurrent_layers == () and m.attention_layers == (0, 1, 2, 3)
    assert m.file_type is None
    assert m.quant_mix == {
        "Q4_K": 512 * 3000 // 256 * 144,
        "Q6_K": 512 * 512 // 256 * 210,
        "F32": 512 * 4,
    }


def test_vocab_size_key(tmp_path: Path) -> None:
    path = _dense(tmp_path, extra=[KV("llama.vocab_size", 4242, VT.UINT32)])
    assert read_model_info(path).vocab_size == 4242


def test_per_layer_arrays_and_kv_less_layers(tmp_path: Path) -> None:
    head_kv = [0, 0, 0, 4, 0, 0, 0, 4]
    ffn = [1024, 2048, 1024, 1024, 1024, 1024, 1024, 512]
    kv = [
        KV("jamba.block_count", 8, VT.UINT32),
        KV("jamba.embedding_length", 256, VT.UINT32),
        KV("jamba.attention.head_count", 8, VT.UINT32),
        KV("jamba.attention.head_count_kv", head_kv, VT.ARRAY, VT.INT32),
        KV("jamba.feed_forward_length", ffn, VT.ARRAY, VT.UINT32),
        KV("jamba.ssm.state_size", 16, VT.UINT32),
    ]
    [path] = write_gguf(tmp_path / "j.gguf", "jamba", kv=kv)
    m = read_model_info(path)
    assert m.n_head_kv == max(head_kv)
    assert m.ffn_length == max(ffn)
    assert m.recurrent_layers == tuple(i for i, n in enumerate(head_kv) if n == 0)
    assert m.attention_layers == (3, 7)
    assert m.ssm_state_size == 16


def test_pure_recurrent_arch(tmp_path: Path) -> None:
    kv = [
        KV("mamba.block_count", 6, VT.UINT32),
        KV("mamba.embedding_length", 256, VT.UINT32),
        KV("mamba.ssm.conv_kernel", 4, VT.UINT32),
        KV("mamba.ssm.inner_size", 512, VT.UINT32),
    ]
    [path] = write_gguf(tmp_path / "m.gguf", "mamba", kv=kv)
    m = read_model_info(path)
    assert m.recurrent_layers == tuple(range(6)) and m.attention_layers == ()
    assert (m.n_head, m.key_length) == (0, 0)
    assert (m.ssm_conv_kernel, m.ssm_inner_size) == (4, 512)


@pytest.mark.parametrize(
    ("value", "name"),
    [(15, "Q4_K_M"), (0, "F32"), (1, "F16"), (1024, "GUESSED"), (999, "FTYPE_999")],
)
def test_file_type_names(tmp_path: Path, value: int, name: str) -> None:
    path = _dense(tmp_path, extra=[KV("general.file_type", value, VT.UINT32)])
    assert read_model_info(path).file_type == name


def test_split_model_info(tmp_path: Path) -> None:
    p = dataclasses.replace(QWEN36, n_trunk=4, n_expert=4)
    paths = write_qwen35moe(tmp_path / "Qwen-Split.gguf", p, split_max_tensors=20)
    assert len(paths) > 2
    m = read_model_info(paths[-1])
    single = read_model_info(write_qwen35moe(tmp_path / "single.gguf", p)[0])
    assert m.paths == tuple(str(x) for x in paths)
    assert m.file_size == sum(x.stat().st_size for x in paths)
    assert m.n_params == single.n_params and m.tensor_bytes == single.tensor_bytes
    assert m.recurrent_layers == single.recurrent_layers
    assert m.block_count == single.block_count
    assert {t.file_index for t in m.tensors} == set(range(len(paths)))


def test_name_falls_back_to_split_prefix(tmp_path: Path) -> None:
    kv = [KV("llama.block_count", 1, VT.UINT32), KV("llama.embedding_length", 64, VT.UINT32)]
    tensors = [TensorSpec("a", (32,)), TensorSpec("b", (32,))]
    paths = write_gguf(tmp_path / "My-Model.gguf", kv=kv, tensors=tensors, split_max_tensors=1)
    assert read_model_info(paths[1]).name == "My-Model"


# ------------------------------------------------------------------------------------------
# Missing or wrong keys


@pytest.mark.parametrize("missing", ["llama.block_count", "llama.embedding_length"])
def test_missing_required_key(tmp_path: Path, missing: str) -> None:
    kv = [
        KV(k, 8, VT.UINT32) for k in ("llama.block_count", "llama.embedding_length") if k != missing
    ]
    [path] = write_gguf(tmp_path / "m.gguf", kv=kv)
    with pytest.raises(GgufError, match=re.escape(f"required key '{missing}' is missing")):
        read_model_info(path)


def test_missing_architecture(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(raw_header(0, 1) + raw_kv("llama.block_count", VT.UINT32, 2))
    with pytest.raises(GgufError, match=r"required key 'general\.architecture' is missing"):
        read_model_info(path)


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (KV("llama.block_count", "8", VT.STRING), "'llama.block_count' should be"),
        (KV("llama.block_count", 1.5, VT.FLOAT32), "'llama.block_count' should be"),
        (KV("llama.block_count", 2**40, VT.UINT64), "block_count is 1099511627776"),
        (KV("llama.block_count", 0, VT.UINT32), "block_count is 0"),
        (KV("llama.nextn_predict_layers", 9, VT.UINT32), "nextn_predict_layers \\(9\\) exceeds"),
        (KV("llama.attention.head_count", -4, VT.INT32), "'llama.attention.head_count' should"),
        (KV("llama.attention.head_count_kv", ["a"], VT.ARRAY, VT.STRING), "head_count_kv"),
        (KV("llama.expert_count", True, VT.BOOL), "'llama.expert_count' should be"),
    ],
)
def test_wrong_key_types(tmp_path: Path, item: KV, says: str) -> None:
    kv = [KV("llama.embedding_length", 64, VT.UINT32)]
    if item.key != "llama.block_count":
        kv.append(KV("llama.block_count", 8, VT.UINT32))
    kv.append(item)
    [path] = write_gguf(tmp_path / "m.gguf", kv=kv)
    with pytest.raises(GgufError, match=says) as info:
        read_model_info(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_architecture_must_be_a_string(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(raw_header(0, 1) + raw_kv("general.architecture", VT.UINT32, 7))
    with pytest.raises(GgufError, match=r"'general\.architecture' should be a string"):
        read_model_info(path)


def test_read_model_info_equals_two_step(qwen36: tuple[Path, ModelInfo]) -> None:
    path, m = qwen36
    assert model_info_from_gguf(read_gguf(path)) == m


def test_explicit_key_and_value_lengths(tmp_path: Path) -> None:
    extra = [
        KV("llama.attention.key_length", 192, VT.UINT32),
        KV("llama.attention.value_length", 128, VT.UINT32),
        KV("llama.attention.head_count_kv", 2, VT.UINT32),
    ]
    m = read_model_info(_dense(tmp_path, extra=extra))
    assert (m.key_length, m.value_length, m.n_head, m.n_head_kv) == (192, 128, 8, 2)
