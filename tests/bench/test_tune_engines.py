"""The tuner with the real upstream llama-server on tiny models: the table, the memory-model
filter on a small (fake) GPU budget, a failing candidate, cancel, and the saved best plan."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.waiting import scaled

from mtpstudio.cli.main import main
from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.prompts import load_prompts, select
from mtpstudio.core.bench.results import BenchSettings
from mtpstudio.core.bench.target import CancelToken
from mtpstudio.core.bench.tune import (
    RowStatus,
    TuneConstraints,
    TuneProgress,
    TuneResult,
    run_tune,
)
from mtpstudio.core.bench.tune_space import TuneSpace
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan.choices import CacheType
from mtpstudio.core.plan.io import load_plan, plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts, PlanningContext, evaluate
from mtpstudio.core.units import MIB
from mtpstudio.core.usecases.launch import find_build, prepare_launch
from mtpstudio.core.usecases.plan_server import PlanServerLauncher, bench_plan

pytestmark = pytest.mark.engine

N = 8  # tokens per request
CATS = ["code_python", "summarize", "qa_factual", "translation"]  # in the shipped order
PROMPTS = select(load_prompts(), CATS)
QUICK = BenchSettings(n_predict=N)
EVERY = TuneConstraints(skip_slower=False)  # these tests are about the search, not the estimate
GIB = 1024**3
HOST = HostSpec(64 * GIB, 48 * GIB)


def start_plan(binary: Path, model: Path, **changes: Any) -> Plan:
    base: dict[str, Any] = {
        "device": "cpu",
        "model.path": str(model),
        "model.card": None,
        "engine.flavour": "upstream",
        "engine.binary": str(binary),
        "runtime.ctx": 4096,
        "runtime.cache_type_k": "f16",
        "runtime.cache_type_v": "f16",
        "runtime.threads": 2,
        "mtp.enabled": False,
    }
    base.update(changes)
    return plan_with(Plan(), base)


def context(plan: Plan, gpus: tuple[TargetDevice, ...] = ()) -> PlanningContext:
    assert plan.model.path is not None
    machine = MachineFacts(HOST, gpus, (find_build(plan),))
    return PlanningContext(machine, read_model_info(Path(plan.model.path)))


def row(result: TuneResult, label: str) -> Any:
    return next(r for r in result.rows if r.label == label)


def test_cli_prints_the_full_table_saves_the_best_and_the_history(
    tiny_model: Callable[..., Path],
    engine: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = tiny_model("hybrid-mtp", dtype="q8_0")
    plan = start_plan(engine("upstream"), model, **{"mtp.enabled": True, "mtp.draft_max": 2,
                                                    "mtp.draft_p_min": 0.0})  # fmt: skip
    save_plan(plan, tmp_path / "start.json")
    out, best = tmp_path / "tune.json", tmp_path / "best.json"
    code = main(["tune", "--plan", str(tmp_path / "start.json"), "--n-predict", str(N),
                 "--categories", ",".join(CATS), "--draft-max", "1,2,3", "--p-min", "0,0.75",
                 "--draft-cache", "f16", "--threads", "2", "--max-candidates", "4",
                 "--repeat", "2", "--json", str(out), "--save-best", str(best),
                 "--keep-slower"])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    text = printed.out
    assert text.splitlines()[0].split()[:6] == ["candidate", "fits", "est", "t/s", "tok/s",
                                                "accept"]  # fmt: skip
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    # 3 depths x 2 p-min values, less the starting plan itself
    assert len(rows) == 5 and doc["counts"]["candidates"] == 5
    assert doc["counts"]["skipped_by_memory_model"] == 0  # a CPU plan on a 64 GiB host
    assert doc["counts"]["launched"] == 5  # the baseline and the 4 allowed candidates
    statuses = [r["status"] for r in rows]
    assert statuses.count("not run") == 1
    assert "candidate limit" in next(r["reason"] for r in rows if r["status"] == "not run")
    # 4 candidates, 2 finalists: one halving round on 2 categories, then finals on all 4
    dropped = [r for r in rows if r["status"] == "dropped"]
    assert len(dropped) == 2
    for r in dropped:
        assert [run["stage"] for run in r["runs"]] == ["round 1"]
        assert r["runs"][0]["categories"] == CATS[:2]
        assert "below the kept half" in r["reason"]
    finals = [r for r in rows if r["status"] in ("finalist", "best")]
    kept = [r for r in rows if r["runs"] and r not in dropped]
    assert len(kept) == 2
    for r in kept:
        assert [run["stage"] for run in r["runs"]] == ["round 1", "final"]
        assert r["runs"][1]["categories"] == CATS
        assert r["tok_s"] > 0
        assert min(d["tok_s"] for d in dropped) <= r["runs"][0]["tok_s"]
    assert doc["baseline"]["runs"][0]["categories"] == CATS
    assert all(c["n_requests"] == 2 for c in doc["baseline"]["runs"][0]["report"]["categories"])
    base_tok_s = doc["baseline"]["tok_s"]
    assert base_tok_s > 0 and doc["baseline"]["acceptance"] is not None  # p-min 0: drafts
    # the best is the fastest full run; the gain is against the baseline's full run
    full = {r["label"]: r["tok_s"] for r in [doc["baseline"], *finals]}
    assert doc["best"] == max(full, key=lambda k: full[k])
    # both speeds are stored to 3 decimals, the gain to 4: allow what that rounding can move
    ratio = full[doc["best"]] / base_tok_s
    rounding = ratio * (5e-4 / full[doc["best"]] + 5e-4 / base_tok_s) + 5e-5
    assert doc["gain"] == pytest.approx(ratio - 1, abs=rounding)
    saved = load_plan(best)
    assert saved.model_dump(mode="json") == doc["best_plan"]
    assert f"Best: {doc['best']}" in text and "Gain over the starting plan" in text
    for r in rows:
        if r["runs"]:
            assert r["label"] in text
    # stored: the tuning document, and each full-category run grouped under it
    entries = BenchHistory().entries()
    tune = [e for e in entries if e.kind == "tune"]
    assert len(tune) == 1 and tune[0].report["best"] == doc["best"]
    runs = [e for e in entries if e.kind == "tune-run"]
    assert len(runs) == 3  # the baseline and two finalists


def test_memory_model_skips_what_a_small_gpu_cannot_hold_without_launching(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path]
) -> None:
    """A fake GPU between the two largest cache types' needs: the largest is skipped without a
    launch, the others start. (Which type needs most depends on the backend's rules: on CUDA,
    flash attention's F16 copies of a quantized cache can make q8_0 need more than f16.)"""
    plan = start_plan(engine("upstream"), tiny_model("dense"), **{
        "device": "CUDA0", "runtime.ctx": 16384, "runtime.moe": "gpu",
        "runtime.fit_margin_mib": 0,
    })  # fmt: skip
    probe = context(plan, (TargetDevice("CUDA0", "probe", 64 * GIB),))

    def need(kv: str) -> int:
        changed = plan_with(plan, {"runtime.cache_type_k": kv, "runtime.cache_type_v": kv})
        return evaluate(changed, probe, suggest=False).budget.devices[0].used_bytes

    needs = {kv: need(kv) for kv in ("f16", "q8_0", "q4_0")}
    largest, middle, smallest = sorted(needs, key=lambda kv: needs[kv], reverse=True)
    assert needs[largest] > needs[middle] > needs[smallest]
    total = (needs[largest] + needs[middle]) // 2
    start = plan_with(plan, {"runtime.cache_type_k": smallest, "runtime.cache_type_v": smallest})
    pctx = context(start, (TargetDevice("CUDA0", "small fake GPU", total),))
    # the candidates launch on the machine they were planned for (here: with the fake GPU)
    launcher = PlanServerLauncher(timeout=scaled(60), measure=False, machine=pctx.machine)
    space = TuneSpace(kv_cache=tuple(CacheType(kv) for kv in (smallest, largest, middle)))
    result = run_tune(start, pctx, space, PROMPTS[:2], launcher, settings=QUICK, constraints=EVERY)
    skipped = row(result, f"kv={largest}")
    assert skipped.status is RowStatus.SKIPPED and skipped.fits is False and not skipped.runs
    assert f"{total / MIB:,.0f} MiB" in skipped.reason and "short" in skipped.reason
    assert result.skipped_by_memory == 1
    fitting = row(result, f"kv={middle}")
    assert fitting.fits is True and fitting.full is not None
    launched = [rec.argv for rec in launcher.launched]
    assert len(launched) == 2  # the baseline and the middle one; the largest never started
    assert not any(argv[argv.index("-ctk") + 1] == largest for argv in launched)


def test_a_failing_candidate_is_recorded_and_the_search_goes_on(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path]
) -> None:
    """Heads of 16: the engine refuses a quantized K cache (block size 32) at start-up, on every
    machine; f16 and f32 caches start. (How an engine dies of a resource it cannot get, such
    as 100000 threads, depends on the machine: it may crash, exit or just be slow.)"""
    model = tiny_model("dense", n_head=4, n_head_kv=2, head_dim=16)
    plan = start_plan(engine("upstream"), model)
    space = TuneSpace(kv_cache=(CacheType.F16, CacheType.Q8_0, CacheType.F32, CacheType.Q4_0))
    launcher = PlanServerLauncher(timeout=scaled(60), measure=False)
    result = run_tune(plan, context(plan), space, PROMPTS, launcher, settings=QUICK,
                      constraints=TuneConstraints(finalists=2, skip_slower=False))  # fmt: skip
    refused = [r for r in result.rows if r.label in ("kv=q8_0", "kv=q4_0")]
    assert len(refused) == 2
    for r in refused:
        assert r.status is RowStatus.FAILED and not r.runs
        assert "launch failed" in r.reason
        # how the engine ends after refusing is its own affair: an exit status or a signal
        assert r.diagnosis is not None and r.diagnosis["kind"] in ("exited", "crashed")
        assert r.diagnosis["evidence"], "the diagnosis carries the engine's error lines"
    good = row(result, "kv=f32")
    assert good.full is not None and good.status in (RowStatus.FINALIST, RowStatus.BEST)
    assert result.best is not None and result.best.full is not None
    assert len(launcher.launched) == 5  # baseline, round 1 (all three), the final of f32


