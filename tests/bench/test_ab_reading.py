"""A/B made hard to misread (issue 25 item 7): the direction of Δ said in words, the runs named
by what they are, the doctor on MTP that costs speed, the spread of repeats, history in time
order."""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.bench.ab import ABReport, drafting_off_variant, preset_mtp_on_off
from mtpstudio.core.bench.bench_text import render_ab_text, render_text
from mtpstudio.core.bench.doctor import diagnose
from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan

from .samples import report

# What the issue saw on the tiny MTP model on 2 CPU cores: MTP on ~69 tok/s, off ~1,179 tok/s.
ON_ROWS = [[(16, 30, 8, 69.0)], [(16, 30, 9, 70.0)], [(16, 30, 7, 68.0)]]
OFF_ROWS = [[(16, 0, 0, 1179.0)], [(16, 0, 0, 1180.0)], [(16, 0, 0, 1178.0)]]


def _mtp_ab() -> ABReport:
    on, off = preset_mtp_on_off(Plan())
    return ABReport(report(on.label, ON_ROWS), report(off.label, OFF_ROWS, None))


def test_the_runs_are_named_by_what_they_are_and_the_gate_reuses_the_name() -> None:
    on, off = preset_mtp_on_off(Plan())
    assert (on.label, off.label) == ("MTP on", "MTP off")
    assert drafting_off_variant(on, [off]).label == "MTP off"  # the same run, the same name
    plain = drafting_off_variant(type(on)("tuned", plan_with(Plan(), {"mtp.enabled": True})))
    assert plain.label == "tuned with MTP off" and plain.plan.mtp.enabled is False


def test_the_direction_of_delta_is_said_in_words_with_the_faster_side_named() -> None:
    ab = _mtp_ab()
    text = render_ab_text(ab, diagnose(ab.a, Plan(), ab))
    assert "A = MTP on  B = MTP off" in text
    assert "'B vs A' is B's tok/s relative to A's: + means MTP off (B) was faster" in text
    assert "B vs A" in text.splitlines()[2]  # the column header
    ratio = ab.b.tok_s / ab.a.tok_s  # type: ignore[operator]
    assert ratio > 5  # wall-clock tok/s, the first token's wait included
    result = next(line for line in text.splitlines() if line.startswith("Result: "))
    assert result == (
        f"Result: MTP off (B) ran {ratio:.1f}× as fast as MTP on (A): "
        f"{ab.b.tok_s:.2f} vs {ab.a.tok_s:.2f} tok/s."
    )
    assert "A (MTP on) {" in text and "B (MTP off) {" in text


def test_the_doctor_speaks_up_when_mtp_on_is_much_slower() -> None:
    ab = _mtp_ab()
    plan = plan_with(Plan(), {"mtp.draft_max": 3})
    finding = next(f for f in diagnose(ab.a, plan, ab) if f.code == "mtp-slower")
    ratio = ab.b.tok_s / ab.a.tok_s  # type: ignore[operator]
    assert f"MTP on ran {ratio:.1f}× slower than MTP off" in finding.message
    assert [r.changes for r in finding.remedies] == [{"mtp.draft_max": 1}, {"mtp.enabled": False}]
    # the other way round (MTP faster, as on a GPU): nothing to say
    fast = ABReport(
        report("MTP on", [[(16, 12, 10, 150.0)]]), report("MTP off", [[(16, 0, 0, 100.0)]], None)
    )
    assert "mtp-slower" not in [f.code for f in diagnose(fast.a, plan, fast)]


def test_repeats_report_their_spread_and_a_noisy_one_is_flagged() -> None:
    steady = report("MTP off", [[(16, 0, 0, 100.0), (16, 0, 0, 104.0)]] * 3, None)
    assert 0.02 < (steady.spread or 0) < 0.05 and not steady.noisy
    text = render_text(steady, diagnose(steady, Plan()))
    speeds = steady.repeat_tok_s()
    assert len(speeds) == 2 and speeds[0] < speeds[1]
    assert (
        f"MTP off: tok/s over 2 repeats {speeds[0]:.1f} / {speeds[1]:.1f} "
        f"(spread {steady.spread:.0%} of the median)"
    ) in text
    assert "NOISY" not in text
    noisy = report("MTP off", [[(16, 0, 0, 1179.0), (16, 0, 0, 36.0)]] * 3, None)
    assert noisy.noisy and noisy.to_dict()["noisy"] is True
    finding = next(f for f in diagnose(noisy, Plan()) if f.code == "noisy")
    fast, slow = noisy.repeat_tok_s()
    assert (
        f"{fast:,.1f} / {slow:,.1f}" in finding.message and "NOISY measurement" in finding.message
    )


def test_history_lists_runs_in_the_order_they_ran(tmp_path: Path) -> None:
    history = BenchHistory(tmp_path / "h.sqlite3")
    late = report("MTP on")
    late.started_at = "2026-11-24T10:05:00+00:00"
    first = history.add_report(late, "ab-a")
    gate = history.add_document("gate", "MTP on", {"passed": True}, "2026-11-24T10:07:30+00:00")
    early = report("older")
    early.started_at = "2026-11-24T09:00:00+00:00"  # stored later, ran earlier (an import)
    older = history.add_report(early)
    assert [e.id for e in history.entries()] == [older, first, gate]
