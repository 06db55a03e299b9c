"""The tuner's result as text (the table the CLI prints) and in the benchmark history."""

from __future__ import annotations

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.tune import RowStatus, TuneResult, TuneRow
from mtpstudio.core.units import MIB

TUNE_KIND = "tune"
TUNE_RUN_KIND = "tune-run"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _fits(row: TuneRow) -> str:
    return {True: "yes", False: "no", None: "?"}[row.fits]


def _vram(row: TuneRow) -> str:
    peak = row.vram_peak_bytes
    return "-" if peak is None else f"{peak / MIB:,.0f}M"


def _line(row: TuneRow, label_w: int) -> str:
    stage = row.last.stage if row.last is not None else "-"
    why = row.reason
    if row.status is RowStatus.FAILED and row.diagnosis:
        why = f"{row.reason} [{row.diagnosis.get('kind')}]"
    return (
        f"{row.label:<{label_w}}  {_fits(row):<4} {_num(row.predicted_tok_s, '.2f'):>8} "
        f"{_num(row.tok_s, '.2f'):>8} "
        f"{_num(row.acceptance, '.3f'):>7} {_vram(row):>8}  {stage:<9} {row.status.value:<9} {why}"
    ).rstrip()


def render_tune_text(result: TuneResult, *, all_rows: bool = False) -> str:
    """The tuning table: every candidate that was considered (``all_rows`` adds untried ones)."""
    rows = [result.baseline] + [
        r
        for r in result.rows
        if all_rows or r.runs or r.status in (RowStatus.SKIPPED, RowStatus.FAILED)
    ]
    hidden = len(result.rows) + 1 - len(rows)
    label_w = max(len("candidate"), *(len(r.label) for r in rows))
    lines = [
        f"{'candidate':<{label_w}}  {'fits':<4} {'est t/s':>8} {'tok/s':>8} {'accept':>7} "
        f"{'VRAM pk':>8}  {'stage':<9} {'status':<9} why",
        "-" * (label_w + 69),
    ]
    lines += [_line(r, label_w) for r in rows]
    if hidden:
        lines.append(f"({hidden} more candidates not run: see the reasons in --json)")
    lines.append(
        "(est t/s: the speed model's decode estimate, which ordered the candidates; tok/s: "
        "measured)"
    )
    lines.append("")
    n = len(result.rows)
    lines.append(
        f"{n} candidates: {result.skipped_by_memory} skipped by the memory model, "
        f"{result.skipped_by_speed} by the speed model, "
        f"{result.launched} launched (baseline included), "
        f"{sum(1 for r in result.all_rows if r.status is RowStatus.FAILED)} failed; "
        f"took {result.seconds:.1f} s"
        + (" (cancelled)" if result.cancelled else "")
        + (" (time budget reached)" if result.budget_reached else "")
    )
    best = result.best
    if best is None:
        lines.append("No plan was measured: nothing to recommend.")
    else:
        run = best.full or best.last
        evidence = ""
        if run is not None:
            evidence = (
                f" ({_num(run.tok_s, '.2f')} tok/s, acceptance {_num(run.acceptance, '.3f')} "
                f"over {len(run.categories)} categories)"
            )
        lines.append(f"Best: {best.label}{evidence}")
        if result.gain is not None:
            lines.append(f"Gain over the starting plan: {result.gain * 100:+.1f}% "
                         f"({result.gain_basis})")  # fmt: skip
    if result.note:
        lines.append(f"Note: {result.note}")
    return "\n".join(lines) + "\n"


def save_tune(result: TuneResult, history: BenchHistory) -> int:
    """Store the tuning (the whole table) and each full-category run, grouped under it."""
    label = result.best.label if result.best is not None else "no result"
    tune_id = history.add_document(TUNE_KIND, label, result.to_dict(), result.started_at)
    for row in result.all_rows:
        full = row.full
        if full is not None:
            history.add_report(full.report, TUNE_RUN_KIND, group=tune_id)
    result.history_id = tune_id
    return tune_id
