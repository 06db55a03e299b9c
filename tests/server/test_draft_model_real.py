"""A separate draft model on both engines: the right flags, drafting active, memory counted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mtpstudio.core.memory.measured import HOST
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.process import ServerProcess
from mtpstudio.core.usecases.launch import find_build, prepare_launch, run_launch

pytestmark = [pytest.mark.engine]

EXACT_MIB = 0.01  # the log prints two decimals
DRAFT_COMPUTE_TOLERANCE = 0.35  # the compute estimate is fitted on larger models (ik: -33 %)


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_draft_pair_is_counted_and_matches_the_log(
    flavour: str,
    plan_for: Callable[..., Plan],
    tiny_model: Callable[..., Path],
    launched: list[ServerProcess],
) -> None:
    draft = tiny_model("draft")
    plan = plan_for(flavour, **{"draft.path": str(draft), "mtp.draft_max": 3})
    prepared = prepare_launch(plan, find_build(plan))
    argv = prepared.spec.argv
    assert argv[argv.index("-md") + 1] == str(draft)
    if flavour == "upstream":
        assert argv[argv.index("--spec-type") + 1] == "draft-simple"
        assert argv[argv.index("--spec-draft-n-max") + 1] == "3"
    else:  # ik 8337e4c: depth and p-min inside its draft stage
        assert argv[argv.index("--spec-type") + 1] == "draft:n_max=3,p_min=0.75"
        assert "--draft-max" not in argv
        assert argv[argv.index("-ctkd") + 1] == "f16"
    assert argv[argv.index("-ngld") + 1] == "0"  # a CPU plan keeps the draft on the CPU

    result, proc = run_launch(prepared, timeout=120)
    assert proc is not None
    launched.append(proc)
    assert result.ok, result.diagnosis
    assert result.report.draft_model, "the draft model's buffers were not found in the log"
    assert result.report.drafting == "draft"
    rec = result.reconciliation
    assert rec is not None, result.prediction_error
    for segment in ("draft_weights", "draft_kv_cache"):
        row = rec.row(segment, HOST)
        assert row is not None and row.actual_mib > 0, segment
        assert abs(row.delta_mib) <= EXACT_MIB, rec.render()
    compute = rec.row("draft_compute", HOST)
    assert compute is not None and compute.actual_mib > 0
    assert abs(compute.delta_mib) <= DRAFT_COMPUTE_TOLERANCE * compute.actual_mib, rec.render()
