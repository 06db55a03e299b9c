"""Predicted vs logged, per device, for a load split over several devices (RPC recordings).

A recording (``tests/fixtures/split/record_split.py``) holds the plan, the device sizes and the
engine's log. ``device_rows`` puts each buffer the log reports beside what the planner predicts
for the same device: the weights, K/V cache, recurrent state and compute buffer of the main
context and the MTP draft context's on each RPC device, and the host's own (its mapped
weights, compute buffers). The engine names an RPC device's buffers ``RPC<n>[HOST:PORT]`` (its
index within that server, then the endpoint), so buffers are matched by endpoint.
``engine_layouts`` reads the fit's decision per device from the same log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from devkit.budget_check import SegmentRow
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.engine_fit import Layout
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import PlanningContext, budget_for, machine_for, resolve
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.units import MIB

HOST = "CPU"


@dataclass(frozen=True)
class SplitCase:
    """One recorded load: its name, the plan, the device sizes, the log."""

    name: str
    model: str
    plan: Plan
    device_mib: tuple[int, ...]
    log: str

    @classmethod
    def read(cls, path: Path) -> SplitCase:
        data = json.loads(path.read_text())
        log = (path.parent / data["log"]).read_text()
        return cls(
            path.stem, data["model"], plan_from_dict(data["plan"]), tuple(data["device_mib"]), log
        )

    @property
    def loaded(self) -> bool:
        return "model loaded" in self.log or "server is listening" in self.log


def predicted_budget(case: SplitCase, model: ModelInfo) -> Budget:
    """The planner's budget for the case's plan (the devices as the plan recorded them)."""
    resolved = resolve(case.plan, PlanningContext(machine_for(None), model))
    return budget_for(resolved)


def _endpoint_of(buffer: str) -> str | None:
    m = re.match(r"RPC\d+\[(.+)\]$", buffer)
    return m.group(1) if m else None


def _by_device(values: dict[str, float], ids: dict[str, str]) -> dict[str, float]:
    """Buffers by device id (``ids``: endpoint -> id); the host's buffers under ``CPU``."""
    out: dict[str, float] = {}
    for buffer, mib in values.items():
        endpoint = _endpoint_of(buffer)
        device = ids.get(endpoint, buffer) if endpoint is not None else HOST
        out[device] = out.get(device, 0.0) + mib
    return out


def device_rows(case: SplitCase, model: ModelInfo) -> list[SegmentRow]:
    """Every buffer the log reports with its prediction, per device (``model`` column:
    ``<case> <device>``)."""
    budget = predicted_budget(case, model)
    report = parse_load_log(case.log)
    ids = {s.endpoint: f"RPC{i}" for i, s in enumerate(case.plan.split.rpc)}
    main = report.context("main")
    if main is None:
        raise ValueError(f"{case.name}: no context lines in the log")
    logged: dict[tuple[str, str], float] = {}

    def put(segment: str, values: dict[str, float]) -> None:
        for device, mib in _by_device(values, ids).items():
            logged[(device, segment)] = mib

    put("weights", report.model)
    put("kv_cache", main.kv)
    put("recurrent_state", main.recurrent)
    put("compute", main.compute)
    mtp = report.context("mtp")
    if mtp is not None:
        put("mtp_kv_cache", mtp.kv)
        put("mtp_compute", mtp.compute)
    predicted: dict[tuple[str, str], float] = {}
    for d in budget.devices:
        for segment in ("weights", "kv_cache", "recurrent_state", "compute"):
            predicted[(d.id, segment)] = d.segments[segment] / MIB
        predicted[(d.id, "mtp_kv_cache")] = d.segments["mtp_kv_cache"] / MIB
        predicted[(d.id, "mtp_compute")] = d.segments["mtp_compute"] / MIB
    host = budget.host.segments
    parts = budget.parts
    predicted[(HOST, "weights")] = (
        host["weights_mapped"] + host["weights_resident"] + host["weights_locked"]
    ) / MIB
    predicted[(HOST, "kv_cache")] = host["kv_cache"] / MIB
    predicted[(HOST, "recurrent_state")] = host["recurrent_state"] / MIB
    predicted[(HOST, "compute")] = parts["compute_host"] / MIB
    predicted[(HOST, "mtp_kv_cache")] = host["mtp_kv_cache"] / MIB
    predicted[(HOST, "mtp_compute")] = parts["mtp_compute_host"] / MIB
    order = [d.id for d in budget.devices] + [HOST]
    rows = []
    for device in order:
        for segment in (
            "weights",
            "kv_cache",
            "recurrent_state",
            "compute",
            "mtp_kv_cache",
            "mtp_compute",
        ):
            if (device, segment) not in logged:
                continue
            rows.append(
                SegmentRow(
                    f"{case.name} {device}",
                    case.name,
                    segment,
                    predicted.get((device, segment), 0.0),
                    logged[(device, segment)],
                )
            )
    return rows


_SET_OVERFLOW = re.compile(
    r"set ngl_per_device\[(\d+)\]\.\(n_layer, n_part, overflow_type\)=\(\d+, \d+, (\w+)\)"
)
_FINAL = re.compile(r"- (RPC\d+) \([^)]*\): *(\d+) layers(?: \( *(\d+) overflowing\))?")


@dataclass(frozen=True)
class EngineFit:
    """What the engine's fit decided per device (from its log), in mtpstudio's terms."""

    layouts: tuple[Layout, ...] | None


def engine_layouts(log: str, n_devices: int) -> EngineFit:
    """The fit's final ``(n_layer, n_part, overflow)`` per device: the last summary line the
    fit prints for each device (``- RPCk (...): N layers (M overflowing)``; without the
    overflow count, after the dense step alone, a MoE model's device keeps every layer's
    experts in RAM but the output layer's), and the last overflow kind it set for it."""
    if "no changes needed" in log:
        return EngineFit(None)
    moe = "filling dense-only layers" in log
    finals = {m.group(1): (int(m.group(2)), m.group(3)) for m in _FINAL.finditer(log)}
    overflow = {int(m.group(1)): m.group(2) for m in _SET_OVERFLOW.finditer(log)}
    layouts = []
    for i in range(n_devices):
        n_layer, overflowing = finals.get(f"RPC{i}", (0, None))
        if overflowing is not None:
            n_part = int(overflowing)
        elif moe and n_layer:
            n_part = n_layer - 1 if i == n_devices - 1 else n_layer
        else:
            n_part = 0
        layouts.append(Layout(n_layer, n_part, overflow.get(i, "MOE")))
    return EngineFit(tuple(layouts))
