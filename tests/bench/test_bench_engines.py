"""The benchmark against the real llama-server builds on tiny models: honest totals, failures,
the gate, A/B interleaving, concurrency, and the CLI end to end (plans through a launcher)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.gate import gate_both
from support.tiny_models import HUGE_KV_MODEL, HUGE_KV_PLAN
from support.waiting import wait_for

from mtpstudio.cli.main import main
from mtpstudio.core.bench.ab import run_ab
from mtpstudio.core.bench.bench_text import render_text
from mtpstudio.core.bench.client import metric_counters, parse_metrics
from mtpstudio.core.bench.concurrency import run_concurrent
from mtpstudio.core.bench.doctor import diagnose
from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.prompts import CATEGORIES, load_prompts, select
from mtpstudio.core.bench.results import BenchReport, BenchSettings
from mtpstudio.core.bench.runner import run_bench
from mtpstudio.core.bench.target import BenchProgress, BenchTarget, CancelToken
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict, plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.state import servers_dir
from mtpstudio.core.usecases.plan_server import PlanServerLauncher

pytestmark = pytest.mark.engine

N = 8  # tokens per request in these tests (the CLI default stays 192)
CTX = 4096  # the long_code_review prompt is ~1500 tokens of the tiny character vocabulary
QUICK = BenchSettings(n_predict=N)

# What ik logs per request (engines.md §4, "Server-log equivalents"; ik-llama-cpp-python 0.1.5):
# ik has no draft counters in /metrics, so its own log is the only account to check against.
IK_ACCEPT = re.compile(r"draft acceptance rate = [\d.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)")


def metrics(server: Any) -> dict[str, float]:
    return metric_counters(parse_metrics(server.get("/metrics").text))


def assert_metrics_agree(before: dict[str, float], after: dict[str, float], r: BenchReport) -> None:
    """The server's counters moved by exactly the report's totals plus the discarded warm-up."""
    assert r.warmup is not None
    assert after["predicted"] - before["predicted"] == r.total_predicted + r.warmup.predicted_n
    if "draft" in after:
        assert after["draft"] - before["draft"] == r.total_draft + r.warmup.draft_n
        assert after["accepted"] - before["accepted"] == (
            r.total_draft_accepted + r.warmup.accepted_n
        )
    assert r.metrics is not None and r.metrics.matches, r.metrics


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return bool(stat) and stat[0] not in ("Z", "X")


def assert_full_run(r: BenchReport) -> None:
    assert r.error is None, r.error
    assert [c.category for c in r.categories] == list(CATEGORIES)
    assert r.n_requests == 9
    assert all(s.predicted_n == N for c in r.categories for s in c.samples)
    assert r.total_predicted == 9 * N
    assert r.total_draft > 0
    assert 0 <= r.total_draft_accepted <= r.total_draft
    for c in r.categories:
        assert c.decode_tps and c.decode_tps > 0
        assert c.prefill_tps and c.prefill_tps > 0
        assert c.ttft_ms and c.ttft_ms > 0
    assert r.tok_s is not None and r.tok_s > 0
    assert r.drafting_warning is None


def test_upstream_mtp_totals_match_the_servers_counters(tiny_model, running_server) -> None:
    server = running_server(
        "upstream",
        tiny_model("hybrid-mtp", dtype="q8_0"),
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--metrics"],
        ctx_size=CTX,
    )
    # The server's counters after each measured request (the runner reports each one done
    # before it sends the next), so every category can be checked on its own.
    after_each: list[dict[str, float]] = []

    def snapshot(step: BenchProgress) -> None:
        if step.phase == "measure":
            after_each.append(metrics(server))

    before = metrics(server)
    r = run_bench(BenchTarget(server.base_url, label="mtp"), load_prompts(), QUICK,
                  progress=snapshot)  # fmt: skip
    after = metrics(server)
    assert_full_run(r)
    assert r.drafting_requested is True  # upstream echoes speculative.types: none,draft-mtp
    assert r.endpoint == "/completion"
    assert_metrics_agree(before, after, r)
    assert r.warmup is not None and len(after_each) == len(r.categories) == 9
    warmup = {"predicted": r.warmup.predicted_n, "draft": r.warmup.draft_n,
              "accepted": r.warmup.accepted_n}  # fmt: skip
    previous = {k: before[k] + warmup[k] for k in warmup}
    for category, counters in zip(r.categories, after_each, strict=True):
        moved = {k: counters[k] - previous[k] for k in warmup}
        assert moved == {"predicted": category.predicted, "draft": category.draft,
                         "accepted": category.accepted}, category.category  # fmt: skip
        previous = counters
    text = render_text(r)
    assert "server /metrics counters agree" in text


def test_upstream_draft_pair(tiny_model, running_server) -> None:
    server = running_server(
        "upstream",
        tiny_model("dense"),
        ["-md", str(tiny_model("draft")), "--spec-type", "draft-simple", "--metrics"],
        ctx_size=CTX,
    )
    before = metrics(server)
    r = run_bench(BenchTarget(server.base_url), load_prompts(), QUICK)
    assert_full_run(r)
    assert r.drafting_requested is True
    assert_metrics_agree(before, metrics(server), r)


def test_ik_draft_pair_on_v1_completions(tiny_model, running_server) -> None:
    server = running_server(
        "ik",
        tiny_model("dense"),
        ["-md", str(tiny_model("draft")), "--spec-type", "draft:n_max=4,p_min=0.0", "--metrics"],
        ctx_size=CTX,
    )
    before = metrics(server)
    target = BenchTarget(server.base_url, EngineFlavour.IK, drafting_requested=True)
    r = run_bench(target, load_prompts(), QUICK)
    assert_full_run(r)
    assert r.endpoint == "/v1/completions"
    after = metrics(server)
    assert "draft" not in after  # ik has no speculative counters
    assert_metrics_agree(before, after, r)
    # The warm-up and the nine requests; the log may trail the last response a little.
    wait_for(lambda: len(IK_ACCEPT.findall(server.log_text())) >= 10, timeout=10)
    accepts = [(int(a), int(g)) for a, g in IK_ACCEPT.findall(server.log_text())]
    assert len(accepts) == 10
    assert sum(g for _, g in accepts[1:]) == r.total_draft
    assert sum(a for a, _ in accepts[1:]) == r.total_draft_accepted


def test_requested_drafting_without_drafts_is_flagged(tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model("dense"), ctx_size=CTX)
    target = BenchTarget(server.base_url, drafting_requested=True)
    r = run_bench(target, select(load_prompts(), ["qa_factual"]), QUICK)
    assert r.error is None and r.total_draft == 0
    assert render_text(r).startswith("!! DRAFTING IS OFF")
    plain = run_bench(BenchTarget(server.base_url), select(load_prompts(), ["qa_factual"]), QUICK)
    assert plain.drafting_requested is False and plain.drafting_warning is None


def test_a_server_killed_mid_run_keeps_finished_categories(tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model("dense"), ctx_size=CTX)

    def kill_after_three(step: BenchProgress) -> None:
        if step.phase == "measure" and step.done == 3:
            server.kill()

    r = run_bench(BenchTarget(server.base_url, label="victim"), load_prompts(), QUICK,
                  progress=kill_after_three)  # fmt: skip
    assert [c.category for c in r.categories] == list(CATEGORIES[:3])
    assert r.total_predicted == 3 * N
    assert r.error is not None and not r.cancelled
    assert r.error.startswith(f"victim stopped answering during {CATEGORIES[3]!r}")
    assert "Check that the server is still running" in r.error
    assert render_text(r).splitlines()[-1].endswith("(3 categories kept)")


def test_cancel_keeps_finished_categories(tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model("dense"), ctx_size=CTX)
    cancel = CancelToken()

    def cancel_after_two(step: BenchProgress) -> None:
        if step.phase == "measure" and step.done == 2:
            cancel.cancel()

    r = run_bench(BenchTarget(server.base_url), load_prompts(), QUICK, cancel=cancel,
                  progress=cancel_after_two)  # fmt: skip
    assert r.cancelled and [c.category for c in r.categories] == list(CATEGORIES[:2])
    assert r.error is not None and "cancelled" in r.error
    assert server.alive()  # cancelling stops the client, not the server


@pytest.fixture
def dense_trio(tiny_model, running_server) -> dict[str, BenchTarget]:
    """The tiny dense model drafting for itself, plain, and a different model (another seed)."""
    dense = tiny_model("dense")
    self_draft = running_server("upstream", dense, ["-md", str(dense), "--spec-type",
                                                    "draft-simple"], ctx_size=CTX)  # fmt: skip
    plain = running_server("upstream", dense, ctx_size=CTX)
    other = running_server("upstream", tiny_model("dense", seed=2), ctx_size=CTX)
    return {
        "self": BenchTarget(self_draft.base_url, label="self-draft"),
        "plain": BenchTarget(plain.base_url, label="plain"),
        "other": BenchTarget(other.base_url, label="other-seed"),
    }


def test_gate_passes_for_self_drafting_and_catches_another_model(dense_trio) -> None:
    prompts = load_prompts()
    ok = gate_both(dense_trio["self"], dense_trio["plain"], prompts, N)
    assert ok.error is None
    # Drafting is lossless: the same ids, except where a batched and a one-token decode round
    # differently (which CPU kernels run decides) and flip a near tie; the gate says so.
    assert ok.passed or ok.only_near_ties, [i.to_dict() for i in ok.items if not i.passed]
    assert len(ok.items) == 9

    bad = gate_both(dense_trio["self"], dense_trio["other"], prompts, N)
    assert not bad.passed
    failing = [i for i in bad.items if not i.passed]
    assert failing
    for item in failing:  # upstream streams the generated ids: the gate compares those
        m, on, off = item.mismatch, item.ids_on, item.ids_off
        assert m is not None and on is not None and off is not None
        assert len(on) == len(off) == N
        assert on[: m.index] == off[: m.index] and on[m.index] != off[m.index]
        assert m.token_on is not None and m.token_off is not None
        assert (m.token_on[0], m.token_off[0]) == (on[m.index], off[m.index])
        assert item.text_on.startswith(m.same_prefix)
        assert m.logprob_gap is not None and not m.near_tie  # another model: a real difference
    assert not bad.only_near_ties


def test_ab_interleaves_per_category(dense_trio) -> None:
    order: list[str] = []

    def record(step: BenchProgress) -> None:
        if step.phase == "measure":
            order.append(step.label)

    prompts = select(load_prompts(), ["code_python", "code_cpp", "summarize", "qa_factual"])
    ab = run_ab(dense_trio["plain"], dense_trio["self"], prompts, QUICK, progress=record)
    assert ab.error is None
    assert order == ["plain", "self-draft", "self-draft", "plain", "plain", "self-draft",
                     "self-draft", "plain"]  # fmt: skip
    assert [r.category for r in ab.rows] == [p.category for p in prompts]
    assert ab.a.total_draft == 0 and ab.a.aggregate_accept_rate is None
    assert ab.b.total_draft > 0 and ab.b.aggregate_accept_rate == 1.0  # a model agrees with itself
    assert all(r.decode_delta_pct is not None for r in ab.rows)


def test_concurrent_clients(tiny_model, running_server) -> None:
    server = running_server("upstream", tiny_model("dense"), ctx_size=2 * CTX, parallel=2)
    prompts = select(load_prompts(), ["code_python", "qa_factual", "creative_short"])
    c = run_concurrent(BenchTarget(server.base_url), prompts, 2, QUICK)
    assert c.error is None
    assert [len(x.samples) for x in c.clients] == [3, 3]
    assert [s.category for s in c.clients[1].samples] == ["qa_factual", "creative_short",
                                                          "code_python"]  # fmt: skip
    assert c.total_predicted == 6 * N
    assert c.aggregate_tok_s == pytest.approx(c.total_predicted / c.wall_s)
    assert all(x.tok_s and x.tok_s > 0 for x in c.clients)


# ---- the CLI --------------------------------------------------------------------------------


def test_cli_url_run_json_and_history(tiny_model, running_server, tmp_path: Path, capsys) -> None:
    server = running_server(
        "upstream",
        tiny_model("hybrid-mtp", dtype="q8_0"),
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--metrics"],
        ctx_size=CTX,
    )
    out = tmp_path / "run.json"
    argv = ["bench", "--url", server.base_url, "--n-predict", str(N), "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "code_python" in printed and "long_code_review" in printed
    doc = json.loads(out.read_text())
    aggregate = doc["bench"]["aggregate"]
    assert aggregate["n_requests"] == 9 and aggregate["total_predicted"] == 9 * N
    assert doc["bench"]["engine_build"] == server.get("/props").json()["build_info"]
    json_line = next(line for line in printed.splitlines() if line.startswith("{"))
    assert json.loads(json_line) == aggregate
    (run_id,) = doc["history_ids"]
    assert main(["bench", "history", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert any(e["id"] == run_id and e["aggregate"] == aggregate for e in listed)
    assert main(["bench", "show", str(run_id), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["report"] == doc["bench"]


@pytest.fixture
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Launched servers keep their state and logs in this test's own XDG state dir."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def _tiny_mtp_plan(engine, tiny_model, tmp_path: Path) -> Path:
    plan = plan_from_dict({
        "device": "cpu",
        "model": {"path": str(tiny_model("hybrid-mtp", dtype="q8_0"))},
        "engine": {"flavour": "upstream", "binary": str(engine("upstream"))},
        "runtime": {"ctx": CTX, "threads": 2},
        "mtp": {"enabled": True, "draft_max": 2, "draft_p_min": 0.0},
    })  # fmt: skip
    save_plan(plan, tmp_path / "plan.json")
    return tmp_path / "plan.json"


def test_cli_plan_runs_the_plans_server_and_stores_the_run(
    engine, tiny_model, tmp_path: Path, private_state: Path, capsys
) -> None:
    """The default launcher: the plan's server through core/server, with --metrics, reaped."""
    plan = _tiny_mtp_plan(engine, tiny_model, tmp_path)
    out = tmp_path / "run.json"
    code = main(["bench", "--plan", str(plan), "--categories", "code_python,qa_factual",
                 "--n-predict", "16", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    doc = json.loads(out.read_text())
    bench = doc["bench"]
    assert bench["aggregate"]["n_requests"] == 2 and bench["aggregate"]["total_predicted"] == 32
    assert bench["aggregate"]["total_draft"] > 0
    assert bench["metrics_check"]["matches"] is True  # --metrics was on
    assert str(engine("upstream")) in bench["engine_build"]
    assert bench["device"] == "CPU"
    (run_id,) = doc["history_ids"]
    entry = BenchHistory().get(run_id)
    assert entry.label == "plan" and entry.engine_build == bench["engine_build"]
    assert entry.report["drafting_requested"] is True
    # The server is gone, and so is its state record.
    assert not list(servers_dir().glob("*.json"))


def test_cli_plan_that_cannot_start_is_one_sentence(
    engine, tiny_model, tmp_path: Path, private_state: Path, capsys
) -> None:
    """An enormous context: the KV cache cannot be allocated; the diagnosis and its first fix."""
    runtime = {key.split(".")[1]: value for key, value in HUGE_KV_PLAN.items()}
    plan = plan_from_dict({
        "device": "cpu",
        "model": {"path": str(tiny_model("dense", **HUGE_KV_MODEL))},
        "engine": {"flavour": "upstream", "binary": str(engine("upstream"))},
        "runtime": {**runtime, "threads": 2},
        "mtp": {"enabled": False},
    })  # fmt: skip
    save_plan(plan, tmp_path / "huge.json")
    code = main(["bench", "--plan", str(tmp_path / "huge.json"), "--n-predict", "4",
                 "--categories", "qa_factual"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("mtpstudio: the server for huge did not start: The server ran out "
                             "of memory allocating the KV cache")  # fmt: skip
    assert "Try: " in err[0] and "runtime.ctx=2097152" in err[0] and "Full log: " in err[0]
    assert not list(servers_dir().glob("*.json"))


def test_cli_plan_mtp_preset_with_gate_one_server_at_a_time(
    engine, tiny_model, tmp_path: Path, private_state: Path, monkeypatch, capsys
) -> None:
    launcher = PlanServerLauncher(log_dir=tmp_path / "logs")
    monkeypatch.setattr("mtpstudio.cli.bench.DEFAULT_LAUNCHER", launcher)
    plan = _tiny_mtp_plan(engine, tiny_model, tmp_path)
    out = tmp_path / "ab.json"
    code = main(["bench", "--plan", str(plan), "--preset", "mtp", "--gate", "--repeat", "2",
                 "--n-predict", str(N), "--categories", "code_python,qa_factual,summarize",
                 "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    # Rounds alternate A B, B A; then the gate's MTP-off server (B again); never two at once.
    assert [label for label, _, _ in launcher.started] == [
        "MTP on", "MTP off", "MTP off", "MTP on", "MTP off"
    ]  # fmt: skip
    assert not any(alive(pid) for _, pid, _ in launcher.started)
    events = launcher.events  # one at a time: each server stopped before the next started
    assert events == [
        e for label, _, _ in launcher.started for e in (f"start {label}", f"stop {label}")
    ]
    assert "A/B  A = MTP on  B = MTP off" in printed
    assert "correctness gate: drafting on = MTP on, drafting off = MTP off" in printed
    rows = doc["ab"]["rows"]
    assert [r["category"] for r in rows] == ["code_python", "summarize", "qa_factual"]
    a = doc["ab"]["a"]
    assert a["aggregate"]["n_requests"] == 6 and a["aggregate"]["total_predicted"] == 6 * N
    assert all(len(c["samples"]) == 2 for c in a["categories"])
    assert a["aggregate"]["total_draft"] > 0
    assert a["metrics_check"]["matches"] is True
    assert doc["ab"]["b"]["aggregate"]["total_draft"] == 0
    assert doc["gate"]["drafting_on"] == "MTP on" and len(doc["gate"]["items"]) == 3
    assert doc["gate"]["drafting_off"] == "MTP off"
    assert code == (0 if doc["gate"]["passed"] else 1)
    finding_codes = [f["code"] for f in doc["findings"]]
    assert "p-min-low" in finding_codes
    p_min = next(f for f in doc["findings"] if f["code"] == "p-min-low")
    assert p_min["remedies"][0]["plan_changes"] == {"mtp.draft_p_min": 0.75}


def test_cli_plan_together_interleaves(
    engine, tiny_model, tmp_path: Path, private_state: Path, monkeypatch, capsys
) -> None:
    launcher = PlanServerLauncher(log_dir=tmp_path / "logs")
    monkeypatch.setattr("mtpstudio.cli.bench.DEFAULT_LAUNCHER", launcher)
    plan = _tiny_mtp_plan(engine, tiny_model, tmp_path)
    code = main(["bench", "--plan", str(plan), "--preset", "mtp", "--gate", "--together",
                 "--n-predict", str(N), "--categories", "code_python,qa_factual"])  # fmt: skip
    printed = capsys.readouterr().out
    labels = [label for label, _, _ in launcher.started]
    assert labels == ["MTP on", "MTP off"]  # the gate reuses B, which is MTP off
    assert not any(alive(pid) for _, pid, _ in launcher.started)
    assert "A/B  A = MTP on  B = MTP off" in printed and "correctness gate" in printed
    assert code in (0, 1)


def test_cli_dead_server_is_one_sentence(capsys) -> None:
    assert main(["bench", "--url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no server answers at http://127.0.0.1:9" in err[0]


def test_gate_on_ik_compares_retokenized_text(tiny_model, running_server) -> None:
    """ik's OAI stream has no token ids: the gate tokenizes both texts through /tokenize.

    (ik 0.1.5 drafting for itself can drop the last token's text when the limit falls inside
    an accepted draft, which the gate reports; so the passing case here is plain vs plain.)
    """
    dense = tiny_model("dense")
    plain = running_server("ik", dense, ctx_size=CTX)
    again = running_server("ik", dense, ctx_size=CTX)
    other = running_server("ik", tiny_model("dense", seed=2), ctx_size=CTX)
    prompts = select(load_prompts(), ["code_python", "qa_factual"])
    a = BenchTarget(plain.base_url, EngineFlavour.IK, label="ik")
    b = BenchTarget(other.base_url, EngineFlavour.IK, label="ik-other")
    ok = gate_both(a, BenchTarget(again.base_url, EngineFlavour.IK), prompts, N)
    assert ok.passed, [i.to_dict() for i in ok.items]
    bad = gate_both(a, b, prompts, N)
    assert not bad.passed
    for item in (i for i in bad.items if not i.passed):
        assert item.ids_on is None and item.mismatch is not None
        assert item.mismatch.token_on != item.mismatch.token_off
        assert item.text_on.startswith(item.mismatch.same_prefix)


def test_the_servers_acceptance_per_draft_position_says_which_depth_it_supports(
    tiny_model, running_server
) -> None:
    """Upstream counts accepted tokens per draft position in /metrics
    (``spec_decode_num_accepted_tokens_per_pos_total``); after a run the report carries each
    position's share and the doctor says which draft depth it supports (issue 34 item 7)."""
    server = running_server(
        "upstream",
        tiny_model("hybrid-mtp", dtype="q8_0"),
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-p-min", "0",
         "--metrics"],
        ctx_size=CTX,
    )  # fmt: skip
    r = run_bench(BenchTarget(server.base_url, label="mtp"), load_prompts()[:3], QUICK)
    assert r.error is None, r.error
    assert r.metrics is not None
    rates = r.metrics.accepted_per_position
    after = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    assert "spec_decode_num_accepted_tokens_per_pos_total{position=" in after, after[-2000:]
    assert 1 <= len(rates) <= 3 and all(0.0 <= x <= 1.0 for x in rates), rates
    assert list(rates) == sorted(rates, reverse=True)  # a later position is never accepted more
    depth = r.metrics.supported_depth()
    assert depth is not None and 1 <= depth <= 3
    plan = plan_with(Plan(), {"mtp.draft_max": 3})
    finding = next(f for f in diagnose(r, plan) if f.code == "draft-depth")
    assert finding.message.startswith("Accepted per draft position (the server's /metrics): ")
    assert f"supports draft depth {depth}" in finding.message
    if depth < 3:
        assert finding.remedies[0].changes == {"mtp.draft_max": depth}
