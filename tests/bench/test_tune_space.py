"""The tuner's candidate space and its memory-model filter (pure: demo cards, catalogue GPUs)."""

from __future__ import annotations

import pytest
from support.plans import demo_plan

from mtpstudio.core.bench.tune import RowStatus, build_rows, check_fit
from mtpstudio.core.bench.tune_space import (
    MoeChoice,
    TuneSpace,
    default_space,
    drafts,
    expand,
)
from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_info
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan.choices import CacheType, MoePlacement
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts, PlanningContext

QWEN = model_card_info(DEFAULT_MODEL_CARD)
GIB = 1024**3
MACHINE = MachineFacts(HostSpec(64 * GIB, 48 * GIB), (), ())  # no GPU: catalogue cards


def test_moe_mtp_model_on_a_gpu_gets_every_knob() -> None:
    plan = demo_plan(**{"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 20})
    space = default_space(plan, QWEN, gpu=True, cpu_count=16, kv_types=(CacheType.Q8_0,))
    assert space.draft_max == (1, 2, 3, 4)
    assert set(space.p_min) >= {0.75} and len(space.p_min) >= 3
    assert CacheType.F16 in space.draft_cache and CacheType.Q8_0 in space.draft_cache
    assert space.moe == tuple(MoeChoice(MoePlacement.N_CPU_MOE, n) for n in (18, 20, 22))
    assert space.threads == (None, 16, 8)  # the plan's own (engine default), all, half
    fit = default_space(demo_plan(), QWEN, gpu=True, cpu_count=4)
    assert [m.value for m in fit.moe] == sorted({512, 1024, 1536, 1664})
    assert all(m.placement is MoePlacement.FIT for m in fit.moe)


def test_no_mtp_knobs_without_drafting_and_no_moe_knobs_for_dense_or_cpu(
    tiny_model,
) -> None:
    off = demo_plan(**{"mtp.enabled": False})
    assert not drafts(off, QWEN)
    space = default_space(off, QWEN, gpu=True, cpu_count=8)
    assert space.draft_max == space.p_min == space.draft_cache == ()
    assert space.moe  # still an MoE model on a GPU
    assert all("mtp." not in k for c in expand(off, space) for k in c.changes)

    dense = read_model_info(tiny_model("dense"))
    plan = plan_with(Plan(), {"model.path": str(tiny_model("dense")), "model.card": None})
    assert plan.mtp.enabled is None and not dense.has_mtp and not drafts(plan, dense)  # auto
    dspace = default_space(plan, dense, gpu=True, cpu_count=8)
    assert dspace.moe == () and dspace.draft_max == ()
    assert default_space(demo_plan(), QWEN, gpu=False, cpu_count=8).moe == ()


def test_expand_skips_the_start_orders_by_changes_and_applies_the_ctx_floor() -> None:
    plan = demo_plan(**{"mtp.draft_max": 2, "runtime.ctx": 8192})
    space = TuneSpace(draft_max=(1, 2, 3), kv_cache=(CacheType.Q8_0, CacheType.F16))
    cands = expand(plan, space)
    assert [c.label for c in cands] == [
        "dmax=1", "kv=f16", "dmax=3", "dmax=1 kv=f16", "dmax=3 kv=f16"
    ]  # fmt: skip
    assert cands[0].changes == {"mtp.draft_max": 1, "mtp.draft_min": 0}
    floored = expand(plan, space, ctx_floor=16384)
    assert len(floored) == 6  # the start's settings at the floor are a candidate too
    assert all(c.changes["runtime.ctx"] == 16384 for c in floored)
    assert floored[0].label == "ctx=16384"
    assert expand(plan, space, ctx_floor=4096) == cands  # already above the floor


def test_memory_model_skips_what_cannot_fit_a_12gb_card() -> None:
    """Qwen3.6 IQ4_XS on a 12 GB catalogue card: few CPU expert layers cannot fit."""
    pctx = PlanningContext(MACHINE, QWEN)
    plan = demo_plan(**{"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 30})
    space = TuneSpace(moe=tuple(MoeChoice(MoePlacement.N_CPU_MOE, n) for n in (0, 10, 30, 38)))
    rows = build_rows(plan, expand(plan, space), pctx, max_candidates=None)
    by_label = {r.label: r for r in rows}
    assert by_label["n-cpu-moe=0"].status is RowStatus.SKIPPED
    assert by_label["n-cpu-moe=0"].fits is False
    assert "MiB short" in by_label["n-cpu-moe=0"].reason
    assert by_label["n-cpu-moe=38"].fits is True
    assert (
        by_label["n-cpu-moe=38"].status is RowStatus.NOT_RUN and not by_label["n-cpu-moe=38"].reason
    )
    for row in rows:  # the filter says what the planner says
        assert row.plan is not None
        assert (row.fits is False) == (check_fit(row.plan, pctx).fits is False)


def test_candidate_limit_counts_only_fitting_candidates() -> None:
    pctx = PlanningContext(MACHINE, QWEN)
    plan = demo_plan(**{"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 38})
    space = TuneSpace(
        moe=tuple(MoeChoice(MoePlacement.N_CPU_MOE, n) for n in (0, 38)),
        draft_max=(1, 2, 3),
        threads=(4, 8),
    )
    rows = build_rows(plan, expand(plan, space), pctx, max_candidates=2)
    admitted = [r for r in rows if r.status is RowStatus.NOT_RUN and not r.reason]
    limited = [r for r in rows if "candidate limit" in r.reason]
    skipped = [r for r in rows if r.status is RowStatus.SKIPPED]
    assert len(admitted) == 2 and limited and skipped
    assert all(r.changes.get("runtime.n_cpu_moe") == 0 for r in skipped)


@pytest.mark.parametrize("bad", ["dmax", "pmin"])
def test_an_invalid_combination_is_skipped_with_the_plan_error(bad: str) -> None:
    pctx = PlanningContext(MACHINE, QWEN)
    plan = demo_plan(**{"mtp.draft_max": 4, "mtp.draft_min": 3})
    space = TuneSpace(draft_max=(17,)) if bad == "dmax" else TuneSpace(p_min=(1.5,))
    rows = build_rows(plan, expand(plan, space), pctx, None)
    assert len(rows) == 1 and rows[0].status is RowStatus.SKIPPED
    assert rows[0].reason.startswith("not a valid plan")
