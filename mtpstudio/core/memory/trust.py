"""How far each budget figure can be trusted: exact formula, measured on this build, or estimate."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class Trust(StrEnum):
    """Where a segment's figure comes from."""

    EXACT = "exact"
    """A byte formula checked against the engine's own log to 0.01 MiB (CPU build, full size)."""
    MEASURED = "measured"
    """A stored measurement of this engine build on this machine."""
    ESTIMATE = "estimate"
    """A fitted or assumed figure (compute buffers, CUDA context, desktop, other processes)."""


# Byte formulas that do not depend on the backend: verified to 0.01 MiB on the upstream CPU
# build with the full-size Qwen3.6 cards (benchmarks/fullsize_accuracy.py).
_EXACT_ANYWHERE = frozenset(
    {"kv_cache", "recurrent_state", "mtp_kv_cache", "output", "margin", "prompt_cache_max"}
)
# Weights are exact where they were checked: CPU buffers. CUDA adds row padding and alignment
# from ggml-cuda's source, not yet compared with a CUDA log.
_EXACT_ON_CPU = frozenset({"weights", "weights_mapped", "weights_resident", "weights_locked"})

MeasurementLookup = Callable[[str, str], bool]
"""``(device id, segment) -> True`` when a stored measurement of this build covers it."""

_lookups: list[MeasurementLookup] = []


def register_measurement_lookup(lookup: MeasurementLookup) -> None:
    """Let stored measurements (reconciliation storage) mark segments as measured."""
    _lookups.append(lookup)


def clear_measurement_lookups() -> None:
    """Forget every registered lookup (tests)."""
    _lookups.clear()


def segment_trust(device_id: str, segment: str) -> Trust:
    """How far ``segment`` on ``device_id`` (``CPU``, ``CUDA0``, ``host``) can be trusted."""
    if any(lookup(device_id, segment) for lookup in _lookups):
        return Trust.MEASURED
    if segment in _EXACT_ANYWHERE:
        return Trust.EXACT
    on_cpu = device_id in {"CPU", "host"}
    if on_cpu and segment in _EXACT_ON_CPU:
        return Trust.EXACT
    return Trust.ESTIMATE


def device_trust(device_id: str, segments: dict[str, int]) -> dict[str, str]:
    """``segment -> trust`` for every segment of one device (JSON-ready)."""
    return {name: segment_trust(device_id, name).value for name in segments}
