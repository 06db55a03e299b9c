"""The memory model over architectures: zero-weight llama, qwen3 and gemma3 on the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.servers import engine_binary

from devkit.arch_table import CI_SUBSET, write_model
from devkit.budget_check import render_table
from devkit.fullsize import run_fullsize

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_replayed_architectures_match_the_engine_log(tmp_path: Path) -> None:
    """A plain llama (flash attention on and off), a whole Qwen3-0.6B-sized qwen3 with a
    quantized cache, and a whole Gemma-3-1B-sized gemma3 (its sliding-window cache) at a small
    ubatch: every segment exact, the replayed compute buffers included."""
    rows, failures = run_fullsize(engine_binary("upstream"), tmp_path, CI_SUBSET, write=write_model)
    assert not failures, [f"{f.config}: {f.log_path.read_text()[-2000:]}" for f in failures]
    assert {r.model for r in rows} == set(CI_SUBSET)
    misses = [r for r in rows if not r.ok]
    assert not misses, "\n".join(render_table(rows))
    compute = [r for r in rows if r.segment == "compute"]
    assert len(compute) == sum(map(len, CI_SUBSET.values()))
    assert all(abs(r.predicted - r.logged) <= 0.01 for r in compute)
