"""Whole layers on the CPU: the engine's fit for dense models (and MoE when experts are not
enough), ``-ngl N`` placed by mtpstudio, the budget per device, and the ranked Fit answers."""

from __future__ import annotations

import re

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.profiles.ik import MEMORY as IK_FACTS
from mtpstudio.core.engines.profiles.upstream import MEMORY as UPSTREAM_FACTS
from mtpstudio.core.memory.budget import (
    compute_budget,
    device_fits,
    engine_fit_placement,
    gpu_layer_count,
)
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.placement import ModelWeights, cuda_alloc_size
from mtpstudio.core.memory.terms import kv_cache_bytes
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.levers import fewest_cpu_layers
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    evaluate,
    fit_suggestions,
    lever_bench,
    published_demo_plan,
    resolve,
)
from mtpstudio.core.units import MIB

DENSE = "qwen3.6-27b-iq4_xs"
MOE = "qwen3.6-35b-a3b-iq4_xs"
HOST = HostSpec(64 * 1024 * MIB, 50 * 1024 * MIB)
CARD_4060TI = TargetDevice("CUDA0", "16 GB", 16380 * MIB, 1024 * MIB, 0, 400 * MIB, "nvidia")


@pytest.fixture(scope="module")
def dense() -> ModelInfo:
    return model_card_info(DENSE)


@pytest.fixture(scope="module")
def moe() -> ModelInfo:
    return model_card_info(MOE)


def _plan(**changes: object) -> Plan:
    """MTP on as asked: the levers' boundaries at one MTP state (auto decides by the estimate,
    which a search one layer at a time would move)."""
    return plan_with(Plan(), {"runtime.op_offload": False, "mtp.enabled": True, **changes})


def _fits_at(plan: Plan, model: ModelInfo, device: TargetDevice, ngl: int, **kw: object) -> bool:
    p = plan_with(plan, {"runtime.moe": "gpu", "runtime.n_gpu_layers": ngl})
    return device_fits(compute_budget(p, model, device, UPSTREAM_FACTS, HOST, **kw))  # type: ignore[arg-type]


def test_the_fit_of_a_dense_model_keeps_the_most_layers_that_fit(dense: ModelInfo) -> None:
    w = ModelWeights.from_model(dense)
    plan = _plan(**{"mtp.enabled": False})
    fit = engine_fit_placement(plan, dense, CARD_4060TI, UPSTREAM_FACTS, HOST, w)
    assert fit.n_gpu_layers is not None and not fit.cpu_expert_layers and not fit.fails
    n = fit.n_gpu_layers
    # the largest -ngl whose budget fits: one more layer does not
    assert _fits_at(plan, dense, CARD_4060TI, n, weights=w)
    assert not _fits_at(plan, dense, CARD_4060TI, n + 1, weights=w)
    budget = compute_budget(plan, dense, CARD_4060TI, UPSTREAM_FACTS, HOST, w)
    assert budget.fits and gpu_layer_count(dense, budget.placement) == n
    line = next(x for x in budget.warnings if "the engine's fit is expected to set -ngl" in x)
    first_gpu = min(budget.placement.gpu_layers)
    assert f"-ngl {n} of 66" in line and f"layers 0-{first_gpu - 1} ({first_gpu} of 64)" in line
    assert "experts" not in " ".join(budget.warnings)  # a dense model has none to move


def test_layers_on_the_cpu_take_their_kv_state_and_compute_to_ram(dense: ModelInfo) -> None:
    w = ModelWeights.from_model(dense)
    all_gpu = _plan(**{"runtime.moe": "gpu"})
    some = _plan(**{"runtime.moe": "gpu", "runtime.n_gpu_layers": 40})
    full = compute_budget(all_gpu, dense, CARD_4060TI, UPSTREAM_FACTS, HOST, w)
    part = compute_budget(some, dense, CARD_4060TI, UPSTREAM_FACTS, HOST, w)
    gpu, host = part.devices[0].segments, part.host.segments
    cpu_layers = [i for i in range(dense.n_layer) if i not in part.placement.gpu_layers]
    assert len(cpu_layers) == 66 - 40  # -ngl counts the MTP block and the output layer too
    cpu_attn = sum(1 for i in dense.attention_layers if i in cpu_layers)
    share = cpu_attn / len(dense.attention_layers)
    assert host["kv_cache"] == round(full.parts["kv_cache"] * share)
    assert gpu["kv_cache"] + host["kv_cache"] == full.devices[0].segments["kv_cache"]
    assert gpu["recurrent_state"] + host["recurrent_state"] == full.parts["recurrent_state"]
    # the CPU runs its layers' graph too: the host buffer (CUDA_Host) grows beyond the inputs
    assert host["compute"] > full.host.segments["compute"] > 0
    assert gpu["weights"] < full.devices[0].segments["weights"]
    assert "-ngl 40: layers 26-63, the MTP block and the output layer on the GPU" in " ".join(
        part.warnings
    )


