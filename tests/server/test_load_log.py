"""The load-log reader on recorded real logs of both engines (tests/fixtures/server/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mtpstudio.core.server.load_log import classify_allocation_failure, parse_load_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "server"
_SIZE = re.compile(r"([\d.]+) MiB")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def logged_sum(text: str, pattern: str) -> float:
    """Sum of the MiB figures on lines matching ``pattern``, computed independently."""
    total = 0.0
    for line in text.splitlines():
        if re.search(pattern, line) and (m := _SIZE.search(line.split("=")[-1])):
            total += float(m.group(1))
    return total


def test_dense_upstream_buffers_and_context() -> None:
    text = fixture("upstream-dense.log")
    report = parse_load_log(text)
    assert report.model == {"CPU_Mapped": logged_sum(text, r"model buffer size")}
    main = report.context("main")
    assert main is not None and main.n_ctx == 512
    assert sum(main.kv.values()) == logged_sum(text, r"KV buffer size")
    assert sum(main.compute.values()) == pytest.approx(logged_sum(text, r"compute buffer size"))
    assert report.loaded and not report.out_of_memory and report.drafting is None
    assert report.error_lines == []


def test_mtp_context_is_separated_from_the_main_one() -> None:
    text = fixture("upstream-mtp.log")
    report = parse_load_log(text)
    main, mtp = report.context("main"), report.context("mtp")
    assert main is not None and mtp is not None
    assert main.recurrent and not mtp.recurrent
    assert sum(main.kv.values()) + sum(mtp.kv.values()) == pytest.approx(
        logged_sum(text, r"KV buffer size")
    )
    assert report.drafting == "mtp"


def test_draft_model_buffers_are_the_draft_models() -> None:
    text = fixture("upstream-draft-model.log")
    report = parse_load_log(text)
    assert report.model and report.draft_model
    assert sum(report.model.values()) + sum(report.draft_model.values()) == pytest.approx(
        logged_sum(text, r"model buffer size")
    )
    draft = report.context("draft")
    assert draft is not None and sum(draft.kv.values()) > 0
    assert report.drafting == "draft"


def test_mtp_requested_without_mtp_layers_is_reported() -> None:
    report = parse_load_log(fixture("upstream-mtp-without-layers.log"))
    assert any("doesn't contain MTP layers" in d for d in report.drafting_disabled)
    assert not report.loaded and report.drafting is None


def test_upstream_kv_out_of_memory_on_the_cpu() -> None:
    report = parse_load_log(fixture("upstream-oom-kv-cpu.log"))
    assert report.out_of_memory
    kinds = {f.what for f in report.allocation_failures}
    assert kinds == {"kv_cache"}
    assert any(f.where == "CPU" for f in report.allocation_failures)
    assert max(f.mib or 0 for f in report.allocation_failures) == 131072.0


@pytest.mark.parametrize(
    ("line", "what", "where"),
    [
        # [UP] ggml-cuda.cu:888, as the engine formats it
        (
            "E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: "
            "cudaMalloc failed: out of memory",
            "unknown",
            "CUDA0",
        ),
        (
            "E llama_init_from_model: failed to initialize the context: failed to allocate buffer "
            "for rs cache",
            "recurrent_state",
            None,
        ),
        (
            "E llama_init_from_model: failed to initialize the context: failed to allocate compute "
            "pp buffers",
            "compute",
            None,
        ),
        (
            "E llama_model_load: error loading model: unable to allocate CUDA0 buffer",
            "weights",
            None,
        ),
        # [IK] src/llama.cpp:1035, :5839, :2499-2574
        ("llama_kv_cache_init: failed to allocate buffer for kv cache", "kv_cache", None),
        ("llama_init_from_model: failed to allocate compute buffers", "compute", None),
        ("error loading model: Unable to auto-fit model", "fit", None),
        ("CUDA error: out of memory", "runtime", None),
    ],
)
def test_engine_source_messages_are_classified(line: str, what: str, where: str | None) -> None:
    failure = classify_allocation_failure(line)
    assert (failure.what, failure.where) == (what, where)


def test_ik_free_memory_warning_is_not_an_out_of_memory() -> None:
    text = (
        "llm_load_tensors: Free memory 0 MiB on device 0 is less the required compute buffer "
        "size 12.5 MiB\nllm_load_tensors:        CPU buffer size =     1.63 MiB\n"
    )
    report = parse_load_log(text)
    assert not report.out_of_memory
    assert report.error_lines == []
    assert report.model == {"CPU": 1.63}


def test_a_cuda_oom_before_the_context_names_the_failed_buffer() -> None:
    text = "\n".join(
        [
            "E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 640.00 MiB on device 0: "
            "cudaMalloc failed: out of memory",
            "E llama_init_from_model: failed to initialize the context: failed to allocate buffer "
            "for kv cache",
        ]
    )
    report = parse_load_log(text)
    assert {f.what for f in report.allocation_failures} == {"kv_cache"}
    assert report.allocation_failures[0].where == "CUDA0"
    assert report.allocation_failures[0].mib == 640.0


def test_ik_draft_model_is_the_second_model_load() -> None:
    text = fixture("ik-draft-model.log")
    report = parse_load_log(text)
    assert report.model == {"CPU": 1.63} and report.draft_model == {"CPU": 0.41}
    draft = report.context("draft")
    assert draft is not None and draft.n_ctx == 512
    assert report.drafting == "draft" and report.loaded


def test_ik_kv_out_of_memory_on_the_cpu() -> None:
    report = parse_load_log(fixture("ik-oom-kv-cpu.log"))
    assert {f.what for f in report.allocation_failures} == {"kv_cache"}
    assert max(f.mib or 0 for f in report.allocation_failures) == pytest.approx(131072.0)
    assert any(f.where == "CPU" for f in report.allocation_failures)
    # ik warns about its own estimate on a CPU-only build; that is not the failure
    assert any("less the required compute buffer" in line for line in report.fit_lines)
    assert all("Free memory" not in f.line for f in report.allocation_failures)


def test_ik_missing_model_log() -> None:
    report = parse_load_log(fixture("ik-missing-model.log"))
    assert not report.out_of_memory and not report.loaded
    assert any("unable to load model" in e for e in report.error_lines)
