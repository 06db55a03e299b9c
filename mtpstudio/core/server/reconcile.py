"""The engine's logged memory per segment and device (from its load log), reconciled with the
budget's prediction (``core.memory.measured``), and the store of the last measurements."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mtpstudio.core import paths
from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.measured import (
    HOST,
    SEGMENTS,
    ReconcileRow,
    Reconciliation,
    build_key,
    predicted_segments,
)
from mtpstudio.core.server.load_log import LoadReport
from mtpstudio.core.state_files import SchemaError, load_cache

STORE_SCHEMA = 1

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
    _collect(out, "moe_cache", report.moe_cache.sizes_mib, endpoints)
    for ctx in report.contexts:
        prefix = {"main": "", "mtp": "mtp_", "draft": "draft_"}[ctx.kind]
        _collect(out, f"{prefix}kv_cache", ctx.kv, endpoints)
        rs = "recurrent_state" if not prefix else f"{prefix}kv_cache"
        _collect(out, rs, ctx.recurrent, endpoints)
        _collect(out, f"{prefix}compute", ctx.compute, endpoints)
        _collect(out, "output", ctx.output, endpoints)
    return out


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
