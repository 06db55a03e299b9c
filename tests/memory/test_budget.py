"""The memory model on the demo card: figures checked against engines.md's own arithmetic."""

from __future__ import annotations

import re

import pytest

from mtpstudio.core.catalog.gpus import gpu_card
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.profiles.ik import MEMORY as IK_FACTS
from mtpstudio.core.engines.profiles.upstream import MEMORY as UPSTREAM_FACTS
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.machine import MachineFacts
from mtpstudio.core.memory.placement import EXPERT_TENSOR, ModelWeights, cuda_alloc_size
from mtpstudio.core.memory.targets import catalogue_target
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_from_dict, plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.levers import LeverBench, fewest_cpu_expert_layers, largest_context
from mtpstudio.core.planner.resolve import Budget, PlanningContext, budget_for, lever_bench, resolve
from mtpstudio.core.units import MIB


@pytest.fixture(scope="module")
def qwen() -> ModelInfo:
    return model_card_info("qwen3.6-35b-a3b-iq4_xs")


@pytest.fixture(scope="module")
def weights(qwen: ModelInfo) -> ModelWeights:
    return ModelWeights.from_model(qwen)


def plan(**runtime: object) -> Plan:
    mtp = runtime.pop("mtp", None)
    data: dict[str, object] = {"runtime": runtime}
    if mtp is not None:
        data["mtp"] = mtp
    return plan_from_dict(data)


GPU = TargetDevice("CUDA0", "test 16 GiB", 16 * 1024 * MIB)
BIG = TargetDevice("CUDA0", "test 96 GiB", 96 * 1024 * MIB)
CPU = TargetDevice("CPU", "cpu", None)


@pytest.mark.parametrize(
    ("cache", "expected_mib"),
    [("f16", 640), ("q8_0", 340), ("q5_1", 240), ("q4_0", 180)],
)
def test_kv_cache_matches_engines_md(qwen: ModelInfo, cache: str, expected_mib: int) -> None:
    # engines.md §5 "Illustrative arithmetic": 10 attention layers, 32k context
    b = compute_budget(
        plan(ctx=32768, cache_type_k=cache, cache_type_v=cache, mtp={"enabled": False}),
        qwen,
        BIG,
        UPSTREAM_FACTS,
    )
    assert b.parts["kv_cache"] == expected_mib * MIB
    assert b.devices[0].segments["kv_cache"] == expected_mib * MIB


@pytest.mark.parametrize(
    ("parallel", "mtp", "expected_mib"),
    [(1, None, 62.81), (1, 3, 251.25), (4, 3, 1005.0)],
)
def test_recurrent_state_matches_engines_md(
    qwen: ModelInfo, parallel: int, mtp: int | None, expected_mib: float
) -> None:
    mtp_opts = {"enabled": False} if mtp is None else {"enabled": True, "draft_max": mtp}
    b = compute_budget(plan(ctx=4096, parallel=parallel, mtp=mtp_opts), qwen, BIG, UPSTREAM_FACTS)
    assert b.parts["recurrent_state"] / MIB == pytest.approx(expected_mib, abs=0.01)


def test_ik_keeps_no_rollback_rows_and_runs_no_qwen_mtp(qwen: ModelInfo) -> None:
    b = compute_budget(plan(ctx=4096, mtp={"enabled": True, "draft_max": 3}), qwen, BIG, IK_FACTS)
    assert b.parts["recurrent_state"] / MIB == pytest.approx(62.81, abs=0.01)
    assert b.parts["mtp_kv_cache"] == 0
    assert any("cannot run MTP for qwen35moe" in w for w in b.warnings)


def test_mtp_draft_kv_uses_its_own_cache_types(qwen: ModelInfo) -> None:
    on = compute_budget(plan(ctx=32768, mtp={"draft_max": 2}), qwen, BIG, UPSTREAM_FACTS)
    assert on.parts["mtp_kv_cache"] == 64 * MIB  # f16 draft cache: 2048 B/token
    q8 = compute_budget(
        plan(ctx=32768, mtp={"draft_max": 2, "cache_type_k": "q8_0", "cache_type_v": "q8_0"}),
        qwen,
        BIG,
        UPSTREAM_FACTS,
    )
    assert q8.parts["mtp_kv_cache"] == 34 * MIB


def test_mtp_weights_load_only_with_mtp(qwen: ModelInfo) -> None:
    mtp_bytes = sum(t.n_bytes for t in qwen.tensors if (t.layer or 0) >= qwen.n_layer)
    assert mtp_bytes > 0
    off = compute_budget(plan(mtp={"enabled": False}), qwen, BIG, UPSTREAM_FACTS)
    on = compute_budget(plan(mtp={"enabled": True}), qwen, BIG, UPSTREAM_FACTS)
    assert off.parts["weights_total"] == qwen.tensor_bytes - mtp_bytes
    assert on.parts["weights_total"] == qwen.tensor_bytes


