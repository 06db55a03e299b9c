"""The speed estimate beside the runs others published (``devkit/published_runs.py``): every run
of the table planned as mtpstudio plans it, each estimate printed beside its published figure,
and the summary (``pytest tests/speed/test_published_runs.py -s`` shows them). The table checks
the model; nothing is fitted to it. Each run's PC follows from the probe recorded beside the CPU
kernel tables (``devkit/cpu_columns.recorded_host``), not a new probe of whatever machine runs
the test, so the figures do not move with its load."""

from __future__ import annotations

import json
import statistics

from devkit.cpu_columns import recorded_host
from devkit.published_runs import TABLE, estimate_run, published_runs, sources, summary_lines


def test_the_table_holds_enough_runs_from_enough_sources() -> None:
    runs = published_runs()
    assert len(runs) >= 25
    assert len(sources(runs)) >= 6
    document = json.loads(TABLE.read_text("utf-8"))
    for row in document["runs"]:
        assert row["source"] and row["quote"], row["id"]
        assert row.get("tok_s_off") or row.get("tok_s_on"), row["id"]
        if row.get("tok_s_on"):
            assert row.get("depth"), row["id"]
    for row in document["excluded"]:  # each left out with its reason
        assert row["why"] and row["source"], row["id"]
    assert {r.engine for r in runs} == {"upstream", "ik"}
    assert sum(1 for r in runs if r.tok_s_off and r.tok_s_on) >= 8  # on/off pairs


def test_each_estimate_beside_its_published_run() -> None:
    host = recorded_host()  # the kernel tables' machine: the same figures on every machine
    estimates = [estimate_run(run, host) for run in published_runs()]
    lines = summary_lines(estimates)
    print("\n" + "\n".join(lines))
    errors = [abs(x) for e in estimates for x in e.errors]
    assert len(errors) >= 30
    assert statistics.median(errors) <= 0.10  # the bound on the median
