"""The per-file plan: dense models move whole layers, MoE models their experts; the answers are
the planner's own (checked against its budget one step either side)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.hub.fit_table import plan_remote_model
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import PlanningContext, budget_for, machine_for, resolve

LOCAL = Path("/models/x.gguf")


def _fits(plan: Plan, pctx: PlanningContext) -> bool:
    return budget_for(resolve(plan, pctx)).devices[0].fits is not False


@pytest.mark.parametrize("card", ["rtx-3060-12gb", "rtx-4060-ti-16gb"])
def test_a_dense_model_moves_the_fewest_whole_layers(card: str) -> None:
    info = model_card_info("qwen3.6-27b-iq4_xs")
    plan = plan_with(Plan(), {"device": card, "runtime.ctx": 32768})
    fit = plan_remote_model(info, plan, machine_for(None), LOCAL)
    assert fit.offload_kind == "layers" and fit.is_gpu
    assert fit.offload is not None and fit.offload > 0
    pctx = PlanningContext(machine_for(None), info)
    total = info.block_count + 1
    assert fit.plan.runtime.n_gpu_layers == total - fit.offload
    assert _fits(fit.plan, pctx)
    assert fit.mtp  # drafting pays even with layers on the CPU: the minimum keeps the draft
    one_more = plan_with(fit.plan, {"runtime.n_gpu_layers": total - fit.offload + 1})
    assert not _fits(plan_with(one_more, {"mtp.enabled": True}), pctx)
    # one layer more on the GPU fits only without the draft's memory: MTP auto says so
    more = resolve(one_more, pctx)
    assert not more.mtp.active and "fits only without the draft" in more.mtp.line
    assert fit.max_ctx is not None and fit.max_ctx >= 32768
    assert fit.plan.model.path == LOCAL and fit.plan.mtp.enabled is None


def test_the_moe_answer_and_the_reclaim_are_minimal() -> None:
    info = model_card_info("qwen3.6-35b-a3b-iq4_xs")
    plan = plan_with(Plan(), {"device": "rtx-4070-super", "runtime.ctx": 65536})
    fit = plan_remote_model(info, plan, machine_for(None), LOCAL)
    pctx = PlanningContext(machine_for(None), info)
    n = fit.offload
    assert fit.offload_kind == "expert layers" and n is not None and n > 0
    assert fit.plan.runtime.n_cpu_moe == n and _fits(fit.plan, pctx)
    assert fit.mtp and fit.plan.mtp.enabled is None  # the file's plan keeps MTP auto
    drafting = plan_with(fit.plan, {"mtp.enabled": True})  # the minimum is the one with MTP
    assert not _fits(plan_with(drafting, {"runtime.n_cpu_moe": n - 1}), pctx)
    # one layer fewer fits only without the draft's memory: MTP auto says so and turns off
    fewer = resolve(plan_with(fit.plan, {"runtime.n_cpu_moe": n - 1}), pctx)
    assert not fewer.mtp.active and "fits only without the draft" in fewer.mtp.line
    assert fit.reclaim is DesktopReclaim.LLVMPIPE and fit.reclaim_offload is not None
    with_llvmpipe = plan_with(drafting, {"desktop": "llvmpipe"})
    m = fit.reclaim_offload
    assert _fits(plan_with(with_llvmpipe, {"runtime.n_cpu_moe": m}), pctx)
    assert not _fits(plan_with(with_llvmpipe, {"runtime.n_cpu_moe": m - 1}), pctx)
    assert fit.reclaim_text() == f"llvmpipe session → {m} on CPU"
    # the largest context at that offload, one step past it does not fit
    assert fit.max_ctx is not None
    assert _fits(plan_with(drafting, {"runtime.ctx": fit.max_ctx}), pctx)
    assert not _fits(plan_with(drafting, {"runtime.ctx": fit.max_ctx + 256}), pctx)


def test_a_small_model_fits_whole_and_needs_no_reclaim() -> None:
    info = model_card_info("qwen3.6-35b-a3b-iq4_xs")
    plan = plan_with(Plan(), {"device": "rtx-5090", "runtime.ctx": 32768})
    fit = plan_remote_model(info, plan, machine_for(None), LOCAL)
    assert fit.fits is True and fit.offload == 0 and fit.offload_text() == "none"
    assert fit.reclaim is None and fit.reclaim_text() == "—"
    assert fit.mtp and fit.runs


def test_a_cpu_plan_says_so() -> None:
    info = model_card_info("qwen3.6-35b-a3b-iq4_xs")
    plan = plan_with(Plan(), {"device": "cpu", "runtime.ctx": 8192})
    fit = plan_remote_model(info, plan, machine_for(None), LOCAL)
    assert not fit.is_gpu and fit.offload is None and fit.offload_text() == "— (CPU)"