@pytest.mark.parametrize("n", [0, 1, 10, 40])
def test_n_cpu_moe_moves_exactly_the_first_layers_experts(qwen: ModelInfo, n: int) -> None:
    moved = sum(
        t.n_bytes
        for t in qwen.tensors
        if EXPERT_TENSOR.match(t.name) and t.layer is not None and t.layer < n
    )
    b = compute_budget(
        plan(moe="n_cpu_moe", n_cpu_moe=n, mtp={"enabled": False}), qwen, BIG, UPSTREAM_FACTS
    )
    always_cpu = sum(t.n_bytes for t in qwen.tensors if t.name == "token_embd.weight")
    assert b.placement.cpu_expert_layers == frozenset(range(n))
    # mmap maps one range per file: from token_embd to the end of the last CPU expert tensor,
    # the GPU layers' dense tensors in between included (llama-model.cpp get_mapping_range)
    on_cpu = [
        t
        for t in qwen.tensors
        if t.name == "token_embd.weight"
        or (EXPERT_TENSOR.match(t.name) and t.layer is not None and t.layer < n)
    ]
    span = max(t.offset + t.n_bytes for t in on_cpu) - min(t.offset for t in on_cpu)
    assert b.host.segments["weights_mapped"] == span
    assert (span > always_cpu + moved) == (n > 0)
    no_mmap = compute_budget(
        plan(moe="n_cpu_moe", n_cpu_moe=n, load_mode="no-mmap", mtp={"enabled": False}),
        qwen,
        BIG,
        UPSTREAM_FACTS,
    )
    assert no_mmap.host.segments["weights_resident"] == always_cpu + moved


def test_mtp_off_maps_the_mtp_block_between_trunk_and_output(qwen: ModelInfo) -> None:
    """Upstream's CPU_Mapped buffer spans the skipped MTP block (it lies before the output)."""
    off = compute_budget(plan(mtp={"enabled": False}), qwen, CPU, UPSTREAM_FACTS)
    on = compute_budget(plan(mtp={"enabled": True}), qwen, CPU, UPSTREAM_FACTS)
    assert off.devices[0].segments["weights"] == on.devices[0].segments["weights"]
    assert off.parts["weights_total"] == sum(t.n_bytes for t in qwen.tensors)


def test_gpu_layers_count_from_the_back_with_output_as_one(qwen: ModelInfo) -> None:
    one = compute_budget(plan(n_gpu_layers=1, mtp={"enabled": True}), qwen, BIG, UPSTREAM_FACTS)
    assert one.placement.output_on_gpu and one.placement.gpu_layers == frozenset()
    two = compute_budget(plan(n_gpu_layers=2, mtp={"enabled": True}), qwen, BIG, UPSTREAM_FACTS)
    assert two.placement.gpu_layers == frozenset({qwen.n_layer})  # the MTP block is last
    assert two.devices[0].segments["mtp_kv_cache"] > 0
    assert two.devices[0].segments["kv_cache"] == 0  # no trunk attention layer on the GPU


def test_context_padding_differs_between_engines(qwen: ModelInfo) -> None:
    p = plan(ctx=1000, flash_attn="off", cache_type_v="f16", mtp={"enabled": False})
    up = compute_budget(p, qwen, BIG, UPSTREAM_FACTS)
    ik = compute_budget(p, qwen, BIG, IK_FACTS)
    assert up.effective.n_ctx == 1024
    assert ik.effective.n_ctx == 1024  # 1000 padded to 32
    p2 = plan(ctx=1010, flash_attn="off", cache_type_v="f16", mtp={"enabled": False})
    assert compute_budget(p2, qwen, BIG, IK_FACTS).effective.n_ctx == 1024
    p3 = plan(ctx=770, flash_attn="off", cache_type_v="f16", mtp={"enabled": False})
    assert compute_budget(p3, qwen, BIG, UPSTREAM_FACTS).effective.n_ctx == 1024
    assert compute_budget(p3, qwen, BIG, IK_FACTS).effective.n_ctx == 800


def test_free_and_fits_follow_the_segments(qwen: ModelInfo) -> None:
    card = catalogue_target(gpu_card("rtx-4070-super"), plan().desktop)
    b = compute_budget(plan(ctx=8192, moe="all_cpu"), qwen, card, UPSTREAM_FACTS)
    d = b.devices[0]
    assert d.free_bytes == card.total_bytes - sum(d.segments.values())
    assert d.segments["desktop"] == card.desktop_bytes
    assert d.segments["margin"] == 1024 * MIB
    assert d.fits is True
    tiny = TargetDevice("CUDA0", "4 GiB", 4 * 1024 * MIB)
    assert (
        compute_budget(plan(ctx=8192, moe="gpu"), qwen, tiny, UPSTREAM_FACTS).devices[0].fits
        is False
    )


