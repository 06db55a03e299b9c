"""The replayed trunk graphs: shortened replays, the fitted estimate's error, unmodelled plans."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.alloc_trace import ENGINE_LOGS, engine_trace

from devkit.arch_gguf import ArchSpec, hybrid_spec, write_arch_header
from devkit.arch_table import MODELS, UNMODELLED_MODELS
from devkit.budget_check import LoadConfig
from mtpstudio.core.catalog.header import write_card_header
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.catalog.spec import ModelCardSpec
from mtpstudio.core.engines.registry import memory_facts
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.cuda_rules import CC_ADA_LOVELACE, CudaRules
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.graph_alloc import AllocEvent, ModelDims, Tensor, reserved_bytes
from mtpstudio.core.memory.hybrid_graph import HybridDims, hybrid_trunk_graph
from mtpstudio.core.memory.terms import (
    UNMODELLED_COMPUTE_MARGIN,
    ComputeShape,
    _fitted_compute_bytes,
    compute_bytes,
    rotation_sides,
    swa_cells,
)
from mtpstudio.core.memory.trunk_graph import (
    TrunkDims,
    TrunkShape,
    largest_reservation,
    nextn_block_graph,
    replayed_layers,
    trunk_graph,
    trunk_replay_layers,
)
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict


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


def _random_dims(rng: random.Random) -> tuple[TrunkDims, TrunkShape]:
    arch = rng.choice(["llama", "qwen2", "qwen3", "qwen3moe", "gemma3"])
    e = rng.choice([256, 896, 1024, 2048, 2560, 3584, 4096, 5120])
    head = rng.choice([64, 128, 256])
    n_head = max(1, e // head) * rng.choice([1, 2])
    moe = arch == "qwen3moe" or (arch == "llama" and rng.random() < 0.3)
    n_layer = rng.choice([24, 26, 28, 34, 36])
    dims = _dims(
        arch,
        n_layer,
        e,
        (n_head, max(1, n_head // rng.choice([1, 2, 4, 8])), head),
        vocab_size=rng.choice([4000, 32000, 151936, 262144]),
        ffn_length=rng.choice([2, 3, 4, 6]) * e,
        n_expert=rng.choice([8, 64, 128]) if moe else 0,
        n_expert_used=rng.choice([2, 8]) if moe else 0,
        expert_ffn_length=rng.choice([768, 1408, 3 * e]) if moe else 0,
        q_bias=arch == "qwen2",
        k_bias=arch == "qwen2",
        v_bias=arch == "qwen2",
        swa_layers=_swa(n_layer) if arch == "gemma3" else frozenset(),
        qk_norm=arch in {"qwen3", "qwen3moe", "gemma3"},
    )
    t = rng.choice([1, 32, 128, 512, 2048])
    kv = rng.choice([256, 4096, 32768, 131072])
    fa = rng.random() < 0.6 or kv * t * n_head > 2**31
    rot = rng.choice([(0, 0), (head, 64)])
    swa = min(kv, 1536) if dims.swa_layers else 0
    return dims, TrunkShape(t, min(t, rng.choice([1, 4])), kv, swa, fa, *rot)


def test_a_shortened_replay_equals_the_whole_graphs() -> None:
    """The replay builds four layers (gemma3: twelve to seventeen) that end like the model:
    over random widths, ubatches, contexts, flash attention on and off and quantized caches,
    it gives the bytes of the whole 24-36 layer graph."""
    rng = random.Random(26)
    for _ in range(150):
        dims, shape = _random_dims(rng)
        n = trunk_replay_layers(dims)
        assert n < dims.n_layer
        short = dataclasses.replace(
            dims, n_layer=n, swa_layers=frozenset(i for i in dims.swa_layers if i < n)
        )
        whole = reserved_bytes(*trunk_graph(dims, shape))
        assert reserved_bytes(*trunk_graph(short, shape)) == whole, (dims, shape)


def test_a_shortened_hybrid_replay_equals_the_whole_trunk() -> None:
    """Two attention periods (eight layers, plus what ends the model like the real one) give
    the bytes of the whole trunk: the 40 and 64 layer cards, and random hybrid widths."""
    rng = random.Random(35)
    cases = [
        HybridDims.of(model_card_info(c)) for c in ("qwen3.6-35b-a3b-iq4_xs", "qwen3.6-27b-iq4_xs")
    ]
    for _ in range(12):
        moe = rng.random() < 0.5
        sizes = ModelDims(
            rng.choice([1024, 2048, 4096, 5120]),
            rng.choice([8, 16, 32]),
            rng.choice([1, 2, 4, 8]),
            rng.choice([128, 256]),
            248320,
            rng.choice([64, 256]) if moe else 0,
            8 if moe else 0,
            0 if moe else 17408,
            512 if moe else 0,
            512 if moe else 0,
            128,
            16,
            128 * rng.choice([16, 32, 48]),
            4,
        )
        n = rng.choice([30, 40, 48])
        cases.append(HybridDims(sizes, n, frozenset(i for i in range(n) if (i + 1) % 4)))
    for dims in cases:
        t = rng.choice([1, 32, 128, 512, 2048])
        rs = rng.choice([0, 3])
        fa = rng.random() < 0.7
        kv = rng.choice([4096, 32768] if not fa else [4096, 131072])
        shape = TrunkShape(t, min(t, 1 + rs), kv, flash_attn=fa, n_rs_seq=rs)
        n = replayed_layers(dims.n_layer, 4, 8)
        short = HybridDims(dims.sizes, n, frozenset(i for i in dims.recurrent_layers if i < n))
        whole = reserved_bytes(*hybrid_trunk_graph(dims, shape))
        assert reserved_bytes(*hybrid_trunk_graph(short, shape)) == whole, (dims, shape)


def test_replayed_layers_keep_the_last_layer_in_its_place() -> None:
    assert replayed_layers(32, 1, 4) == 4
    assert replayed_layers(34, 6, 12) == 16  # 34 = 5 * 6 + 4: the last layer is windowed
    assert replayed_layers(40, 4, 8) == 8
    assert replayed_layers(42, 4, 8) == 10
    assert replayed_layers(3, 4, 8) == 3


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


def _spec(
    arch: str, vocab: int, e: int, layers: int, heads: tuple[int, int, int], **kw: object
) -> ArchSpec:
    n_head, n_head_kv, head = heads
    return ArchSpec(arch, vocab, e, layers, n_head, n_head_kv, head, **kw)  # type: ignore[arg-type]


_GEMMA3 = _spec(
    "gemma3", 262144, 1152, 7, (4, 1, 256), ffn_length=6912, sliding_window=512, tied_output=True
)
_LLAMA = _spec("llama", 32000, 1024, 3, (16, 8, 64), ffn_length=2816)
# name -> (model, ctx, ubatch, slots, flash attention, cache type, draft max)
TRACES: dict[str, tuple[ArchSpec | ModelCardSpec, int, int, int, bool, str, int]] = {
    "llama-3L-4k-ub512": (_LLAMA, 4096, 512, 1, True, "f16", 0),
    "llama-3L-4k-ub256-fa-off": (_LLAMA, 4096, 256, 1, False, "f16", 0),
    "llama-moe-2L-4k-ub512": (
        _spec("llama", 32000, 2048, 2, (16, 8, 128), ffn_length=5632, n_expert=8, n_expert_used=2),
        4096,
        512,
        1,
        True,
        "f16",
        0,
    ),
    "qwen2-2L-4k-ub512-q8_0": (
        _spec("qwen2", 151936, 896, 2, (14, 2, 64), ffn_length=4864, qkv_bias=True),
        4096,
        512,
        1,
        True,
        "q8_0",
        0,
    ),
    "qwen3-3L-8k-ub512-np2": (
        _spec("qwen3", 151936, 1024, 3, (16, 8, 128), ffn_length=3072, qk_norm=True),
        8192,
        512,
        2,
        True,
        "f16",
        0,
    ),
    "qwen3moe-2L-4k-ub512": (
        _spec(
            "qwen3moe",
            151936,
            2048,
            2,
            (32, 4, 128),
            n_expert=128,
            n_expert_used=8,
            expert_ffn_length=768,
            qk_norm=True,
        ),
        4096,
        512,
        1,
        True,
        "f16",
        0,
    ),
    "glm4moe-3L-4k-ub512": (
        _spec(
            "glm4moe",
            151552,
            1024,
            3,
            (16, 4, 128),
            ffn_length=2816,
            n_expert=16,
            n_expert_used=4,
            expert_ffn_length=512,
            dense_lead=1,
            shared_experts=1,
            qkv_bias=True,
        ),
        4096,
        512,
        1,
        True,
        "f16",
        0,
    ),
    "gemma3-7L-8k-ub512": (_GEMMA3, 8192, 512, 1, True, "f16", 0),
    "gemma3-7L-8k-ub512-q8_0": (_GEMMA3, 8192, 512, 1, True, "q8_0", 0),
    "gemma3-7L-4k-ub256-fa-off": (_GEMMA3, 4096, 256, 1, False, "f16", 0),
    "qwen35moe-4L-4k-ub512-mtp2": (hybrid_spec("moe", n_layer=4), 4096, 512, 1, True, "f16", 2),
    "qwen35moe-4L-8k-ub512-q8_0-np2": (
        hybrid_spec("moe", n_layer=4),
        8192,
        512,
        2,
        True,
        "q8_0",
        0,
    ),
    "qwen35-4L-4k-ub256-fa-off": (hybrid_spec("dense", n_layer=4), 4096, 256, 1, False, "f16", 0),
}


@pytest.mark.parametrize("name", list(TRACES))
def test_the_trunk_graph_replays_the_engines_allocator_trace(name: str, tmp_path: Path) -> None:
    """Every allocation and free of the trunk's first reservation, at the engine's offsets.

    Recorded with upstream 11434 built with ggml-alloc.c's AT_PRINTF on (``-lv 5``), loading
    the zero-weight model of ``TRACES`` (``devkit.arch_gguf``): ``llama-server -c CTX
    -np SLOTS -fa on|off -ub UBATCH [-ctk T -ctv T] [--spec-type draft-mtp --spec-draft-n-max
    N] --no-warmup`` (``tests/fixtures/engine_logs/upstream-11434-trunk-alloc-NAME.txt``).
    """
    spec, ctx, ubatch, slots, fa, cache, draft_max = TRACES[name]
    path = tmp_path / "header.gguf"
    if isinstance(spec, ArchSpec):
        write_arch_header(spec, path)
    else:
        write_card_header(spec, path)
    model = read_model_info(path)
    quant = cache != "f16"
    n_ctx_seq = ctx // slots
    k_rot, v_rot = rotation_sides(model, ComputeShape(ubatch, n_ctx_seq, 1, 1, fa, quant, quant))
    shape = TrunkShape(
        ubatch,
        min(ubatch, slots * (1 + draft_max)),
        n_ctx_seq,
        swa_cells(model, n_ctx_seq, ubatch),
        fa,
        k_rot,
        v_rot,
        draft_max,
        slots,
    )
    if model.recurrent_layers:
        graph = hybrid_trunk_graph(HybridDims.of(model), shape)
    else:
        graph = trunk_graph(TrunkDims.of(model), shape)
    want = engine_trace(ENGINE_LOGS / f"upstream-11434-trunk-alloc-{name}.txt")
    got: list[AllocEvent] = []
    reserved_bytes(*graph, events=got)
    assert len(want) > 40
    assert got == want


def test_the_glm4moe_draft_graph_replays_the_engines_allocator_trace(tmp_path: Path) -> None:
    """Every allocation and free of GLM-4.5's MTP draft graph (one block on the target's
    hidden state), at the engine's offsets.

    Recorded like the trunk traces, on ``TRACES["glm4moe-3L-4k-ub512"]`` with one MTP block
    after the trunk: ``llama-server -c 4096 -np 1 -fa on -ub 512 -ctk q8_0 -ctv q8_0
    --spec-type draft-mtp --spec-draft-n-max 2 --spec-draft-type-k q8_0 --spec-draft-type-v
    q8_0 --no-warmup``; the draft context's 512-token reservation (its log line: 18.09 MiB).
    """
    path = tmp_path / "header.gguf"
    write_arch_header(dataclasses.replace(TRACES["glm4moe-3L-4k-ub512"][0], nextn=1), path)
    model = read_model_info(path)
    assert model.n_layer == 3 and model.n_nextn_layer == 1
    k_rot, v_rot = rotation_sides(model, ComputeShape(512, 4096, 1, 1, True, True, True))
    shape = TrunkShape(512, 1, 4096, k_rot=k_rot, v_rot=v_rot)
    want = engine_trace(ENGINE_LOGS / "upstream-11434-mtp-alloc-glm4moe-3L-4k-ub512-q8_0.txt")
    got: list[AllocEvent] = []
    reserved_bytes(*nextn_block_graph(TrunkDims.of(model), shape), events=got)
    assert len(want) > 60
    assert got == want


def test_the_one_token_graph_is_skipped_only_when_it_cannot_be_larger() -> None:
    """The buffer is the larger of the two reservations; the second walk is left out only
    when the sum of its blocks is below the first's buffer: the answer never changes."""
    rng = random.Random(7)
    skipped = 0
    for _ in range(60):
        dims, shape = _random_dims(rng)
        dims = dataclasses.replace(dims, n_layer=4, swa_layers=frozenset(), n_dense_lead=0)
        both = max(reserved_bytes(*trunk_graph(dims, s)) for s in (shape, shape.one_token()))
        assert largest_reservation(lambda s, d=dims: trunk_graph(d, s), shape) == both
        tg = trunk_graph(dims, shape.one_token())
        skipped += sum(t.nbytes for t in (*tg[0], *tg[1]) if t.view_of is None) < both
    assert skipped > 10  # the shortcut is taken


