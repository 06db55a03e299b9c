"""Predicted vs actual memory per segment and device, and the store of the last measurements."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtpstudio.core import paths
from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.engines.caps import EngineBuild
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget import Budget
from mtpstudio.core.server.load_log import LoadReport
from mtpstudio.core.state_files import SchemaError, load_cache
from mtpstudio.core.units import MIB

STORE_SCHEMA = 1
HOST = "CPU"
# Drawing order of the reconciliation table.
SEGMENTS = (
    "weights",
    "kv_cache",
    "recurrent_state",
    "output",
    "compute",
    "mtp_kv_cache",
    "mtp_compute",
    "draft_weights",
    "draft_kv_cache",
    "draft_compute",
)
_DEVICE_SEGMENT = {
    "weights": "weights",
    "kv_cache": "kv_cache",
    "recurrent_state": "recurrent_state",
    "output": "output",
    "compute": "compute",
    "mtp_kv_cache": "mtp_kv_cache",
    "mtp_compute": "mtp_compute",
    "draft_weights": "draft_weights",
    "draft_kv_cache": "draft_kv_cache",
    "draft_compute": "draft_compute",
}
_HOST_SEGMENT = {
    "weights_mapped": "weights",
    "weights_resident": "weights",
    "weights_locked": "weights",
    "kv_cache": "kv_cache",
    "recurrent_state": "recurrent_state",
    "mtp_kv_cache": "mtp_kv_cache",
    "compute": "mtp_compute",  # on a GPU target the host compute is the MTP context's
    "output": "output",
    "draft_weights": "draft_weights",
    "draft_kv_cache": "draft_kv_cache",
    "draft_compute": "draft_compute",
}


_RPC_BUFFER = re.compile(r"RPC\d+\[(.+)\]\Z")


def device_of(buffer: str, endpoints: Mapping[str, str] | None = None) -> str:
    """The device a buffer name lives on: ``CUDA0`` → CUDA0; ``CPU_Mapped``, ``CUDA_Host`` → CPU;
    an RPC device's ``RPC<n>[HOST:PORT]`` → the plan's device of that endpoint (``endpoints``:
    endpoint → device id), the engine numbering each server's devices from 0."""
    if buffer.upper().startswith("CPU") or buffer.endswith("_Host"):
        return HOST
    m = _RPC_BUFFER.match(buffer)
    if m is not None and endpoints and m.group(1) in endpoints:
        return endpoints[m.group(1)]
    return buffer


def _collect(
    into: dict[tuple[str, str], float],
    segment: str,
    buffers: Mapping[str, float],
    endpoints: Mapping[str, str] | None = None,
) -> None:
    for name, mib in buffers.items():
        key = (segment, device_of(name, endpoints))
        into[key] = into.get(key, 0.0) + mib


def actual_segments(
    report: LoadReport, endpoints: Mapping[str, str] | None = None
) -> dict[tuple[str, str], float]:
    """(segment, device) → MiB as the engine logged them (``endpoints``: an RPC endpoint's
    device id in the plan)."""
    out: dict[tuple[str, str], float] = {}
    _collect(out, "weights", report.model, endpoints)
    _collect(out, "draft_weights", report.draft_model, endpoints)
    for ctx in report.contexts:
        prefix = {"main": "", "mtp": "mtp_", "draft": "draft_"}[ctx.kind]
        _collect(out, f"{prefix}kv_cache", ctx.kv, endpoints)
        rs = "recurrent_state" if not prefix else f"{prefix}kv_cache"
        _collect(out, rs, ctx.recurrent, endpoints)
        _collect(out, f"{prefix}compute", ctx.compute, endpoints)
        _collect(out, "output", ctx.output, endpoints)
    return out


