"""Each budget segment says how far it can be trusted, in the text and the JSON of `plan`;
"measured" comes from a stored launch of the same build on the same device, passed explicitly."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from support.plans import demo_plan

from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_info
from mtpstudio.core.engines.registry import documented_build, memory_facts
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.measured import (
    ReconcileRow,
    Reconciliation,
    build_key,
    predicted_segments,
)
from mtpstudio.core.memory.trust import NOTHING_MEASURED, Trust, segment_trust, weakest
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    evaluate,
    resolve,
)
from mtpstudio.core.planner.text import budget_report
from mtpstudio.core.server.reconcile import load_measurements, save_measurement
from mtpstudio.core.units import MIB

PROBED = replace(
    documented_build(EngineFlavour.UPSTREAM, Path("/opt/up/llama-server")), version="b9000"
)


def test_exact_measured_and_estimated_segments() -> None:
    assert segment_trust("CUDA0", "kv_cache") is Trust.EXACT
    assert segment_trust("CPU", "weights") is Trust.EXACT
    assert segment_trust("CUDA0", "weights") is Trust.ESTIMATE  # CUDA padding not yet checked
    assert segment_trust("CUDA0", "compute") is Trust.ESTIMATE
    assert segment_trust("CUDA0", "driver_overhead") is Trust.ESTIMATE
    measured = frozenset({("CUDA0", "compute")})
    assert segment_trust("CUDA0", "compute", measured) is Trust.MEASURED
    assert segment_trust("CUDA1", "compute", measured) is Trust.ESTIMATE
    assert segment_trust("CUDA0", "desktop", measured) is Trust.ESTIMATE
    sourced = frozenset({("CUDA0", "weights")})
    assert segment_trust("CUDA0", "weights", NOTHING_MEASURED, NOTHING_MEASURED, sourced) is (
        Trust.SOURCE
    )
    assert segment_trust(
        "CUDA0", "weights", frozenset({("CUDA0", "weights")}), sourced=sourced
    ) is (
        Trust.MEASURED  # a measurement beats the source
    )
    assert segment_trust("CUDA0", "compute", sourced=sourced) is Trust.ESTIMATE


def _stored_launch(plan: Plan, pctx: PlanningContext, tmp_path: Path) -> tuple[str, Path]:
    """A launch record as run_launch stores it: every figure logged as predicted, except the
    GPU compute buffer, which came out 10 % larger."""
    resolved = resolve(plan, pctx)
    target, budget = resolved.target, budget_for(resolved)
    rows = []
    for (segment, device), mib in predicted_segments(budget, memory_facts(EngineFlavour.UPSTREAM)
                                                     ).items():  # fmt: skip
        off = 1.10 if (segment, device) == ("compute", target.device.id) else 1.0
        rows.append(ReconcileRow(segment, device, mib, mib * off))
    store = tmp_path / "measurements.json"
    save_measurement(Reconciliation(build_key(PROBED), target.device.id, tuple(rows)), store)
    return target.device.id, store


def test_a_stored_launch_marks_the_figures_it_confirmed(tmp_path: Path) -> None:
    machine = MachineFacts(HostSpec(), (), (PROBED,))
    plain = PlanningContext(machine, model_card_info(DEFAULT_MODEL_CARD))
    plan = demo_plan()
    device, store = _stored_launch(plan, plain, tmp_path)
    pctx = PlanningContext(plain.machine, plain.model, measurements=load_measurements(store))

    budget = evaluate(plan, pctx).budget
    assert (
        budget_for(resolve(plan, plain)).measured == frozenset()
    )  # nothing passed, nothing measured
    assert {(device, "weights"), (device, "kv_cache")} <= budget.measured
    assert (device, "compute") not in budget.measured  # logged 10 % off the prediction
    assert (device, "desktop") not in budget.measured  # the engine never logs it
    trust = budget.to_json()["devices"][0]["segment_trust"]
    assert trust["kv_cache"] == "measured" and trust["compute"] == "source"
    text = budget_report(budget)
    kv_line = next(line for line in text.splitlines() if "KV cache" in line)
    assert kv_line.rstrip().endswith("measured")

    # Another context: the KV figure is no longer the one measured; the recurrent state (which
    # does not depend on the context) still is.
    other = evaluate(demo_plan(**{"runtime.ctx": 8192}), pctx).budget
    assert (device, "recurrent_state") in other.measured
    assert (device, "kv_cache") not in other.measured
    # Another build: nothing of this record applies.
    newer = replace(PROBED, version="b9001")
    again = PlanningContext(MachineFacts(HostSpec(), (), (newer,)), plain.model,
                            measurements=pctx.measurements)  # fmt: skip
    assert evaluate(plan, again).budget.measured == frozenset()


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
    assert dev["segment_trust"]["compute"] == "source"  # the replay, on a consumer card
    assert dev["segment_trust"]["desktop"] == "estimate"
    assert data["host"]["segment_trust"]["weights_mapped"] == "exact"
    text = _plan()
    kv_line = next(line for line in text.splitlines() if "KV cache" in line)
    assert kv_line.rstrip().endswith("exact")
    assert "estimate: fitted or assumed" in text


def test_the_replayed_buffers_are_exact_on_the_cpu_only() -> None:
    """The trunk and MTP draft buffers replay the engine's allocator: exact where that replay
    was checked against the engine's trace (CPU buffers). On a consumer CUDA card the replays
    follow ggml-cuda's scheduler and rules, checked by the GPU kit on Hopper cards only (the
    attention kernel and the cuBLAS workspace differ): ``source``; the weights' padding does
    not depend on the card: ``measured on CUDA``; the driver context is a published figure."""
    machine = MachineFacts(HostSpec(), (), (PROBED,))
    pctx = PlanningContext(machine, model_card_info(DEFAULT_MODEL_CARD))
    on_cpu = evaluate(demo_plan(device="cpu", **{"mtp.enabled": True}), pctx).budget
    assert on_cpu.replayed == frozenset({("CPU", "mtp_compute"), ("CPU", "compute")})
    trust = on_cpu.to_json()["devices"][0]["segment_trust"]
    assert trust["mtp_compute"] == "exact" and trust["compute"] == "exact"
    draft_line = next(
        line for line in budget_report(on_cpu).splitlines() if "MTP draft compute" in line
    )
    assert draft_line.rstrip().endswith("exact")

    on_gpu = evaluate(demo_plan(**{"mtp.enabled": True}), pctx).budget
    assert on_gpu.replayed == frozenset()
    gpu_trust = on_gpu.to_json()["devices"][0]["segment_trust"]
    cuda = Trust.CUDA.value
    assert gpu_trust["mtp_compute"] == gpu_trust["compute"] == "source"
    assert gpu_trust["weights"] == cuda and gpu_trust["driver_overhead"] == "estimate"
    assert gpu_trust["runtime_growth"] == "source"
    gpu_text = budget_report(on_gpu)
    assert next(x for x in gpu_text.splitlines() if "W weights" in x).rstrip().endswith(cuda)
    assert "source: follows the engine's source for this backend" in gpu_text
    h100 = TargetDevice("CUDA0", "NVIDIA H100", 80 * 1024 * MIB, compute_capability="9.0")
    upstream = memory_facts(EngineFlavour.UPSTREAM)
    hopper = compute_budget(demo_plan(**{"mtp.enabled": True}), pctx.model, h100, upstream)
    hopper_trust = hopper.to_json()["devices"][0]["segment_trust"]
    assert hopper_trust["compute"] == hopper_trust["runtime_growth"] == cuda
    amd = evaluate(demo_plan(device="rx-7800-xt", **{"mtp.enabled": True}), pctx).budget
    amd_trust = amd.to_json()["devices"][0]["segment_trust"]
    assert amd_trust["weights"] == amd_trust["mtp_compute"] == "estimate"  # not CUDA's rules

    # flash attention off: the draft graph is not replayed, the figure is the fitted estimate
    plain = {"mtp.enabled": True, "runtime.flash_attn": "off"}
    plain |= {"runtime.cache_type_k": "f16", "runtime.cache_type_v": "f16"}
    plain |= {"mtp.cache_type_k": "f16", "mtp.cache_type_v": "f16"}
    budget = evaluate(demo_plan(device="cpu", **plain), pctx).budget
    assert budget.replayed == frozenset({("CPU", "compute")})


def test_a_sum_of_figures_is_as_sure_as_its_least_sure_part() -> None:
    assert weakest(Trust.EXACT, Trust.SOURCE) is Trust.SOURCE
    assert weakest(Trust.MEASURED, Trust.EXACT) is Trust.EXACT
    assert weakest(Trust.SOURCE, Trust.ESTIMATE, Trust.EXACT) is Trust.ESTIMATE
