"""Aggregates, medians, the drafting flag, A/B deltas and the gate's first differing token."""

from __future__ import annotations

import json

import pytest

from mtpstudio.core.bench.ab import ABReport, pct_delta, preset_graphs_control, preset_mtp_on_off
from mtpstudio.core.bench.bench_text import (
    render_ab_text,
    render_csv,
    render_gate_text,
    render_markdown,
    render_text,
)
from mtpstudio.core.bench.gate import first_difference
from mtpstudio.core.plan.schema import Plan

from .samples import report


def test_aggregate_sums_and_medians() -> None:
    r = report(rows=[[(16, 12, 9, 100.0), (16, 10, 8, 120.0), (16, 8, 2, 50.0)],
                     [(10, 0, 0, 80.0)]])  # fmt: skip
    row = r.categories[0]
    assert (row.predicted, row.draft, row.accepted) == (48, 30, 19)
    assert row.acceptance == pytest.approx(19 / 30)
    assert row.decode_tps == 100.0  # median of 100, 120, 50
    agg = r.aggregate()
    assert agg["n_requests"] == 4
    assert agg["total_predicted"] == 58
    assert agg["total_draft"] == 30
    assert agg["total_draft_accepted"] == 19
    assert agg["aggregate_accept_rate"] == round(19 / 30, 4)
    assert agg["tok_s"] == round(58 / r.wall_s_total, 2)
    assert r.categories[1].acceptance is None


def test_drafting_flag_only_when_requested_and_absent() -> None:
    none_drafted = report(rows=[[(16, 0, 0, 90.0)]])
    assert none_drafted.drafting_warning and "DRAFTING IS OFF" in none_drafted.drafting_warning
    text = render_text(none_drafted)
    assert text.splitlines()[0].startswith("!! DRAFTING IS OFF")
    assert report(rows=[[(16, 0, 0, 90.0)]], drafting_requested=False).drafting_warning is None
    assert report().drafting_warning is None


def test_text_report_layout_and_json_line() -> None:
    r = report()
    lines = render_text(r).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("category"))
    assert lines[head].split() == ["category", "pred", "draft", "acc", "rate", "tok/s", "pp",
                                   "tok/s", "ttft", "ms"]  # fmt: skip
    assert lines[head + 2].split()[:5] == ["code_python", "16", "12", "9", "0.750"]
    aggregate = json.loads(next(line for line in lines if line.startswith("{")))
    assert aggregate == r.aggregate()
    assert list(aggregate) == ["n_requests", "total_predicted", "total_draft",
                               "total_draft_accepted", "aggregate_accept_rate", "wall_s_total",
                               "tok_s"]  # fmt: skip


def test_json_has_the_same_fields_as_the_text() -> None:
    data = report().to_dict()
    assert data["aggregate"] == report().aggregate()
    assert [c["category"] for c in data["categories"]] == ["code_python", "code_cpp"]
    assert data["categories"][0]["samples"][0]["draft"] == 12
    md = render_markdown(data)
    assert "| code_python | 16 | 12 | 9 | 0.75 |" in md
    csv_lines = render_csv(data).splitlines()
    assert csv_lines[0].startswith("category,predicted,draft,accepted,acceptance")
    assert csv_lines[1].startswith("code_python,16,12,9,0.75")


def test_ab_deltas() -> None:
    a = report("A", rows=[[(16, 10, 8, 100.0)], [(16, 10, 5, 50.0)]])
    b = report("B", rows=[[(16, 10, 9, 110.0)], [(16, 10, 5, 40.0)]])
    ab = ABReport(a, b)
    rows = ab.rows
    assert rows[0].decode_delta_pct == pytest.approx(10.0)
    assert rows[1].decode_delta_pct == pytest.approx(-20.0)
    assert rows[0].acceptance_delta == pytest.approx(0.1)
    assert ab.tok_s_delta_pct == pytest.approx(pct_delta(a.tok_s, b.tok_s))
    text = render_ab_text(ab)
    assert "+10.0%" in text and "-20.0%" in text
    assert pct_delta(0.0, 1.0) is None


def test_presets() -> None:
    plan = Plan()
    a, b = preset_graphs_control(plan)
    assert a.plan == b.plan and b.env == {"GGML_CUDA_DISABLE_GRAPHS": "1"} and not a.env
    on, off = preset_mtp_on_off(plan)
    assert on.plan.mtp.enabled and not off.plan.mtp.enabled
    assert on.plan.runtime == off.plan.runtime


def test_near_ties() -> None:
    from mtpstudio.core.bench.gate import GateItem, GateMismatch, GateReport

    tie = GateMismatch(5, (1, "a"), (2, "b"), "xyz", logprob_gap=0.003)
    real = GateMismatch(5, (1, "a"), (2, "b"), "xyz", logprob_gap=float("inf"))
    assert tie.near_tie and not real.near_tie
    assert not GateMismatch(5, (1, "a"), (2, "b"), "xyz").near_tie  # not measured
    ok = GateItem("qa_factual", "t", "t", None)
    gate = GateReport("on", "off", 8, [ok, GateItem("code_cpp", "a", "b", tie)])
    assert not gate.passed and gate.only_near_ties
    assert "near tie, log-prob gap 0.0030" in render_gate_text(gate)
    assert "every mismatch is a near tie" in render_gate_text(gate)
    gate.items.append(GateItem("summarize", "a", "b", real))
    assert not gate.only_near_ties
    assert gate.to_dict()["items"][2]["mismatch"]["logprob_gap"] is None
    assert "not among the off-server's top 10" in render_gate_text(gate)


def test_first_difference() -> None:
    a = [(1, "a"), (2, "b"), (3, "c")]
    assert first_difference(a, list(a)) is None
    m = first_difference(a, [(1, "a"), (9, "z"), (3, "c")])
    assert m is not None and (m.index, m.token_on, m.token_off, m.same_prefix) == (
        1, (2, "b"), (9, "z"), "a")  # fmt: skip
    short = first_difference(a, a[:2])
    assert short is not None
    assert (short.index, short.token_on, short.token_off) == (2, (3, "c"), None)