def test_op_offload_copies_a_cpu_layers_weights_one_at_a_time(dense: ModelInfo) -> None:
    """Whole layers on the CPU: for 32+ tokens each of their matmuls runs on the GPU with its
    weight copied in, one copy alive at a time; their attention follows those ops to the GPU
    and reads copies of the layer's K and V views from the RAM cache. The GPU buffer holds
    the largest weight of a CPU layer, and less than two of them plus one layer's K and V."""
    w = ModelWeights.from_model(dense)
    changes = {"runtime.moe": "gpu", "runtime.n_gpu_layers": 40}
    on = compute_budget(plan_with(Plan(), changes), dense, CARD_4060TI, UPSTREAM_FACTS, HOST, w)
    off = compute_budget(_plan(**changes), dense, CARD_4060TI, UPSTREAM_FACTS, HOST, w)
    cpu_layers = [lw for lw in w.layers if lw.layer < 25]
    largest = max(cuda_alloc_size(t) for lw in cpu_layers for t in lw.tensors)
    compute = on.devices[0].segments["compute"]
    kv = kv_cache_bytes(dense, [0], "f16", "f16", 32768, 32768)  # one layer's K and V views
    assert largest <= compute < off.devices[0].segments["compute"] + 2 * largest + kv
    assert on.parts["op_offload_compute"] == off.parts["op_offload_compute"] == 0


def test_moe_that_does_not_fit_with_every_expert_in_ram_loses_whole_layers(
    moe: ModelInfo,
) -> None:
    w = ModelWeights.from_model(moe)
    small = TargetDevice("CUDA0", "2.5 GiB", 2560 * MIB)
    plan = _plan(**{"mtp.enabled": False})
    fit = engine_fit_placement(plan, moe, small, UPSTREAM_FACTS, HOST, w)
    assert fit.n_gpu_layers is not None and 0 < fit.n_gpu_layers < moe.n_layer
    budget = compute_budget(plan, moe, small, UPSTREAM_FACTS, HOST, w)
    # with MTP off upstream's layout (ngl, ngl - 1) leaves no trunk block's experts on the GPU
    assert frozenset(range(moe.n_layer)) <= budget.placement.cpu_expert_layers
    assert budget.fits
    assert "with every expert in system RAM" in " ".join(budget.warnings)
    # ik's fit moves only experts: it stops instead, and the planner says so
    ik = engine_fit_placement(plan, moe, small, IK_FACTS, HOST, w)
    assert ik.fails
    ik_budget = compute_budget(plan, moe, small, IK_FACTS, HOST, w)
    assert "Unable to auto-fit model" in " ".join(ik_budget.warnings)


def test_fewest_cpu_layers_is_the_minimum(dense: ModelInfo) -> None:
    pctx = _pctx(DENSE)
    plan = plan_with(_plan(**{"runtime.moe": "gpu"}), {"model.card": DENSE,
                                                       "device": "rtx-4060-ti-16gb"})  # fmt: skip
    s = fewest_cpu_layers(lever_bench(resolve(plan, pctx)))
    assert s.fits and s.lever == "layers"
    n = s.plan.runtime.n_gpu_layers
    assert n is not None and s.changes == {"runtime.moe": "gpu", "runtime.n_gpu_layers": n}
    more = budget_for(resolve(plan_with(plan, {"runtime.n_gpu_layers": n + 1}), pctx))
    assert not more.fits
    assert s.message.startswith(f"fewest layers on the CPU at ctx 32,768: -ngl {n} (")