def test_cancel_keeps_what_was_measured(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path]
) -> None:
    plan = start_plan(engine("upstream"), tiny_model("dense"))
    space = TuneSpace(kv_cache=(CacheType.F16, CacheType.Q8_0, CacheType.Q4_0), threads=(1, 2))
    cancel = CancelToken()
    steps: list[TuneProgress] = []

    def progress(step: TuneProgress) -> None:
        steps.append(step)
        if step.done == 3:  # the baseline and two candidates of round 1
            cancel.cancel()

    launcher = PlanServerLauncher(timeout=scaled(60), measure=False)
    result = run_tune(plan, context(plan), space, PROMPTS, launcher, constraints=EVERY,
                      settings=QUICK, cancel=cancel, progress=progress)  # fmt: skip
    assert result.cancelled
    measured = [r for r in result.rows if r.runs]
    assert len(measured) == 2
    assert all(r.tok_s and r.tok_s > 0 for r in measured)
    for r in measured:  # the best of them may beat the baseline on the same two categories
        if r is result.best:
            assert r.status is RowStatus.BEST and r.reason == "fastest, on 2 categories only"
            assert result.gain is not None and result.gain > 0
            assert result.gain_basis == "tok/s on 2 categories"
        else:
            assert r.status is RowStatus.MEASURED
            assert r.reason == "measured on a subset only (cancelled)"
    untried = [r for r in result.rows if not r.runs]
    assert len(untried) == len(result.rows) - 2 and untried
    assert all(r.status is RowStatus.NOT_RUN and "cancelled" in r.reason for r in untried)
    assert result.baseline.full is not None
    assert result.best is not None  # chosen on the subset against the baseline's same categories
    assert result.best in (result.baseline, *measured)
    # progress: done counts up by one, left counts down, time moves forward
    assert [s.done for s in steps] == [1, 2, 3]
    assert steps[0].left > steps[-1].left >= 0
    assert steps[0].elapsed_s <= steps[-1].elapsed_s
    assert steps[-1].remaining_s is not None and steps[-1].remaining_s > 0


