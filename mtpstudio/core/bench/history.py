"""Every benchmark run in SQLite under the XDG data dir; list, show and export them."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpstudio.core.bench.choices import EXPORT_FORMATS as EXPORT_FORMATS
from mtpstudio.core.bench.results import BenchReport
from mtpstudio.core.errors import BenchError
from mtpstudio.core.paths import data_dir
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.state_files import StateFileError, parse_json

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
FILE_NAME = "bench-history.sqlite3"
_NUMBERS = ("tok_s", "aggregate_accept_rate", "n_requests")  # what `bench history` prints

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    grp INTEGER,
    label TEXT NOT NULL,
    engine_flavour TEXT,
    engine_build TEXT,
    device TEXT,
    base_url TEXT,
    plan_json TEXT,
    aggregate_json TEXT NOT NULL,
    report_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rows (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    category TEXT NOT NULL,
    predicted INTEGER NOT NULL,
    draft INTEGER NOT NULL,
    accepted INTEGER NOT NULL,
    acceptance REAL,
    decode_tok_s REAL,
    prefill_tok_s REAL,
    ttft_ms REAL,
    PRIMARY KEY (run_id, position)
);
"""


def default_path() -> Path:
    return data_dir() / FILE_NAME


@dataclass(frozen=True)
class HistoryEntry:
    """One stored run: its summary columns and the full report dict."""

    id: int
    created_at: str
    kind: str
    group: int | None
    label: str
    engine_flavour: str | None
    engine_build: str | None
    device: str | None
    base_url: str | None
    plan: dict[str, Any] | None
    aggregate: dict[str, Any]
    report: dict[str, Any]
    rows: list[dict[str, Any]]

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at,
            "kind": self.kind,
            "group": self.group,
            "label": self.label,
            "engine_flavour": self.engine_flavour,
            "engine_build": self.engine_build,
            "device": self.device,
            "aggregate": self.aggregate,
            "error": self.report.get("error"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "plan": self.plan, "rows": self.rows, "report": self.report}


class DamagedRunError(BenchError):
    """One stored run cannot be read back (the others can)."""


def _document(text: object, run_id: int, what: str) -> dict[str, Any]:
    """A JSON object column of a run, read with the state-file limits."""
    try:
        if not isinstance(text, str | bytes):
            raise StateFileError("not text")
        value = parse_json(text, what)
    except StateFileError:
        value = None
    if not isinstance(value, dict):
        raise DamagedRunError(
            f"benchmark run {run_id} in the history has a damaged {what}",
            hint="The other runs are unaffected; the damaged one stays in the file.",
        )
    return value


