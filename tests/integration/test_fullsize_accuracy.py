"""The memory model at full size: the 35B-A3B card as a zero-weight GGUF on the real engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.servers import engine_binary

from devkit.budget_check import render_table
from devkit.fullsize import CI_SUBSET, run_fullsize
from devkit.zero_gguf import disk_bytes, zero_gguf_for_card

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_zero_weight_card_is_sparse(tmp_path: Path) -> None:
    model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", tmp_path / "m.gguf")
    assert model.stat().st_size > 15 * 2**30
    assert disk_bytes(model) < 64 * 2**20


def test_full_size_prediction_matches_the_engine_log(tmp_path: Path) -> None:
    rows, failures = run_fullsize(engine_binary("upstream"), tmp_path, CI_SUBSET)
    assert not failures, [f"{f.config}: {f.log_path.read_text()[-2000:]}" for f in failures]
    segments = {r.segment for r in rows}
    assert {"weights", "kv_cache", "recurrent_state", "compute", "mtp_compute"} <= segments
    misses = [r for r in rows if not r.ok]
    assert not misses, "\n".join(render_table(rows))