def test_the_saved_best_plan_relaunches_with_the_same_command(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path], tmp_path: Path
) -> None:
    model = tiny_model("hybrid-mtp", dtype="q8_0")
    plan = start_plan(engine("upstream"), model, **{"mtp.enabled": True, "mtp.draft_p_min": 0.0})
    space = TuneSpace(draft_max=(1, 3), draft_cache=(CacheType.F16, CacheType.Q8_0))
    launcher = PlanServerLauncher(timeout=scaled(60), measure=False)
    result = run_tune(
        plan, context(plan), space, PROMPTS[:2], launcher, settings=QUICK, constraints=EVERY
    )
    assert result.best is not None and result.best_plan is not None
    save_plan(result.best_plan, tmp_path / "best.json")
    loaded = load_plan(tmp_path / "best.json")
    assert loaded == result.best_plan
    # the best's last run: its recorded command, rebuilt from the saved file
    record = next(r for r in reversed(launcher.launched)
                  if r.plan == bench_plan(result.best_plan, r.plan.server.port))  # fmt: skip
    again = prepare_launch(bench_plan(loaded, record.plan.server.port), find_build(loaded))
    assert tuple(again.spec.argv) == record.argv
    for dotted, value in result.best.changes.items():
        section, key = dotted.split(".")
        assert getattr(getattr(loaded, section), key) == value or str(
            getattr(getattr(loaded, section), key)
        ) == str(value)
    # and it really runs: one more measurement of the saved plan
    rerun = run_tune(
        loaded,
        context(loaded),
        TuneSpace(),
        PROMPTS[:1],
        launcher,
        settings=QUICK,
        constraints=EVERY,
    )
    assert rerun.rows == [] and rerun.baseline.full is not None
    assert rerun.baseline.full.report.total_draft > 0  # MTP drafts, as in the tuning