def test_cpu_plan_has_one_cpu_device(qwen: ModelInfo) -> None:
    b = compute_budget(plan(ctx=4096), qwen, CPU, UPSTREAM_FACTS, HostSpec(64 << 30, 60 << 30))
    assert [d.id for d in b.devices] == ["CPU"]
    assert b.devices[0].total_bytes == 64 << 30
    assert b.devices[0].segments["weights"] == qwen.tensor_bytes


def _on(card_id: str, p: Plan, qwen: ModelInfo) -> tuple[Plan, PlanningContext]:
    """``p`` for the demo model on a catalogue card, planned with no GPU detected, MTP on as
    asked (the levers search at the plan's MTP decision; auto decides it plan by plan)."""
    pctx = PlanningContext(MachineFacts(HostSpec(), (), ()), qwen)
    changes = {"model.card": "qwen3.6-35b-a3b-iq4_xs", "device": card_id, "mtp.enabled": True}
    return plan_with(p, changes), pctx


def _bench(p: Plan, pctx: PlanningContext) -> LeverBench:
    return lever_bench(resolve(p, pctx))


def _budget(p: Plan, pctx: PlanningContext, **runtime: object) -> Budget:
    return budget_for(resolve(plan_with(p, {f"runtime.{k}": v for k, v in runtime.items()}), pctx))


def test_fewest_cpu_expert_layers_is_minimal(qwen: ModelInfo) -> None:
    p, pctx = _on("rtx-4070-super", plan(ctx=65536), qwen)
    s = fewest_cpu_expert_layers(_bench(p, pctx))
    n = s.plan.runtime.n_cpu_moe
    assert s.fits and 0 < n < qwen.n_layer
    assert s.budget == _budget(p, pctx, moe="n_cpu_moe", n_cpu_moe=n)  # planning's budget
    fewer = _budget(p, pctx, moe="n_cpu_moe", n_cpu_moe=n - 1)
    assert fewer.devices[0].fits is False


@pytest.mark.parametrize("card_id", ["rtx-3060-12gb", "rtx-4070-super", "rtx-5060-ti-16gb"])
@pytest.mark.parametrize("ctx", [4096, 65536, 262144])
def test_fewest_cpu_expert_layers_bisects_to_the_linear_answer(
    qwen: ModelInfo, card_id: str, ctx: int
) -> None:
    p, pctx = _on(card_id, plan(ctx=ctx), qwen)
    got = fewest_cpu_expert_layers(_bench(p, pctx))
    linear = next(
        (
            n
            for n in range(qwen.block_count + 1)
            if _budget(p, pctx, moe="n_cpu_moe", n_cpu_moe=n).devices[0].fits is not False
        ),
        None,
    )
    assert (got.plan.runtime.n_cpu_moe if got.fits else None) == linear


def test_largest_context_is_maximal(qwen: ModelInfo) -> None:
    p, pctx = _on("rtx-4070-super", plan(moe="n_cpu_moe", n_cpu_moe=26), qwen)
    s = largest_context(_bench(p, pctx))
    ctx = s.plan.runtime.ctx
    assert s.fits and ctx % 256 == 0 and ctx < qwen.context_length
    assert s.changes == {"runtime.ctx": ctx} and s.lever == "context"
    assert _budget(p, pctx, ctx=ctx + 256).devices[0].fits is False
    assert re.search(r"\d", s.message)


def test_engine_fit_moves_experts_back_to_front(qwen: ModelInfo) -> None:
    card = catalogue_target(gpu_card("rtx-4070-super"), plan().desktop)
    b = compute_budget(plan(ctx=32768, moe="fit"), qwen, card, UPSTREAM_FACTS)
    moved = b.effective.cpu_expert_layers
    # with MTP on (the default) the MTP block is the last layer the fit counts
    assert moved and max(moved) == qwen.block_count - 1
    assert moved == frozenset(range(min(moved), qwen.block_count))
    assert b.devices[0].fits is True


def _one_layer_experts(weights: ModelWeights, layer: int) -> int:
    return weights.layers[layer].expert_gpu_bytes