def test_a_draft_graph_that_is_not_replayed_carries_the_margin_and_says_so() -> None:
    """The Qwen3.6 draft graph is replayed with flash attention only: without it the draft
    buffer is the fitted estimate plus the margin, and one warning line says so."""
    info = model_card_info("qwen3.6-35b-a3b-iq4_xs")
    facts = memory_facts(EngineFlavour.UPSTREAM)
    cpu = TargetDevice("CPU", "CPU", None)
    on = LoadConfig("fa on", 8192, mtp=2)
    off = LoadConfig("fa off", 8192, mtp=2, fa="off")
    replayed = compute_budget(plan_from_dict(on.plan_data()), info, cpu, facts)
    fitted = compute_budget(plan_from_dict(off.plan_data()), info, cpu, facts)
    assert not [w for w in replayed.warnings if "does not model" in w]
    lines = [w for w in fitted.warnings if "does not model" in w]
    assert len(lines) == 1 and "MTP draft graph" in lines[0] and "35 %" in lines[0]
    shape = ComputeShape(512, 8192, 1, 1, False)
    estimate = compute_bytes(info, shape, recurrent=False)
    assert fitted.parts["mtp_compute"] == int(estimate * (1 + UNMODELLED_COMPUTE_MARGIN))


def test_a_glm4moe_plan_with_mtp_is_replayed_and_says_nothing_is_missing(tmp_path: Path) -> None:
    """GLM-4.5-Air width with its MTP block, MTP on (draft max 1, 8k): both compute buffers
    are replayed (labelled exact on CPU, no margin line) and equal what upstream 11434 logged
    for this load (``benchmarks/arch_accuracy.py``: 112.14 and 146.76 MiB)."""
    path = tmp_path / "glm.gguf"
    write_arch_header(MODELS["glm4moe 4096 128x8 2L+MTP"], path)
    info = read_model_info(path)
    config = LoadConfig("mtp dmax1 8k", 8192, mtp=1)
    budget = compute_budget(
        plan_from_dict(config.plan_data()),
        info,
        TargetDevice("CPU", "CPU", None),
        memory_facts(EngineFlavour.UPSTREAM),
    )
    assert not [w for w in budget.warnings if "does not model" in w]
    assert round(budget.parts["compute"] / 2**20, 2) == 112.14
    assert round(budget.parts["mtp_compute"] / 2**20, 2) == 146.76
    trust = budget.to_json()["devices"][0]["segment_trust"]  # type: ignore[index]
    assert trust["compute"] == trust["mtp_compute"] == "exact"

    # ik_llama.cpp builds its own draft graph (one per slot): not replayed, so the margin
    ik = compute_budget(
        plan_from_dict({**config.plan_data(), "engine": {"flavour": "ik"}}),
        info,
        TargetDevice("CPU", "CPU", None),
        memory_facts(EngineFlavour.IK),
    )
    lines = [w for w in ik.warnings if "MTP draft graph" in w]
    assert len(lines) == 1 and "ik" in lines[0] and "35 %" in lines[0]
    assert ik.parts["mtp_compute"] > budget.parts["mtp_compute"]
    assert ik.to_json()["devices"][0]["segment_trust"]["mtp_compute"] == "estimate"  # type: ignore[index]