def test_ctrl_c_in_the_cli_cancels_and_prints_what_was_measured(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path], tmp_path: Path
) -> None:
    plan = start_plan(engine("upstream"), tiny_model("dense"))
    save_plan(plan, tmp_path / "start.json")
    argv = [sys.executable, "-m", "mtpstudio.cli.main", "tune", "--plan",
            str(tmp_path / "start.json"), "--n-predict", str(N), "--categories", ",".join(CATS),
            "--kv-types", "f16,q8_0,q4_0", "--threads", "1,2",
            "--json", str(tmp_path / "t.json")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # progress lines: "[N done, M left, ...] stage: label"
            if line.startswith("[2 done"):
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "cancelling" in err
    assert "(cancelled)" in out and "baseline (starting plan)" in out
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["cancelled"] is True
    assert doc["baseline"]["runs"] and doc["baseline"]["tok_s"] > 0
    assert 1 <= sum(1 for r in doc["rows"] if r["runs"]) < len(doc["rows"])
    assert any("cancelled" in r["reason"] for r in doc["rows"])  # the run Ctrl-C cut short
    never = [r["reason"] for r in doc["rows"] if not r["runs"]]  # cancelled, or predicted slower
    assert all("cancelled" in why or why.startswith("speed model: ") for why in never), never


def test_the_time_budget_stops_launching_and_keeps_the_baseline(
    tiny_model: Callable[..., Path], engine: Callable[[str], Path]
) -> None:
    plan = start_plan(engine("upstream"), tiny_model("dense"))
    space = TuneSpace(kv_cache=(CacheType.F16, CacheType.Q8_0))
    launcher = PlanServerLauncher(timeout=scaled(60), measure=False)
    result = run_tune(plan, context(plan), space, PROMPTS[:2], launcher, settings=QUICK,
                      constraints=TuneConstraints(time_budget_s=0.001,
                                                  skip_slower=False))  # fmt: skip
    assert result.budget_reached and not result.cancelled
    assert len(launcher.launched) == 1 and result.baseline.full is not None
    (only,) = result.rows
    assert only.status is RowStatus.NOT_RUN and "time budget" in only.reason
    assert result.best is result.baseline and result.gain == 0.0
    assert result.note == "no candidate was measured"
