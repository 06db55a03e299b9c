"""The tuner follows the speed estimate (issue 37): candidates in the order the estimate puts
them (a candidate limit keeps the most promising), and after the baseline's run the ones the
calibrated estimate puts well below the best measurement are not launched."""

from __future__ import annotations

from bench.samples import report
from mtpstudio.core.bench.tune import (
    PREDICTED_SLOWER,
    RowStatus,
    TuneRow,
    TuneRun,
    build_rows,
    skip_predicted_slower,
)
from mtpstudio.core.bench.tune_space import Candidate
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import PlanningContext, machine_for

SEEDS = {"device": "rtx-4070-super", "runtime.ctx": 131072, "runtime.cache_type_k": "q8_0",
         "runtime.cache_type_v": "q8_0", "mtp.draft_max": 3}  # fmt: skip


def candidates() -> list[Candidate]:
    return [
        Candidate("dmax=1", {"mtp.draft_max": 1}),
        Candidate("all experts in RAM", {"runtime.moe": "all_cpu"}),
        Candidate("llvmpipe", {"desktop": "llvmpipe"}),
        Candidate("dmax=2", {"mtp.draft_max": 2}),
        Candidate("kv=f16 64k", {"runtime.ctx": 65536, "runtime.cache_type_k": "f16",
                                 "runtime.cache_type_v": "f16"}),
    ]  # fmt: skip


def test_candidates_come_in_the_estimates_order_and_the_limit_keeps_the_fastest() -> None:
    start = plan_with(Plan(), SEEDS)
    pctx = PlanningContext(machine_for(None), model_card_info("qwen3.6-35b-a3b-iq4_xs"))
    rows = build_rows(start, candidates(), pctx, max_candidates=2)
    estimates = [r.predicted_tok_s for r in rows]
    assert all(e is not None and e > 0 for e in estimates)
    assert estimates == sorted(estimates, reverse=True)  # type: ignore[type-var]
    assert rows[-1].label == "all experts in RAM"  # every expert read from RAM: the slowest
    admitted = [r for r in rows if r.status is RowStatus.NOT_RUN and not r.reason]
    assert admitted == rows[:2]
    assert all("candidate limit" in r.reason for r in rows[2:])


def baseline(tok_s: float, estimate: float) -> TuneRow:
    run_report = report(rows=[[(16, 0, 0, tok_s)]], drafting_requested=False)
    run_report.wall_s_total = 16 / tok_s
    row = TuneRow("baseline", {}, Plan(), True, predicted_tok_s=estimate)
    row.runs.append(TuneRun("baseline", ("code_python",), run_report, 1.0))
    return row


def test_what_the_calibrated_estimate_puts_well_below_the_best_is_not_launched() -> None:
    """The baseline measured 40 tok/s where the estimate said 50: the estimate is scaled by 0.8.
    A candidate estimated at 40 (32 after scaling) is more than 15 % below 40: skipped; one at
    44 (35.2) is not."""
    base = baseline(40.0, 50.0)
    slow = TuneRow("slow", {"x": 1}, Plan(), True, predicted_tok_s=40.0)
    close = TuneRow("close", {"x": 2}, Plan(), True, predicted_tok_s=44.0)
    unknown = TuneRow("unknown", {"x": 3}, Plan(), True)
    assert skip_predicted_slower([slow, close, unknown], base) == 1
    assert slow.status is RowStatus.SKIPPED and slow.reason.startswith("speed model: about 32.00")
    assert f"more than {PREDICTED_SLOWER:.0%} below the best measured 40.00" in slow.reason
    assert close.status is RowStatus.NOT_RUN and unknown.status is RowStatus.NOT_RUN


def test_without_a_baseline_run_nothing_is_skipped() -> None:
    base = TuneRow("baseline", {}, Plan(), True, predicted_tok_s=50.0)
    slow = TuneRow("slow", {"x": 1}, Plan(), True, predicted_tok_s=1.0)
    assert skip_predicted_slower([slow], base) == 0 and slow.status is RowStatus.NOT_RUN
