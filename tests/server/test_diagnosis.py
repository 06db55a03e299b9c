"""Diagnoses: real recorded failure logs -> one-sentence cause and applicable Plan fixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpstudio.core.plan import Plan, plan_with
from mtpstudio.core.server.diagnosis import CauseKind, diagnose, oom_fixes
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.server.process import ProcessOutcome

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "server"


def plan(**changes: object) -> Plan:
    base = {"model.path": "/m.gguf", "model.card": None}
    return plan_with(Plan(), {**base, **changes})


def test_real_upstream_kv_oom_on_the_cpu() -> None:
    report = parse_load_log((FIXTURES / "upstream-oom-kv-cpu.log").read_text())
    p = plan(device="cpu", **{"runtime.ctx": 4194304, "runtime.cache_type_k": "f32",
                             "runtime.cache_type_v": "f32", "mtp.enabled": False})  # fmt: skip
    d = diagnose(report, p, ProcessOutcome(1))
    assert d.kind is CauseKind.OUT_OF_MEMORY
    assert d.cause == (
        "The server ran out of memory allocating the KV cache (131,072.00 MiB) in system RAM."
    )
    titles = [f.title for f in d.fixes]
    assert titles[0] == "halve the context to 2097152 tokens"
    assert titles[1] == "quantize the KV cache to q8_0"
    assert not any("margin" in t for t in titles)  # a CPU plan has no GPU margin
    for fix in d.fixes:  # every fix is a valid, different plan
        assert fix.apply(p) != p
    assert "halve the context" in d.render()


def test_fixes_are_ranked_by_the_buffer_that_failed() -> None:
    p = plan(**{"runtime.parallel": 2, "mtp.draft_max": 3, "runtime.cache_type_k": "f16",
                "runtime.cache_type_v": "f16"})  # fmt: skip
    rs = [f.changes for f in oom_fixes(p, "recurrent_state")]
    assert rs[0] == {"runtime.parallel": 1}
    assert rs[1] == {"mtp.draft_max": 2}
    weights = [f.title for f in oom_fixes(p, "weights", n_layer=40)]
    assert weights[0] == "keep the experts of 4 layers on the CPU"
    compute = [f.changes for f in oom_fixes(p, "compute")]
    assert compute[0] == {"runtime.fit_margin_mib": 1024 + 256}


def test_no_fix_that_changes_nothing() -> None:
    p = plan(**{"runtime.parallel": 1, "mtp.enabled": False, "runtime.moe": "all_cpu",
                "runtime.ctx": 256, "runtime.cache_type_k": "q4_0"})  # fmt: skip
    titles = [f.title for f in oom_fixes(p, "kv_cache")]
    assert titles == ["raise the safety margin to 1280 MiB"]


def test_dense_model_gets_no_expert_fix() -> None:
    assert not any("experts" in f.title for f in oom_fixes(plan(), "weights", moe=False))


def test_mtp_without_layers_says_drafting_is_unavailable() -> None:
    report = parse_load_log((FIXTURES / "upstream-mtp-without-layers.log").read_text())
    d = diagnose(report, plan(), ProcessOutcome(1))
    assert d.kind is CauseKind.DRAFTING_UNAVAILABLE
    assert d.fixes[0].changes == {"mtp.enabled": False}


@pytest.mark.parametrize(
    ("code", "kind", "phrase"),
    [
        (-9, CauseKind.KILLED, "killed from outside (SIGKILL"),
        (-6, CauseKind.CRASHED, "crashed with SIGABRT (exit 134)"),
        (3, CauseKind.EXITED, "exited with status 3"),
    ],
)
def test_exit_without_log_evidence(code: int, kind: CauseKind, phrase: str) -> None:
    d = diagnose(parse_load_log(""), plan(), ProcessOutcome(code))
    assert d.kind is kind
    assert phrase in d.cause


def test_real_ik_kv_oom_on_the_cpu() -> None:
    report = parse_load_log((FIXTURES / "ik-oom-kv-cpu.log").read_text())
    p = plan(device="cpu", **{"engine.flavour": "ik", "runtime.ctx": 4194304,
                             "mtp.enabled": False})  # fmt: skip
    d = diagnose(report, p, ProcessOutcome(1))
    assert d.kind is CauseKind.OUT_OF_MEMORY
    assert d.cause == (
        "The server ran out of memory allocating the KV cache (131,072.00 MiB) in system RAM."
    )
    assert d.fixes[0].changes == {"runtime.ctx": 2097152}


# How ik 0.1.5 ends after "unable to load model" is not its contract: it returns from main while
# its threads still run, and one binary on one machine dies of SIGABRT (glibc's "free(): invalid
# pointer") or SIGSEGV from run to run; a shell reports a signal as 128 + N. The diagnosis is
# the same.
ENDINGS = [
    (-11, "crashed with SIGSEGV (exit 139)"),
    (139, "crashed with SIGSEGV (exit 139)"),
    (-6, "crashed with SIGABRT (exit 134)"),
    (134, "crashed with SIGABRT (exit 134)"),
    (1, "exited with status 1"),
]


@pytest.mark.parametrize(("code", "ending"), ENDINGS)
def test_real_ik_missing_model_is_a_load_failure_however_ik_ends(code: int, ending: str) -> None:
    report = parse_load_log((FIXTURES / "ik-missing-model.log").read_text())
    d = diagnose(report, plan(), ProcessOutcome(code))
    assert d.kind is CauseKind.MODEL_LOAD
    assert d.cause == f"The engine could not load the model and {ending}."
    assert any("unable to load model" in e for e in d.evidence)
    as_recorded = diagnose(report, plan(), ProcessOutcome(-11))
    assert (d.evidence, d.fixes) == (as_recorded.evidence, as_recorded.fixes)
