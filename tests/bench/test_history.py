"""The SQLite history: round trip, exports, schema version, unreadable files."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest

from mtpstudio.core.bench.history import BenchHistory, default_path, export_entry
from mtpstudio.core.errors import BenchError
from mtpstudio.core.paths import data_dir
from mtpstudio.core.plan.schema import Plan

from .samples import report


def test_round_trip(tmp_path: Path) -> None:
    history = BenchHistory(tmp_path / "h.sqlite3")
    r = report(rows=[[(16, 12, 9, 100.0), (16, 10, 8, 90.0)], [(16, 0, 0, 80.0)]])
    r.plan_json = Plan().to_json()
    r.engine_build = "b0-unknown"
    r.device = "cpu"
    a = history.add_report(r, "ab-a")
    b = history.add_report(report("B"), "ab-b", group=a)
    gate = history.add_document("gate", "A", {"passed": True}, "2026-11-23T12:00:00+00:00")
    entries = history.entries()
    assert [e.id for e in entries] == [a, b, gate]
    got = history.get(a)
    assert got.report == json.loads(json.dumps(r.to_dict()))
    assert got.plan == json.loads(Plan().to_json())
    assert (got.engine_build, got.device) == ("b0-unknown", "cpu")
    assert (got.kind, got.group) == ("ab-a", None)
    assert history.get(b).group == a
    assert got.rows[0]["predicted"] == 32 and got.rows[0]["draft"] == 22
    assert got.rows[0]["acceptance"] == pytest.approx(17 / 22)
    assert got.aggregate == r.aggregate()
    assert history.get(gate).report == {"passed": True}


def test_exports(tmp_path: Path) -> None:
    history = BenchHistory(tmp_path / "h.sqlite3")
    entry = history.get(history.add_report(report()))
    data = json.loads(export_entry(entry, "json"))
    assert data["rows"] == entry.rows and data["aggregate"] == entry.aggregate
    rows = list(csv.DictReader(io.StringIO(export_entry(entry, "csv"))))
    assert [r["category"] for r in rows] == ["code_python", "code_cpp"]
    assert rows[0]["draft"] == "12"
    md = export_entry(entry, "md")
    assert md.startswith(f"## Run {entry.id} · bench · A")
    assert '"total_predicted": 32' in md
    with pytest.raises(BenchError, match="unknown export format"):
        export_entry(entry, "xml")


def test_unknown_id(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="no benchmark run 7"):
        BenchHistory(tmp_path / "h.sqlite3").get(7)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    BenchHistory(path).entries()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 99")
    con.close()
    with pytest.raises(BenchError, match="newer mtpstudio") as info:
        BenchHistory(path).entries()
    assert info.value.hint


def test_garbage_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(BenchError, match="not readable"):
        BenchHistory(path).entries()
    assert path.read_bytes().startswith(b"this is not")  # nothing lost


def test_default_location_is_the_xdg_data_dir() -> None:
    assert default_path().parent == data_dir()
