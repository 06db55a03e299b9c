"""Text reports in the community's nine-category layout, plus A/B, gate and concurrency tables."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from mtpstudio.core.bench.ab import ABReport
from mtpstudio.core.bench.concurrency import ConcurrencyReport
from mtpstudio.core.bench.doctor import Finding
from mtpstudio.core.bench.gate import GateReport
from mtpstudio.core.bench.results import BenchReport, CategoryResult

ROW_FIELDS = (
    "category",
    "predicted",
    "draft",
    "accepted",
    "acceptance",
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_ms",
)
_HEAD = (
    f"{'category':<18} {'pred':>6} {'draft':>6} {'acc':>6} {'rate':>6} {'tok/s':>8} "
    f"{'pp tok/s':>9} {'ttft ms':>8}"
)


def _f(value: float | None, fmt: str, width: int) -> str:
    if value is None:
        return f"{'-':>{width}}"
    sign = "+" if fmt.startswith("+") else ""
    return f"{value:>{sign}{width}{fmt.lstrip('+')}}"


def _row(c: CategoryResult) -> str:
    return (
        f"{c.category:<18} {c.predicted:>6} {c.draft:>6} {c.accepted:>6} "
        f"{_f(c.acceptance, '.3f', 6)} {_f(c.decode_tps, '.2f', 8)} "
        f"{_f(c.prefill_tps, '.1f', 9)} {_f(c.ttft_ms, '.1f', 8)}"
    )


def render_text(report: BenchReport, findings: Sequence[Finding] = ()) -> str:
    """``pred/draft/acc/rate/tok/s`` per category, then the aggregate JSON line."""
    s = report.settings
    lines: list[str] = []
    if report.drafting_warning:
        lines += [f"!! {report.drafting_warning}", ""]
    lines.append(
        f"bench {report.label} · {report.flavour} {report.base_url}{report.endpoint} · "
        f"n_predict {s.n_predict} · temperature {s.temperature:g} · repeats {s.repeats} · "
        f"warm-up {'1 discarded' if s.warmup else 'none'}"
    )
    lines += [_HEAD, "-" * len(_HEAD)]
    lines += [_row(c) for c in report.categories]
    lines.append("-" * len(_HEAD))
    lines.append(
        f"{'total':<18} {report.total_predicted:>6} {report.total_draft:>6} "
        f"{report.total_draft_accepted:>6} {_f(report.aggregate_accept_rate, '.3f', 6)} "
        f"{_f(report.tok_s, '.2f', 8)}"
    )
    lines.append(json.dumps(report.aggregate()))
    spread = report.spread_text()
    if spread and not report.noisy:  # a noisy one is the doctor's
        lines.append(spread)
    if report.metrics is not None:
        m = report.metrics
        verdict = "agree" if m.matches else "DISAGREE"
        parts = ", ".join(f"{k} {m.delta.get(k, 0):g}" for k in m.expected)
        lines.append(f"server /metrics counters {verdict} with these totals ({parts})")
    for peak in report.vram:
        lines.append(
            f"VRAM peak {peak.device}: {peak.used_bytes / 2**20:.0f} of "
            f"{peak.total_bytes / 2**20:.0f} MiB ({peak.fraction:.1%})"
        )
    if report.speed_estimate is not None:
        lines.append(estimate_line(report.speed_estimate))
    lines += render_findings(findings)
    if report.error:
        done = len(report.categories)
        lines.append(f"error: {report.error} ({done} categor{'y' if done == 1 else 'ies'} kept)")
    return "\n".join(lines)


def estimate_line(estimate: dict[str, Any]) -> str:
    """``Estimate beside it: 47.3 tok/s decoding estimated, 45.1 measured (+4.9 %) …``."""
    est, got, err = (
        estimate.get("decode_tok_s"),
        estimate.get("measured_tok_s"),
        estimate.get("error"),
    )
    acceptance = estimate.get("acceptance") or {}
    with_acc = (
        f", with this run's acceptance {acceptance['rate']:.2f}"
        if isinstance(acceptance, dict) and isinstance(acceptance.get("rate"), float)
        else ""
    )
    if not isinstance(est, int | float) or not isinstance(got, int | float):
        return "Estimate beside it: none (the run measured no decoding)"
    error = f" ({err:+.1%})" if isinstance(err, int | float) else ""
    return (
        f"Estimate beside it: {est:,.2f} tok/s decoding estimated for this plan{with_acc}, "
        f"{got:,.2f} measured (the server's decode rate, median of the categories){error}"
    )


def render_findings(findings: Sequence[Finding]) -> list[str]:
    if not findings:
        return []
    lines = ["doctor:"]
    for f in findings:
        lines.append(f"  - [{f.code}] {f.message}")
        for r in f.remedies:
            lines.append(f"      fix: {r.label}: plan change {json.dumps(r.changes)}")
    return lines


def _pct(value: float | None) -> str:
    return f"{'-':>8}" if value is None else f"{value:>+7.1f}%"


def render_ab_text(ab: ABReport, findings: Sequence[Finding] = ()) -> str:
    """Side by side: decode tok/s and acceptance of A and B per category, with deltas."""
    a, b = ab.a.label, ab.b.label
    head = (
        f"{'category':<18} {'A tok/s':>8} {'B tok/s':>8} {'B vs A':>8} "
        f"{'A rate':>7} {'B rate':>7} {'B - A':>7}"
    )
    lines = [
        f"A/B  A = {a}  B = {b}  (interleaved per category)",
        f"'B vs A' is B's tok/s relative to A's: + means {b} (B) was faster, - that {a} (A) was.",
    ]
    for side in (ab.a, ab.b):
        if side.drafting_warning:
            lines.append(f"!! {side.label}: {side.drafting_warning}")
    lines += [head, "-" * len(head)]
    for r in ab.rows:
        lines.append(
            f"{r.category:<18} {_f(r.a.decode_tps, '.2f', 8)} {_f(r.b.decode_tps, '.2f', 8)} "
            f"{_pct(r.decode_delta_pct)} {_f(r.a.acceptance, '.3f', 7)} "
            f"{_f(r.b.acceptance, '.3f', 7)} {_f(r.acceptance_delta, '+.3f', 7)}"
        )
    lines.append("-" * len(head))
    rate_delta = None
    if ab.a.aggregate_accept_rate is not None and ab.b.aggregate_accept_rate is not None:
        rate_delta = ab.b.aggregate_accept_rate - ab.a.aggregate_accept_rate
    lines.append(
        f"{'aggregate tok/s':<18} {_f(ab.a.tok_s, '.2f', 8)} {_f(ab.b.tok_s, '.2f', 8)} "
        f"{_pct(ab.tok_s_delta_pct)} {_f(ab.a.aggregate_accept_rate, '.3f', 7)} "
        f"{_f(ab.b.aggregate_accept_rate, '.3f', 7)} {_f(rate_delta, '+.3f', 7)}"
    )
    verdict = ab.verdict()
    if verdict:
        lines.append(f"Result: {verdict}")
    for side in (ab.a, ab.b):
        spread = side.spread_text()
        if spread and not side.noisy:  # a noisy one is the doctor's
            lines.append(spread)
    lines.append(f"A ({a}) " + json.dumps(ab.a.aggregate()))
    lines.append(f"B ({b}) " + json.dumps(ab.b.aggregate()))
    for name, side in (("A", ab.a), ("B", ab.b)):
        if side.speed_estimate is not None:
            lines.append(f"{name} ({side.label}): {estimate_line(side.speed_estimate)}")
    lines += render_findings(findings)
    for side in (ab.a, ab.b):
        if side.error:
            lines.append(f"error ({side.label}): {side.error}")
    return "\n".join(lines)


def render_gate_text(gate: GateReport) -> str:
    lines = [
        f"correctness gate: drafting on = {gate.on_label}, drafting off = {gate.off_label}, "
        f"temperature 0, {gate.n_predict} tokens"
    ]
    for item in gate.items:
        if item.passed:
            lines.append(f"  PASS {item.category}")
            continue
        m = item.mismatch
        assert m is not None
        on = "end of text" if m.token_on is None else f"{m.token_on[0]} {m.token_on[1]!r}"
        off = "end of text" if m.token_off is None else f"{m.token_off[0]} {m.token_off[1]!r}"
        lines.append(
            f"  FAIL {item.category}: first differing token #{m.index}: on {on} vs off {off} "
            f"(after {m.same_prefix[-40:]!r}){_gap_note(m.logprob_gap, m.near_tie)}"
        )
    if gate.error:
        lines.append(f"  error: {gate.error}")
    failed = sum(not i.passed for i in gate.items)
    verdict = "PASSED" if gate.passed else "FAILED"
    lines.append(f"gate {verdict}: {len(gate.items) - failed}/{len(gate.items)} prompts identical")
    if gate.only_near_ties:
        lines.append(
            "  every mismatch is a near tie: batch-size dependent rounding chose the other "
            "token, not a drafting bug (compare on a real model before trusting this build)"
        )
    return "\n".join(lines)


def _gap_note(gap: float | None, near_tie: bool) -> str:
    if gap is None:
        return ""
    if gap == float("inf"):
        return "; the on-token is not among the off-server's top 10: a real difference"
    kind = "near tie" if near_tie else "clear difference"
    return f"; {kind}, log-prob gap {gap:.4f}"


def render_concurrency_text(report: ConcurrencyReport) -> str:
    lines = [f"concurrency {report.n_clients} on {report.label}"]
    lines.append(f"{'client':<8} {'requests':>8} {'pred':>6} {'wall s':>8} {'tok/s':>8}")
    for c in report.clients:
        lines.append(
            f"{c.index:<8} {len(c.samples):>8} {c.predicted:>6} {c.wall_s:>8.2f} "
            f"{_f(c.tok_s, '.2f', 8)}"
        )
    lines.append(
        f"aggregate: {report.total_predicted} tokens in {report.wall_s:.2f} s = "
        f"{_f(report.aggregate_tok_s, '.2f', 0)} tok/s"
    )
    if report.error:
        lines.append(f"error: {report.error}")
    return "\n".join(lines)


SHOWN_DIGITS = {"decode_tok_s": 2}
"""Fields stored as measured and shown rounded (the Markdown and CSV exports)."""


def _shown(key: str, value: Any) -> Any:
    digits = SHOWN_DIGITS.get(key)
    if digits is None or isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return round(value, digits)


def rows_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-category rows (ROW_FIELDS only) of a report dict (``BenchReport.to_dict``), as
    the exports show them (a rate to 0.01 tok/s)."""
    return [{k: _shown(k, c.get(k)) for k in ROW_FIELDS} for c in report.get("categories", [])]


def render_markdown(report: dict[str, Any], title: str = "") -> str:
    """A report dict as a Markdown table plus the aggregate."""
    lines = [f"## {title or report.get('label', 'bench')}", ""]
    if report.get("drafting_warning"):
        lines += [f"**{report['drafting_warning']}**", ""]
    lines.append("| " + " | ".join(ROW_FIELDS) + " |")
    lines.append("|" + "---|" * len(ROW_FIELDS))
    for row in rows_of(report):
        lines.append("| " + " | ".join("" if v is None else str(v) for v in row.values()) + " |")
    lines += ["", "```json", json.dumps(report.get("aggregate", {}), indent=2), "```"]
    if report.get("error"):
        lines += ["", f"Error: {report['error']}"]
    return "\n".join(lines) + "\n"


def render_csv(report: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(ROW_FIELDS), lineterminator="\n")
    writer.writeheader()
    for row in rows_of(report):
        writer.writerow(row)
    return out.getvalue()