class BenchHistory:
    """The history database; each call opens, commits and closes (safe across threads)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path)
        except (OSError, sqlite3.Error) as exc:
            raise BenchError(
                f"cannot open the benchmark history {self.path}: {exc}",
                hint="Check that the folder is writable.",
            ) from None
        try:
            con.execute("PRAGMA foreign_keys = ON")
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise BenchError(
                    f"the benchmark history {self.path} was written by a newer mtpstudio "
                    f"(schema {version}, this one reads {SCHEMA_VERSION})",
                    hint="Upgrade mtpstudio, or move the file away to start a new history.",
                )
            if version < SCHEMA_VERSION:
                con.executescript(_SCHEMA)
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            with con:
                yield con
        except sqlite3.DatabaseError as exc:
            raise BenchError(
                f"the benchmark history {self.path} is not readable ({exc})",
                hint="Move the file away; a new history is started on the next run.",
            ) from None
        finally:
            con.close()

    def add_report(self, report: BenchReport, kind: str = "bench", group: int | None = None) -> int:
        """Store a run; returns its id."""
        data = report.to_dict()
        with self._db() as con:
            cur = con.execute(
                "INSERT INTO runs (created_at, kind, grp, label, engine_flavour, engine_build, "
                "device, base_url, plan_json, aggregate_json, report_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    report.started_at,
                    kind,
                    group,
                    report.label,
                    report.flavour,
                    report.engine_build,
                    report.device,
                    report.base_url,
                    report.plan_json,
                    json.dumps(data["aggregate"]),
                    json.dumps(data),
                ),
            )
            run_id = int(cur.lastrowid or 0)
            con.executemany(
                "INSERT INTO rows (run_id, position, category, predicted, draft, accepted, "
                "acceptance, decode_tok_s, prefill_tok_s, ttft_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        run_id,
                        i,
                        c.category,
                        c.predicted,
                        c.draft,
                        c.accepted,
                        c.acceptance,
                        c.decode_tps,
                        c.prefill_tps,
                        c.ttft_ms,
                    )
                    for i, c in enumerate(report.categories)
                ],
            )
        return run_id

    def add_document(
        self,
        kind: str,
        label: str,
        document: dict[str, Any],
        created_at: str,
        group: int | None = None,
    ) -> int:
        """Store a gate or concurrency result (no per-category rows)."""
        with self._db() as con:
            cur = con.execute(
                "INSERT INTO runs (created_at, kind, grp, label, aggregate_json, report_json) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (created_at, kind, group, label, json.dumps({}), json.dumps(document)),
            )
            return int(cur.lastrowid or 0)

    def entries(self) -> list[HistoryEntry]:
        """Every readable run, oldest first (by when it started; runs stored together keep
        their order); a damaged one is named in one logged sentence, kept in the file and
        skipped."""
        out: list[HistoryEntry] = []
        with self._db() as con:
            ids = [r[0] for r in con.execute("SELECT id FROM runs ORDER BY created_at, id")]
            for i in ids:
                try:
                    out.append(self._entry(con, i))
                except DamagedRunError as exc:
                    log.warning("mtpstudio: %s; it is skipped.", exc)
        return out

    def get(self, run_id: int) -> HistoryEntry:
        with self._db() as con:
            return self._entry(con, run_id)

    def _entry(self, con: sqlite3.Connection, run_id: int) -> HistoryEntry:
        row = con.execute(
            "SELECT id, created_at, kind, grp, label, engine_flavour, engine_build, device, "
            "base_url, plan_json, aggregate_json, report_json FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise BenchError(
                f"there is no benchmark run {run_id} in the history",
                hint="List the runs with `mtpstudio bench history`.",
            )
        rows = [
            dict(
                zip(
                    (
                        "category",
                        "predicted",
                        "draft",
                        "accepted",
                        "acceptance",
                        "decode_tok_s",
                        "prefill_tok_s",
                        "ttft_ms",
                    ),
                    r,
                    strict=True,
                )
            )
            for r in con.execute(
                "SELECT category, predicted, draft, accepted, acceptance, decode_tok_s, "
                "prefill_tok_s, ttft_ms FROM rows WHERE run_id = ? ORDER BY position",
                (run_id,),
            )
        ]
        plan = None if row[9] is None else _document(row[9], run_id, "plan")
        aggregate = _document(row[10], run_id, "summary")
        if any(
            not (v is None or (isinstance(v, int | float) and not isinstance(v, bool)))
            for v in (aggregate.get(k) for k in _NUMBERS)
        ):
            raise DamagedRunError(f"benchmark run {run_id} in the history has a damaged summary")
        if not all(isinstance(v, str) for v in (row[1], row[2], row[4])):
            raise DamagedRunError(f"benchmark run {run_id} in the history has damaged columns")
        return HistoryEntry(
            id=row[0],
            created_at=row[1],
            kind=row[2],
            group=row[3],
            label=row[4],
            engine_flavour=row[5],
            engine_build=row[6],
            device=row[7],
            base_url=row[8],
            plan=plan,
            aggregate=aggregate,
            report=_document(row[11], run_id, "report"),
            rows=rows,
        )


def export_entry(entry: HistoryEntry, fmt: str) -> str:
    """One run as Markdown, CSV (per-category rows) or JSON (everything)."""
    if fmt == "json":
        return json.dumps(entry.to_dict(), indent=2, sort_keys=True) + "\n"
    if fmt not in ("md", "csv"):
        raise BenchError(f"unknown export format {fmt!r}", hint="Choose md, csv or json.")
    from mtpstudio.core.bench.bench_text import render_csv, render_markdown  # A/B, gate: when shown

    try:
        if fmt == "md":
            title = f"Run {entry.id} · {entry.kind} · {entry.label} · {entry.created_at}"
            return render_markdown(entry.report, title)
        return render_csv(entry.report)
    except (KeyError, TypeError, ValueError, AttributeError):  # a stored report of odd shape
        raise DamagedRunError(
            f"benchmark run {entry.id} in the history has a report that cannot be shown as {fmt}",
            hint=f"`mtpstudio bench show {entry.id} --format json` prints what is stored.",
        ) from None


def runs_of_plans(entries: Sequence[HistoryEntry], plans: Sequence[Plan]) -> list[HistoryEntry]:
    """The stored runs (oldest first) that benchmarked one of ``plans`` — the wizard's plan and
    the plan it resolves to (a run stores what was launched, e.g. with MTP auto decided)."""
    wanted = [plan.to_data() for plan in plans]  # the form a run stores
    return [entry for entry in entries if entry.plan is not None and entry.plan in wanted]