# --- under CUDA's rules (issue 28's rules through these replays) -------------------------------


def _attention_extra(graph: tuple[list[Tensor], list[Tensor]], rules: CudaRules) -> set[int]:
    """What CUDA's rules add to each flash-attention node of ``graph`` (bytes)."""
    nodes = graph[1]
    return {rules.alloc_size(n) - n.nbytes for n in nodes if n.op == "FLASH_ATTN_EXT"}


def test_the_replays_carry_what_cudas_rules_read() -> None:
    """The trunk, hybrid and GLM-4.5 draft graphs give their attention nodes the cache's
    shape and types (CUDA converts a q8_0 K and V to F16 copies behind the output: 2 x 128 MiB
    for 256-wide heads, 2 KV heads, 128k cells) and mark the token lookups as host ops."""
    rules = CudaRules(cc=CC_ADA_LOVELACE)
    copies = 2 * 256 * 131072 * 2 * 2  # K and V, F16
    q8 = TrunkShape(512, 1, 131072, k_rot=256, v_rot=64, cache_types=("q8_0", "q8_0"))
    f16 = TrunkShape(512, 1, 131072)
    hybrid = HybridDims.of(model_card_info("qwen3.6-35b-a3b-iq4_xs"))
    hybrid = dataclasses.replace(hybrid, n_layer=4)
    plain = _dims("qwen3", 2, 2048, (16, 2, 256))
    glm = _dims("glm4moe", 2, 2048, (16, 2, 256), n_expert=8, n_expert_used=2)
    glm = dataclasses.replace(glm, expert_ffn_length=512, n_dense_lead=1)
    for build in (
        lambda s: hybrid_trunk_graph(hybrid, s),
        lambda s: trunk_graph(plain, s),
        lambda s: nextn_block_graph(glm, s),
    ):
        assert _attention_extra(build(f16), rules) == {0}
        (extra,) = _attention_extra(build(q8), rules)
        assert copies <= extra < copies + 2 * 128  # each copy 128-aligned
        leafs, nodes = build(q8)
        lookups = [n for n in nodes if n.op == "GET_ROWS" and n.host]
        ids = {t.name for n in lookups for t in n.srcs if t.is_input}
        assert ids and ids <= {"inp_tokens", "tokens", "inp_mixed_tokens"}
        kept = rules.prepare(leafs, nodes)  # token ids stay on the host: no device copies
        names = {t.name for t in (*kept.leafs, *kept.nodes)}
        assert not {f"CUDA0#{t}#0" for t in ("inp_tokens", "tokens", "inp_mixed_tokens")} & names


