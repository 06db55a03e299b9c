"""The replayed trunk graphs: shortened replays, the fitted estimate's error, unmodelled plans."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mtpstudio.core.memory.graph_alloc import reserved_bytes
from mtpstudio.core.memory.hybrid_graph import HybridDims, hybrid_trunk_graph
from mtpstudio.core.memory.terms import (
    UNMODELLED_COMPUTE_MARGIN,
    ComputeShape,
    _fitted_compute_bytes,
    compute_bytes,
    rotation_sides,
)
from mtpstudio.core.memory.trunk_graph import (
    TrunkDims,
    TrunkShape,
    replayed_layers,
    trunk_graph,
)
from mtpstudio.core.model.catalog.header import write_card_header
from mtpstudio.core.model.catalog.models import model_card_info
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.testing.arch_gguf import ArchSpec, write_arch_header
from mtpstudio.testing.arch_table import MODELS, UNMODELLED_MODELS


def _dims(arch: str, n_layer: int, e: int, heads: tuple[int, int, int], **kw: object) -> TrunkDims:
    n_head, n_head_kv, head = heads
    fields: dict[str, object] = dict(
        architecture=arch,
        n_layer=n_layer,
        n_embd=e,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_length=head,
        head_v=head,
        vocab_size=151936,
        ffn_length=4 * e,
        n_expert=0,
        n_expert_used=0,
        expert_ffn_length=0,
        q_bias=False,
        k_bias=False,
        v_bias=False,
        o_bias=False,
        swa_layers=frozenset(),
    )
    fields.update(kw)
    return TrunkDims(**fields)  # type: ignore[arg-type]


def _swa(n: int) -> frozenset[int]:
    return frozenset(i for i in range(n) if i % 6 < 5)


# whole models: 32 to 48 layers of the widths people load
WHOLE = {
    "llama 8B": _dims("llama", 32, 4096, (32, 8, 128), ffn_length=14336),
    "qwen2 7B": _dims(
        "qwen2", 28, 3584, (28, 4, 128), ffn_length=18944, q_bias=True, k_bias=True, v_bias=True
    ),
    "qwen3moe 30B-A3B": _dims(
        "qwen3moe", 48, 2048, (32, 4, 128), n_expert=128, n_expert_used=8, expert_ffn_length=768
    ),
    "mixtral": _dims(
        "llama", 32, 4096, (32, 8, 128), n_expert=8, n_expert_used=2, expert_ffn_length=14336
    ),
    "gemma3 4B": _dims("gemma3", 34, 2560, (8, 4, 256), ffn_length=10240, swa_layers=_swa(34)),
}


@pytest.mark.parametrize("name", list(WHOLE))
def test_a_shortened_replay_equals_the_whole_graphs(name: str) -> None:
    """The replay builds a period of layers plus the last one: every shape gives the bytes of
    the whole 28-48 layer graph (ubatch 1-2048, ctx 4k-128k, flash attention on and off,
    quantized caches with their rotations)."""
    dims = WHOLE[name]
    period = 6 if dims.swa_layers else 2
    n = replayed_layers(dims.n_layer, period)
    assert n < dims.n_layer
    short = dataclasses.replace(
        dims, n_layer=n, swa_layers=frozenset(i for i in dims.swa_layers if i < n)
    )
    for t, kv, fa, rot in itertools.product(
        (1, 64, 512, 2048), (4096, 32768, 131072), (True, False), ((0, 0), (128, 64))
    ):
        if not fa and kv > 32768:
            continue
        swa = min(kv, 1536) if dims.swa_layers else 0
        shape = TrunkShape(t, min(t, 4), kv, swa, fa, *rot)
        whole = reserved_bytes(*trunk_graph(dims, shape))
        assert reserved_bytes(*trunk_graph(short, shape)) == whole, (t, kv, fa, rot)


@pytest.mark.parametrize("card", ["qwen3.6-35b-a3b-iq4_xs", "qwen3.6-27b-iq4_xs"])
def test_a_shortened_hybrid_replay_equals_the_whole_trunk(card: str) -> None:
    """One attention period (four layers) gives the bytes of the whole 40 / 64 layer trunk."""
    dims = HybridDims.of(model_card_info(card))
    short = HybridDims(dims.sizes, 4, frozenset({0, 1, 2}))
    for t, kv, rs, fa in itertools.product((1, 128, 512, 2048), (4096, 131072), (0, 3), (1, 0)):
        if not fa and kv > 32768:
            continue
        shape = TrunkShape(t, min(t, 1 + rs), kv, flash_attn=bool(fa), n_rs_seq=rs)
        whole = reserved_bytes(*hybrid_trunk_graph(dims, shape))
        assert reserved_bytes(*hybrid_trunk_graph(short, shape)) == whole, (t, kv, rs, fa)


def test_replayed_layers_keep_the_last_layer_in_its_place() -> None:
    assert replayed_layers(32, 2) == 2
    assert replayed_layers(33, 2) == 3
    assert replayed_layers(34, 6) == 10  # 34 = 5 * 6 + 4: a period, then four layers
    assert replayed_layers(42, 4) == 6
    assert replayed_layers(3, 4) == 3


def _table_model(name: str, tmp: Path) -> ModelInfo:
    spec = MODELS[name]
    path = tmp / "header.gguf"
    if isinstance(spec, ArchSpec):
        write_arch_header(spec, path)
    else:
        write_card_header(spec, path)
    return read_model_info(path)


def test_the_safety_margin_covers_the_fitted_estimates_misses(tmp_path: Path) -> None:
    """Where a graph is not replayed the plan takes the fitted figure plus the margin: on every
    table model (its replay matches the engine's log) the fitted figure is at most 20 % low,
    so fitted + 35 % stays above the engine's buffer with room to spare."""
    worst = 0.0
    for name in MODELS:
        model = _table_model(name, tmp_path)
        for t, kv, fa, quant in itertools.product(
            (128, 512, 2048), (4096, 32768, 131072), (True, False), (False, True)
        ):
            if not fa and kv > 16384:
                continue
            shape = ComputeShape(t, kv, 1, 1, fa, quant, quant)
            k_rot, v_rot = rotation_sides(model, shape)
            fitted = 4 * (k_rot**2 + v_rot**2) + _fitted_compute_bytes(model, shape, recurrent=True)
            replayed = compute_bytes(model, shape)
            worst = min(worst, fitted / replayed - 1)
            assert fitted * (1 + UNMODELLED_COMPUTE_MARGIN) >= 1.05 * replayed, (name, shape)
    assert -0.20 < worst < -0.05  # the fitted formula does miss: the margin is needed


def _plan_json(model: Path, *args: str) -> dict[str, object]:
    cli = [sys.executable, "-m", "mtpstudio.cli.main", "plan", "--model", str(model), "--json"]
    out = subprocess.run(
        [*cli, "--gpu", "cpu", "--engine", "upstream", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    data: dict[str, object] = json.loads(out.stdout)
    return data


def test_plan_says_in_one_line_when_it_does_not_model_an_architecture(tmp_path: Path) -> None:
    """phi3 (fused projections) is not replayed: one warning line says so, and the compute
    figure carries the margin, above the 86.02 MiB upstream 11434 logged for this model
    (``llama-server -c 8192 -fa on -ub 512``, f16 cache, the table's "phi3 3072 v32k 6L")."""
    phi3 = tmp_path / "phi3.gguf"
    write_arch_header(UNMODELLED_MODELS["phi3 3072 v32k 6L"], phi3)
    data = _plan_json(phi3, "--ctx", "8192", "-ctk", "f16", "-ctv", "f16")
    warnings = [w for w in data["warnings"] if "phi3" in w]  # type: ignore[attr-defined]
    assert len(warnings) == 1 and "does not model phi3" in warnings[0]
    assert "35 % safety margin" in warnings[0]
    cpu = data["devices"][0]  # type: ignore[index]
    assert cpu["segment_trust"]["compute"] == "estimate"
    assert cpu["segments"]["compute"] / 2**20 >= 86.02

    llama = tmp_path / "llama.gguf"
    write_arch_header(MODELS["llama 1024 v32k 8L"], llama)
    data = _plan_json(llama, "--ctx", "32768", "-ctk", "f16", "-ctv", "f16")
    assert not [w for w in data["warnings"] if "does not model" in w]  # type: ignore[attr-defined]
    cpu = data["devices"][0]  # type: ignore[index]
    assert cpu["segment_trust"]["compute"] == "exact"
    assert round(cpu["segments"]["compute"] / 2**20, 2) == 58.52  # the engine's log line
