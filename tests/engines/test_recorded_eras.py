"""Planning on the recorded builds of each engine era: what they answered decides the profile, the
MTP spelling and the verdict; today's ik's recorded MTP run reconciles with the budget.

The answers and logs are real (tests/fixtures/engines/, see its README): the pinned CI engines
(upstream b11434, ik 0.1.5) and today's ik_llama.cpp (8337e4c), which CI cannot build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.engines.replay import FIXTURES, RecordedRunner
from support.argv import launch_spec

from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD
from mtpstudio.core.detect.engines import EngineCandidate, identify_engine
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.profiles import ik, ik_stages, profile_for, upstream
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.memory.measured import predicted_segments
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    evaluate,
    resolve,
)
from mtpstudio.core.server.diagnosis import CauseKind, diagnose
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.server.process import ProcessOutcome
from mtpstudio.core.server.reconcile import actual_segments
from mtpstudio.core.units import GIB

PROFILE_OF = {
    "upstream-11434": upstream.PROFILE,
    "ik-0.1.5": ik.PROFILE,
    "ik-8337e4c": ik_stages.PROFILE,
}
# The Qwen3.6-35B-A3B card (MTP auto, draft max 2, p-min 0.75) on each build: the MTP words.
MTP_WORDS = {
    "upstream-11434": ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2",
                       "--spec-draft-p-min", "0.75"],
    "ik-0.1.5": [],
    "ik-8337e4c": ["--spec-type", "mtp:n_max=2,p_min=0.75"],
}  # fmt: skip
HOST = HostSpec(64 * GIB, 60 * GIB)


def recorded_build(era: str, tmp_path: Path) -> EngineBuild:
    """The recorded build of ``era`` as detection describes it (a stand-in file, real answers)."""
    binary = tmp_path / era / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 99\n")
    binary.chmod(0o755)
    runner = RecordedRunner(FIXTURES / era)
    info = identify_engine(EngineCandidate(binary, "added"), runner, workers=2)
    assert runner.unrecorded == []  # every probe detection made was answered by the real build
    build = info.to_build()
    assert build is not None
    return build


def card_plan(build: EngineBuild) -> Plan:
    changes = {"engine.flavour": build.flavour.value, "engine.binary": str(build.binary),
               "device": "rtx-4070-super"}  # fmt: skip
    return plan_with(Plan(), changes)


def runs_of(args: list[str], words: list[str]) -> bool:
    """``words`` stand together, in order, in ``args``."""
    return any(args[i : i + len(words)] == words for i in range(len(args) - len(words) + 1))


@pytest.mark.parametrize("era", list(PROFILE_OF))
def test_each_recorded_build_plans_the_qwen36_card_in_its_own_words(
    era: str, tmp_path: Path
) -> None:
    build = recorded_build(era, tmp_path)
    assert profile_for(build) is PROFILE_OF[era]
    info = load_model_info(ModelChoice(card=DEFAULT_MODEL_CARD))
    result = evaluate(card_plan(build), PlanningContext(MachineFacts(HOST, (), (build,)), info))
    args = result.argv
    words = MTP_WORDS[era]
    assert runs_of(args, words)
    assert "-mtp" not in args and "--draft-max" not in args  # neither era writes them for qwen
    if era == "ik-0.1.5":  # the pinned ik cannot load the card's MTP block
        assert result.verdict.status == "will_not_run"
        assert result.mtp_line.startswith("MTP auto: off")
    else:
        assert not result.verdict.blockers and result.mtp_line.startswith("MTP auto: on")


def glm(layers: int = 46) -> ModelInfo:
    return ModelInfo(architecture="glm4moe", name="GLM-4.5-Air", block_count=layers + 1,
                     n_layer=layers, n_nextn_layer=1, n_embd=4096, n_head=96, n_head_kv=8,
                     key_length=128, value_length=128, context_length=131072,
                     vocab_size=151552, n_expert=128, n_expert_used=8)  # fmt: skip


@pytest.mark.parametrize(
    ("era", "words"),
    [
        ("ik-0.1.5", ("-mtp", "--draft-max", "3", "--draft-p-min", "0.5")),
        ("ik-8337e4c", ("--spec-type", "mtp:n_max=3,p_min=0.5")),
    ],
)
def test_both_ik_eras_draft_a_glm_model_each_in_its_spelling(
    era: str, words: tuple[str, ...], tmp_path: Path
) -> None:
    build = recorded_build(era, tmp_path)
    plan = plan_with(card_plan(build), {"model.path": "/m/glm.gguf", "model.card": None,
                                        "mtp.enabled": True, "mtp.draft_max": 3,
                                        "mtp.draft_p_min": 0.5})  # fmt: skip
    spec = launch_spec(plan, build, glm())
    assert spec.args[-len(words) :] == words and not spec.blockers
    assert {note.flag for note in spec.flags} <= build.accepted_flags  # as the build answered


def test_todays_ik_mtp_run_reconciles_with_the_budget(
    tiny_model: Callable[..., Path], tmp_path: Path
) -> None:
    """The recorded run: the tiny hybrid-mtp model, -c 512 -np 1 -t 2, mtp:n_max=3,p_min=0.0."""
    build = recorded_build("ik-8337e4c", tmp_path)
    model = tiny_model("hybrid-mtp")
    info = read_model_info(model)
    plan = plan_with(Plan(), {
        "model.path": str(model), "model.card": None, "engine.flavour": "ik",
        "engine.binary": str(build.binary), "device": "cpu", "runtime.ctx": 512,
        "runtime.threads": 2, "runtime.cache_type_k": "f16", "runtime.cache_type_v": "f16",
        "mtp.draft_max": 3, "mtp.draft_p_min": 0.0, "mtp.enabled": True,
    })  # fmt: skip
    resolved = resolve(plan, PlanningContext(MachineFacts(HOST, (), (build,)), info))
    assert resolved.mtp.active and resolved.profile is ik_stages.PROFILE
    spec_args = launch_spec(resolved.effective, build, info, cpu_only=True).args
    assert spec_args[-2:] == ("--spec-type", "mtp:n_max=3,p_min=0")
    log = (FIXTURES / "ik-8337e4c" / "mtp-run-pmin0" / "server.log").read_text(encoding="utf-8")
    report = parse_load_log(log)
    assert [c.kind for c in report.contexts] == ["main", "mtp"] and report.drafting == "mtp"
    facts = resolved.profile.memory
    predicted = predicted_segments(budget_for(resolved), facts)
    actual = actual_segments(report)
    # weights, the main KV buffer (nextn layer and per-step checkpoints included) and the MTP
    # context's KV and compute agree to the log's two decimals; the main compute buffer is
    # 0.30 MiB over the estimate (ik reserves decode embeddings for MTP): not asserted here
    for segment in ("weights", "kv_cache", "mtp_kv_cache", "mtp_compute"):
        assert predicted[(segment, "CPU")] == pytest.approx(actual[(segment, "CPU")], abs=0.011)


def read_log(era: str, run: str) -> str:
    return (FIXTURES / era / run / "server.log").read_text(encoding="utf-8")


def test_todays_ik_logs_its_mtp_context_after_the_fact() -> None:
    report = parse_load_log(read_log("ik-8337e4c", "mtp-run-pmin0.75"))
    main, mtp = report.context("main"), report.context("mtp")
    assert main is not None and mtp is not None and report.drafting == "mtp"
    assert main.kv == {"CPU": pytest.approx(0.28 + 0.11 + 0.00)}  # KV buffer, per-step, shadow
    assert (mtp.kv, mtp.compute) == ({"CPU": 0.13}, {"CPU": 2.01})
    assert report.n_slots == 1  # ik writes n_slots=1 in an INFO line


@pytest.mark.parametrize(
    ("run", "changes"),
    [
        ("mtp-run-np2-refused", {"runtime.parallel": 1}),
        ("mtp-run-without-layers-refused", {"mtp.enabled": False}),
    ],
)
def test_todays_ik_refusals_are_diagnosed_with_their_fix(
    run: str, changes: dict[str, object]
) -> None:
    report = parse_load_log(read_log("ik-8337e4c", run))
    assert report.drafting_disabled and not report.loaded
    plan = plan_with(Plan(), {"engine.flavour": "ik", "runtime.parallel": 2, "mtp.enabled": True})
    diagnosis = diagnose(report, plan, ProcessOutcome(1))
    assert diagnosis.kind is CauseKind.DRAFTING_UNAVAILABLE
    assert diagnosis.fixes[0].changes == changes


def test_a_refused_legacy_flag_says_why_in_its_own_words(tmp_path: Path) -> None:
    from mtpstudio.core.engines.probe import FlagSpec, probe_flag

    runner = RecordedRunner(FIXTURES / "ik-8337e4c")
    probe = probe_flag(tmp_path / "llama-server", FlagSpec("-mtp", ((),), "MTP on"), runner, 5.0)
    assert not probe.accepted
    assert probe.detail == (
        "exit status 1: legacy speculative option '-mtp' is disabled; use --spec-type "
        "mtp:n_max=1,p_min=0.0"
    )