def test_a_cuda_plan_replays_the_trunk_under_cudas_rules_and_says_it_follows_the_source(
    tmp_path: Path,
) -> None:
    """On a CUDA card the trunk's buffer is the replay under CUDA's rules and scheduler (flash
    attention's F16 copies of a q8_0 cache in the attention node), as is GLM-4.5's draft
    buffer: ``source`` on an Ada card (the GPU kit measured these rules on Hopper cards, with
    the Qwen3.6 graphs); the CPU's stay ``exact``."""
    path = tmp_path / "glm.gguf"
    write_arch_header(MODELS["glm4moe 4096 128x8 2L+MTP"], path)
    info = read_model_info(path)
    q8 = {"ctk": "q8_0", "ctv": "q8_0", "draft_ctk": "q8_0", "draft_ctv": "q8_0"}
    config = LoadConfig("mtp dmax3 32k q8_0/q8_0", 32768, mtp=3, **q8)
    plan = plan_from_dict(config.plan_data())
    facts = memory_facts(EngineFlavour.UPSTREAM)
    card = TargetDevice("CUDA0", "card", 48 * 2**30, vendor="nvidia", compute_capability="8.9")
    cpu = compute_budget(plan, info, TargetDevice("CPU", "CPU", None), facts)
    cuda = compute_budget(plan, info, card, facts)
    assert not [w for w in cuda.warnings if "does not model" in w]
    grown = cuda.parts["compute"] - cpu.parts["compute"]
    copy = 128 * 32768 * 8 * 2  # one F16 copy of K or V (128-wide, 8 KV heads)
    # the attention node takes both copies; the buffer grows by what the walk cannot reuse
    assert copy < grown <= 2 * copy + 2**20
    trust = cuda.to_json()["devices"][0]["segment_trust"]  # type: ignore[index]
    assert trust["compute"] == "source" and trust["mtp_compute"] == "source"
    cpu_trust = cpu.to_json()["devices"][0]["segment_trust"]  # type: ignore[index]
    assert cpu_trust["compute"] == cpu_trust["mtp_compute"] == "exact"