def test_op_offload_copies_one_ram_expert_tensor_at_a_time_into_gpu_compute(
    qwen: ModelInfo, weights: ModelWeights
) -> None:
    """engines.md §5d: RAM experts are copied to the GPU for batches of 32+ tokens; on CUDA
    the scheduler gives each copy a split of its own, so one copy is alive at a time (the
    replay holds them: nothing is added beside it)."""
    on = compute_budget(plan(moe="n_cpu_moe", n_cpu_moe=10), qwen, BIG, UPSTREAM_FACTS)
    off = compute_budget(
        plan(moe="n_cpu_moe", n_cpu_moe=10, op_offload=False), qwen, BIG, UPSTREAM_FACTS
    )
    layer0 = weights.layers[0]
    one = max(cuda_alloc_size(t) for t in layer0.ffn_tensors if EXPERT_TENSOR.match(t.name))
    compute = on.devices[0].segments["compute"]
    # the buffer holds one copy (part of it in blocks freed before), never two
    assert one > 100 * MIB and one <= compute < off.devices[0].segments["compute"] + 2 * one
    assert on.parts["op_offload_compute"] == 0  # inside the replayed compute buffer
    # nothing in RAM, or a batch below 32 tokens: no copies
    gpu_only = compute_budget(plan(moe="gpu"), qwen, BIG, UPSTREAM_FACTS)
    small = compute_budget(
        plan(moe="n_cpu_moe", n_cpu_moe=10, ubatch=16, batch=16), qwen, BIG, UPSTREAM_FACTS
    )
    small_off = compute_budget(
        plan(moe="n_cpu_moe", n_cpu_moe=10, ubatch=16, batch=16, op_offload=False),
        qwen,
        BIG,
        UPSTREAM_FACTS,
    )
    gpu_off = compute_budget(plan(moe="gpu", op_offload=False), qwen, BIG, UPSTREAM_FACTS)
    for budget, without in ((small, small_off), (gpu_only, gpu_off)):
        assert budget.devices[0].segments["compute"] == without.devices[0].segments["compute"]


def test_op_offload_on_a_gpu_without_cudas_scheduler_is_estimated(
    qwen: ModelInfo, weights: ModelWeights
) -> None:
    """Another GPU backend (not replayed): one layer's RAM experts reserved beside compute."""
    amd = TargetDevice("ROCm0", "test 96 GiB", 96 * 1024 * MIB, vendor="amd")
    on = compute_budget(plan(moe="n_cpu_moe", n_cpu_moe=10), qwen, amd, UPSTREAM_FACTS)
    assert on.parts["op_offload_compute"] == weights.layers[0].expert_gpu_bytes


def test_fit_moves_the_mtp_block_experts_first_when_mtp_is_loaded(qwen: ModelInfo) -> None:
    """common/fit.cpp counts the nextn layer in hp_ngl: it is the last layer, moved first."""
    target = TargetDevice("CUDA0", "test 16 GiB", 16 * 1024 * MIB)
    on = compute_budget(plan(moe="fit", mtp={"enabled": True}), qwen, target, UPSTREAM_FACTS)
    cpu = on.placement.cpu_expert_layers
    assert qwen.n_layer in cpu  # the MTP block (layer 40)
    trunk = sorted(i for i in cpu if i < qwen.n_layer)
    assert trunk and trunk[-1] == qwen.n_layer - 1
    off = compute_budget(plan(moe="fit", mtp={"enabled": False}), qwen, target, UPSTREAM_FACTS)
    assert qwen.n_layer not in off.placement.cpu_expert_layers


def test_fit_splits_the_first_ram_layer(qwen: ModelInfo, weights: ModelWeights) -> None:
    """After whole layers, upstream's fit brings part of one more layer back (UP / GATE / ATTN)."""
    target = TargetDevice("CUDA0", "test 16 GiB", 16 * 1024 * MIB)
    b = compute_budget(plan(moe="fit", mtp={"enabled": True}), qwen, target, UPSTREAM_FACTS)
    partial = b.placement.partial
    assert partial is not None
    # the first of the layers whose experts the fit moves, handled tensor by tensor
    assert partial.layer == min(b.effective.cpu_expert_layers)
    assert partial.layer not in b.placement.cpu_expert_layers
    whole = compute_budget(
        plan(moe="fit", mtp={"enabled": True}),
        qwen,
        target,
        UPSTREAM_FACTS,
        cpu_expert_layers=b.placement.cpu_expert_layers | {partial.layer},
    )
    lw = weights.layers[partial.layer]
    moved = sum(t.n_bytes for t in lw.ffn_tensors if partial.kind.moves(t.name))
    kept = lw.dense_bytes + lw.expert_bytes - moved
    # the split layer keeps part of its FFN on the GPU compared with moving all its experts
    delta = b.devices[0].segments["weights"] - whole.devices[0].segments["weights"]
    if partial.kind.name == "ATTN":
        assert delta < 0  # router and shared expert go to RAM as well
    else:
        assert delta > 0 and moved < lw.expert_bytes
    assert kept > 0
    assert b.devices[0].fits