def predicted_segments(budget: Budget, facts: EngineMemoryFacts) -> dict[tuple[str, str], float]:
    """(segment, device) → MiB the budget predicted, in the engine's own buffer terms.

    On ik the recurrent state lives inside the KV buffer, so it is counted there.
    """
    out: dict[tuple[str, str], float] = {}

    def add(segment: str, device: str, nbytes: int) -> None:
        if facts.recurrent_in_kv_buffer and segment == "recurrent_state":
            segment = "kv_cache"
        if nbytes:
            out[(segment, device)] = out.get((segment, device), 0.0) + nbytes / MIB

    for dev in budget.devices:
        device = HOST if not dev.id or dev.id == "CPU" else dev.id
        for name, nbytes in dev.segments.items():
            if name in _DEVICE_SEGMENT:
                add(_DEVICE_SEGMENT[name], device, nbytes)
    if any(d.id != "CPU" for d in budget.devices):
        for name, nbytes in budget.host.segments.items():
            if name in _HOST_SEGMENT:
                add(_HOST_SEGMENT[name], HOST, nbytes)
    return out


@dataclass(frozen=True)
class ReconcileRow:
    """One segment on one device: predicted and logged MiB."""

    segment: str
    device: str
    predicted_mib: float
    actual_mib: float

    @property
    def delta_mib(self) -> float:
        return self.actual_mib - self.predicted_mib

    def to_json(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "device": self.device,
            "predicted_mib": round(self.predicted_mib, 2),
            "actual_mib": round(self.actual_mib, 2),
            "delta_mib": round(self.delta_mib, 2),
        }


