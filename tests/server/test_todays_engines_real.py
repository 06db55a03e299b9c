"""Today's engines through mtpstudio's own launcher: ik_llama.cpp 8337e4c and upstream b11549.

Each runs a plan with MTP on the tiny hybrid model with its MTP block, as a user's plan runs:
the build probed (its era decides the flags), launched with ``--metrics``, its logged buffers
reconciled with the plan's budget (exact segments within 0.01 MiB, compute buffers within 5 %),
benchmarked (draft counts agree with the server's own), and its output gated against the same
plan with MTP off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from support.gate import gate_both
from support.waiting import scaled

from mtpstudio.core.bench.prompts import load_prompts, select
from mtpstudio.core.bench.results import BenchSettings
from mtpstudio.core.bench.runner import run_bench
from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.engines.profiles import era_words, profile_for
from mtpstudio.core.memory.measured import HOST
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.process import ServerProcess
from mtpstudio.core.usecases.launch import find_build, prepare_launch, run_launch
from mtpstudio.core.usecases.plan_server import with_metrics

pytestmark = [pytest.mark.engine]

EXACT_MIB = 0.01  # the logs print two decimals
COMPUTE = 0.05
N = 16
ERAS = {
    "ik": ("ik_llama.cpp 8337e4c (2026-08-15)", ["--spec-type", "mtp:n_max=2,p_min=0"]),
    "upstream-b11549": (
        "llama.cpp b11549 (xllamacpp 2026.10.11549)",
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--spec-draft-p-min", "0"],
    ),
}


def _launch(plan: Plan, launched: list[ServerProcess]) -> tuple[BenchTarget, object]:
    build = find_build(plan)
    prepared = prepare_launch(plan, build)
    extra = with_metrics(prepared.spec, build)
    process = dataclasses.replace(prepared.process, argv=(*prepared.process.argv, *extra))
    result, proc = run_launch(dataclasses.replace(prepared, process=process), timeout=scaled(120))
    assert proc is not None, result.diagnosis
    launched.append(proc)
    assert result.ok, result.diagnosis
    target = BenchTarget(
        f"http://{plan.server.host}:{plan.server.port}",
        plan.engine.flavour,
        label="MTP on" if plan.mtp.enabled else "MTP off",
        drafting_requested=plan.mtp.enabled,
    )
    return target, (build, prepared, result)


@pytest.mark.parametrize("name", list(ERAS))
def test_an_mtp_plan_runs_matches_its_budget_and_passes_the_gate(
    name: str, plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    era, mtp_args = ERAS[name]
    plan = plan_for(
        name,
        kind="hybrid-mtp",
        model_params={"dtype": "q8_0"},
        **{"runtime.ctx": 4096, "mtp.enabled": True, "mtp.draft_max": 2, "mtp.draft_p_min": 0.0},
    )
    on, (build, prepared, result) = _launch(plan, launched)
    assert era_words(profile_for(build)) == era  # the era the build answered to
    argv = list(prepared.spec.argv)
    at = argv.index("--spec-type")
    assert argv[at : at + len(mtp_args)] == mtp_args

    rec = result.reconciliation
    assert rec is not None, result.prediction_error
    assert result.report.context("mtp") is not None, "no MTP context in the log"
    exact = ["weights", "kv_cache", "output", "mtp_kv_cache"]
    if profile_for(build).memory.recurrent_in_kv_buffer:
        assert rec.row("recurrent_state", HOST) is None  # ik logs it inside the KV buffer
    else:
        exact.append("recurrent_state")
    for segment in exact:
        row = rec.row(segment, HOST)
        assert row is not None, (segment, rec.render())
        assert abs(row.delta_mib) <= EXACT_MIB, (segment, rec.render())
    for segment in ("compute", "mtp_compute"):
        row = rec.row(segment, HOST)
        assert row is not None and row.actual_mib > 0, (segment, rec.render())
        assert abs(row.delta_mib) <= COMPUTE * row.actual_mib, (segment, rec.render())

    prompts = select(load_prompts(), ["code_python", "qa_factual", "summarize"])
    report = run_bench(on, prompts, BenchSettings(n_predict=N))
    assert report.error is None and report.total_predicted == len(prompts) * N
    # drafted, and counted on both sides (a random tiny model may have none accepted)
    assert report.total_draft > 0 and 0 <= report.total_draft_accepted <= report.total_draft
    assert report.metrics is not None  # --metrics was on: the totals checked against it
    assert report.metrics.matches, report.metrics.to_dict()

    off_plan = plan_with(plan, {"mtp.enabled": False, "server.port": plan.server.port + 1})
    off, _ = _launch(off_plan, launched)
    gate = gate_both(on, off, prompts, N)
    assert gate.error is None
    assert gate.passed or gate.only_near_ties, [i.to_dict() for i in gate.items if not i.passed]


def test_b11549_refuses_the_moe_cache_without_a_gpu_as_the_plan_says(
    plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    """``--moe-cache-mib`` needs a GPU backend: on the CPU build b11549 exits 1 with 'MoE cache
    requires a GPU backend', so a CPU plan leaves it out and says why; the server then runs."""
    plan = plan_for("upstream-b11549", kind="moe", **{"runtime.moe_cache_mib": 64})
    build = find_build(plan)
    prepared = prepare_launch(plan, build)
    assert "--moe-cache-mib" not in prepared.spec.argv
    assert any("MoE cache requires a GPU backend" in w for w in prepared.spec.warnings)
    forced = dataclasses.replace(
        prepared.process, argv=(*prepared.process.argv, "--moe-cache-mib", "64")
    )
    result, proc = run_launch(dataclasses.replace(prepared, process=forced), timeout=scaled(60))
    if proc is not None:
        launched.append(proc)
    assert proc is None and not result.ok
    assert "MoE cache requires a GPU backend" in result.log_path.read_text()
    fine, _ = _launch(plan, launched)
    assert fine.base_url
