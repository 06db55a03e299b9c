"""Each budget segment says how far it can be trusted, in the text and the JSON of `plan`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mtpstudio.core.memory.trust import (
    Trust,
    clear_measurement_lookups,
    register_measurement_lookup,
    segment_trust,
)


@pytest.fixture(autouse=True)
def _no_lookups() -> Iterator[None]:
    clear_measurement_lookups()
    yield
    clear_measurement_lookups()


def test_exact_measured_and_estimated_segments() -> None:
    assert segment_trust("CUDA0", "kv_cache") is Trust.EXACT
    assert segment_trust("CPU", "weights") is Trust.EXACT
    assert segment_trust("CUDA0", "weights") is Trust.ESTIMATE  # CUDA padding not yet checked
    assert segment_trust("CUDA0", "compute") is Trust.ESTIMATE
    assert segment_trust("CUDA0", "driver_overhead") is Trust.ESTIMATE
    register_measurement_lookup(lambda dev, seg: (dev, seg) == ("CUDA0", "compute"))
    assert segment_trust("CUDA0", "compute") is Trust.MEASURED
    assert segment_trust("CUDA0", "desktop") is Trust.ESTIMATE


def _plan(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "mtpstudio.cli.main", "plan", "--demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout


def test_plan_text_and_json_carry_the_trust_of_each_segment() -> None:
    data = json.loads(_plan("--json"))
    dev = data["devices"][0]
    assert set(dev["segment_trust"]) == set(dev["segments"])
    assert dev["segment_trust"]["kv_cache"] == "exact"
    assert dev["segment_trust"]["compute"] == "estimate"
    assert data["host"]["segment_trust"]["weights_mapped"] == "exact"
    text = _plan()
    kv_line = next(line for line in text.splitlines() if "KV cache" in line)
    assert kv_line.rstrip().endswith("exact")
    assert "estimate: fitted or assumed" in text