def _pctx(card: str) -> PlanningContext:
    return PlanningContext(MachineFacts(HOST, (), ()), model_card_info(card))


def test_the_acceptance_plan_fits_and_says_its_layer_count() -> None:
    pctx = _pctx(DENSE)
    plan = plan_with(
        Plan(), {"model.card": DENSE, "device": "rtx-4060-ti-16gb", "mtp.enabled": True}
    )
    result = evaluate(plan, pctx)
    assert result.verdict.status == "fits"
    ngl = gpu_layer_count(pctx.model, result.budget.placement)
    assert f"the engine's fit is expected to set -ngl {ngl} of 66" in " ".join(result.warnings)
    assert "--fit" in result.argv and "-ngl" not in result.argv  # the engine's fit places them
    # and the planner says what each lever would buy, in words
    fit_lines = [w for w in result.warnings if w.startswith("Fit: ")]
    assert any(w.startswith("Fit: with the llvmpipe session: ") for w in fit_lines), fit_lines
    # no context makes every layer fit: the context lever offers no ctx-256 plan with CPU layers
    assert not any(w.startswith("Fit: ctx ") for w in fit_lines), fit_lines


def test_suggestions_are_ranked_and_name_the_desktop_reclaim() -> None:
    pctx = _pctx(MOE)
    plan = plan_with(
        Plan(), {"device": "rtx-3060-12gb", "runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 0}
    )
    ranked = fit_suggestions(resolve(plan, pctx))
    outcome = re.compile(
        r"(: | — )(fits, [\d,]+ MiB spare|fits with \d+ layers? on the CPU|still [\d,]+ MiB short)$"
    )
    assert all(outcome.search(s.message) for s in ranked), [s.message for s in ranked]
    groups = [0 if s.fits and not s.cpu_layers else 1 if s.fits else 2 for s in ranked]
    assert groups == sorted(groups) and groups[0] == 0
    levers = {s.lever for s in ranked}
    assert {"experts", "context", "cache", "draft", "engine-fit"} <= levers
    llvmpipe = next(s for s in ranked if s.lever == "desktop:llvmpipe")
    assert llvmpipe.message.startswith("with the llvmpipe session: ")
    assert llvmpipe.plan.desktop.value == "llvmpipe"
    # each suggestion's own budget is what its plan gives
    for s in ranked:
        again = evaluate(s.plan, pctx, suggest=False).budget
        assert again.devices[0].free_bytes == s.budget.devices[0].free_bytes, s.message


def test_a_reclaim_that_makes_it_fit_says_how_much_is_spare() -> None:
    pctx = _pctx(MOE)
    base = plan_with(
        Plan(),
        {"device": "rtx-4070-super", "runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 0,
         "mtp.enabled": True},
    )  # fmt: skip
    short = -(evaluate(base, pctx, suggest=False).budget.devices[0].free_bytes or 0)
    # find the expert count where the desktop's 894 MiB decides
    n = next(
        k
        for k in range(41)
        if not evaluate(plan_with(base, {"runtime.n_cpu_moe": k}), pctx, suggest=False).budget.fits
        and evaluate(
            plan_with(base, {"runtime.n_cpu_moe": k, "desktop": "llvmpipe"}), pctx, suggest=False
        ).budget.fits
    )
    plan = plan_with(base, {"runtime.n_cpu_moe": n})
    ranked = fit_suggestions(resolve(plan, pctx))
    llvmpipe = next(s for s in ranked if s.lever == "desktop:llvmpipe")
    spare = llvmpipe.budget.devices[0].free_bytes
    assert spare is not None and spare >= 0 and short > 0
    assert llvmpipe.message == f"with the llvmpipe session: fits, {spare / MIB:,.0f} MiB spare"
    assert ranked.index(llvmpipe) < next(i for i, s in enumerate(ranked) if s.lever == "context")


def test_the_demo_keeps_its_defaults_when_the_published_setup_needs_cpu_layers() -> None:
    pctx = _pctx(DENSE)
    plan = plan_with(Plan(), {"model.card": DENSE, "device": "rtx-4060-ti-16gb"})
    chosen, line = published_demo_plan(plan, pctx)
    assert chosen == plan and "only with" in line and "layers on the CPU" in line
