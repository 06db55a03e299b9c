"""Predicted vs measured memory: the memory model's budget in the engine's own buffer terms
(segment by device), a launch's predicted-vs-logged rows, and which figures of a budget a
stored launch confirms ("measured").

Pure. Reading the engine's log into the same terms, and storing the launches, is the
server's (``core.server.reconcile``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.units import MIB

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
    "moe_cache",
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
    "moe_cache": "moe_cache",
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