@dataclass(frozen=True)
class Reconciliation:
    """Predicted vs actual for one launch of one build on one target device."""

    build_key: str
    device: str
    rows: tuple[ReconcileRow, ...]
    measured_at: float = field(default_factory=time.time)

    def row(self, segment: str, device: str = HOST) -> ReconcileRow | None:
        return next((r for r in self.rows if r.segment == segment and r.device == device), None)

    @property
    def predicted_total_mib(self) -> float:
        return sum(r.predicted_mib for r in self.rows)

    @property
    def actual_total_mib(self) -> float:
        return sum(r.actual_mib for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.build_key,
            "device": self.device,
            "measured_at": self.measured_at,
            "rows": [r.to_json() for r in self.rows],
            "predicted_total_mib": round(self.predicted_total_mib, 2),
            "actual_total_mib": round(self.actual_total_mib, 2),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reconciliation:
        rows = tuple(
            ReconcileRow(r["segment"], r["device"], r["predicted_mib"], r["actual_mib"])
            for r in data["rows"]
        )
        return cls(str(data["build"]), str(data["device"]), rows, float(data["measured_at"]))

    def render(self) -> str:
        """A table: segment, device, predicted, actual, difference (MiB)."""
        head = f"{'segment':16} {'device':7} {'predicted':>10} {'actual':>10} {'diff':>9}"
        lines = [f"Memory, predicted vs logged by the engine (MiB) on {self.device}:", head]
        for r in self.rows:
            lines.append(
                f"{r.segment:16} {r.device:7} {r.predicted_mib:10.2f} {r.actual_mib:10.2f} "
                f"{r.delta_mib:+9.2f}"
            )
        lines.append(
            f"{'total':16} {'':7} {self.predicted_total_mib:10.2f} {self.actual_total_mib:10.2f} "
            f"{self.actual_total_mib - self.predicted_total_mib:+9.2f}"
        )
        return "\n".join(lines)


# A figure counts as measured when the engine logged it within this much of the prediction.
MEASURED_WITHIN_MIB = 1.0
MEASURED_WITHIN_FRACTION = 0.02


def _agrees(predicted: float, actual: float) -> bool:
    return abs(actual - predicted) <= max(MEASURED_WITHIN_MIB, MEASURED_WITHIN_FRACTION * predicted)


def measured_segments(
    rec: Reconciliation, budget: Budget, facts: EngineMemoryFacts
) -> frozenset[tuple[str, str]]:
    """The (device id, segment) figures of ``budget`` that ``rec`` confirms (pure).

    A budget segment is measured when the stored launch predicted the same figure (to 0.01
    MiB: the same settings, model and build) and the engine logged it within 1 MiB or 2 %.
    The host's segments are named on the device ``host``, as in the budget's JSON.
    """
    now = predicted_segments(budget, facts)

    def confirmed(key: tuple[str, str]) -> bool:
        row = rec.row(*key)
        if row is None or key not in now or abs(row.predicted_mib - now[key]) > 0.01:
            return False
        return row.actual_mib > 0 and _agrees(row.predicted_mib, row.actual_mib)

    def fold(segment: str) -> str:
        folded = facts.recurrent_in_kv_buffer and segment == "recurrent_state"
        return "kv_cache" if folded else segment

    out: set[tuple[str, str]] = set()
    for dev in budget.devices:
        device = HOST if not dev.id or dev.id == "CPU" else dev.id
        for name in dev.segments:
            seg = _DEVICE_SEGMENT.get(name)
            if seg is not None and confirmed((fold(seg), device)):
                out.add((dev.id, name))
    if any(d.id != "CPU" for d in budget.devices):
        for name in budget.host.segments:
            seg = _HOST_SEGMENT.get(name)
            if seg is not None and budget.host.segments[name] and confirmed((fold(seg), HOST)):
                out.add(("host", name))
    return frozenset(out)


def build_key(build: EngineBuild) -> str:
    """Identifies an engine build across runs: flavour, version, build number, commit, size."""
    parts = [build.flavour.value, build.version, str(build.build_number or 0)]
    parts += [build.commit or "-", str(build.size)]
    return ":".join(parts)


def reconcile(
    budget: Budget, report: LoadReport, facts: EngineMemoryFacts, key: str, device: str
) -> Reconciliation:
    """Rows for every (segment, device) either side has, in SEGMENTS order (pure)."""
    predicted = predicted_segments(budget, facts)
    endpoints = {d.endpoint: d.id for d in budget.devices if d.endpoint}
    actual = actual_segments(report, endpoints)
    keys = set(predicted) | set(actual)
    order = {s: i for i, s in enumerate(SEGMENTS)}
    rows = tuple(
        ReconcileRow(seg, dev, predicted.get((seg, dev), 0.0), actual.get((seg, dev), 0.0))
        for seg, dev in sorted(keys, key=lambda k: (order.get(k[0], 99), k[1] != HOST, k[1]))
    )
    return Reconciliation(key, device, rows)


# --------------------------------------------------------------------------------------------
# store: $XDG_DATA_HOME/mtpstudio/measurements.json


STORE_MAX_BYTES = 16 * 1024 * 1024


def store_path() -> Path:
    return paths.data_dir() / "measurements.json"


def _store_shape(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SchemaError("is not a measurement store")
    return data


def _load_store(path: Path) -> dict[str, Any]:
    """The store; a damaged one is set aside (it fills again with the next launch)."""
    data = load_cache(path, "the measurement store", _store_shape, max_bytes=STORE_MAX_BYTES)
    if data is None or data.get("schema") != STORE_SCHEMA:
        return {"schema": STORE_SCHEMA, "builds": {}}
    if not isinstance(data.get("builds"), dict):
        data["builds"] = {}
    return data


def save_measurement(rec: Reconciliation, path: Path | None = None) -> Path:
    """Keep ``rec`` as the last measurement of its build on its device (atomic write)."""
    path = path or store_path()
    data = _load_store(path)
    data["builds"].setdefault(rec.build_key, {})[rec.device] = rec.to_json()
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def last_measured(key: str, device: str, path: Path | None = None) -> Reconciliation | None:
    """The last measurement stored for this build on this device, if any."""
    data = _load_store(path or store_path())
    raw = data["builds"].get(key, {}).get(device)
    if not isinstance(raw, dict):
        return None
    try:
        return Reconciliation.from_json(raw)
    except (KeyError, TypeError, ValueError):
        return None


def load_measurements(path: Path | None = None) -> dict[tuple[str, str], Reconciliation]:
    """Every stored measurement, keyed by (build key, device)."""
    out: dict[tuple[str, str], Reconciliation] = {}
    for key, devices in _load_store(path or store_path())["builds"].items():
        if not isinstance(devices, dict):
            continue
        for device, raw in devices.items():
            try:
                out[(str(key), str(device))] = Reconciliation.from_json(raw)
            except (KeyError, TypeError, ValueError):
                continue
    return out


def last_measured_text(build: EngineBuild | None, device: str) -> str | None:
    """'Last measured …' with the stored table for this build and device, for plan reports."""
    if build is None:
        return None
    rec = last_measured(build_key(build), device)
    if rec is None:
        return None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(rec.measured_at))
    return f"Last measured on this build and device ({when}):\n{rec.render()}"
