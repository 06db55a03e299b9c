"""How far each budget figure can be trusted: exact formula, measured on this build, or estimate."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import StrEnum


class Trust(StrEnum):
    """Where a segment's figure comes from."""

    EXACT = "exact"
    """A byte formula checked against the engine's own log to 0.01 MiB (CPU build, full size),
    or a compute buffer from a replay of the engine's graph allocator (``graph_alloc``)."""
    MEASURED = "measured"
    """This engine build logged this very figure on this device (a stored reconciliation)."""
    ESTIMATE = "estimate"
    """A fitted or assumed figure: CUDA context, desktop, other processes, a replayed compute
    buffer on a backend where its replay was never checked, and the compute buffer of a graph
    mtpstudio does not replay (planned with ``terms.UNMODELLED_COMPUTE_MARGIN`` on top)."""


# Byte formulas that do not depend on the backend: verified to 0.01 MiB on the upstream CPU
# build with the full-size Qwen3.6 cards (benchmarks/fullsize_accuracy.py).
_EXACT_ANYWHERE = frozenset(
    {"kv_cache", "recurrent_state", "mtp_kv_cache", "output", "margin", "prompt_cache_max"}
)
# Weights are exact where they were checked: CPU buffers. CUDA adds row padding and alignment
# from ggml-cuda's source, not yet compared with a CUDA log.
_EXACT_ON_CPU = frozenset({"weights", "weights_mapped", "weights_resident", "weights_locked"})

Measured = frozenset[tuple[str, str]]
"""``(device id, segment)`` pairs a stored measurement of this build confirms (see
``core.server.reconcile.measured_segments``); the host's id is ``host``."""

NOTHING_MEASURED: Measured = frozenset()


def segment_trust(
    device_id: str,
    segment: str,
    measured: Collection[tuple[str, str]] = NOTHING_MEASURED,
    replayed: Collection[tuple[str, str]] = NOTHING_MEASURED,
) -> Trust:
    """How far ``segment`` on ``device_id`` (``CPU``, ``CUDA0``, ``host``) can be trusted;
    ``measured`` lists the (device, segment) pairs a stored measurement confirms, ``replayed``
    the pairs whose figure replays the engine's own allocator on a backend where that replay
    was checked against the engine's trace."""
    if (device_id, segment) in measured:
        return Trust.MEASURED
    if (device_id, segment) in replayed or segment in _EXACT_ANYWHERE:
        return Trust.EXACT
    on_cpu = device_id in {"CPU", "host"}
    if on_cpu and segment in _EXACT_ON_CPU:
        return Trust.EXACT
    return Trust.ESTIMATE


def device_trust(
    device_id: str,
    segments: Mapping[str, int],
    measured: Collection[tuple[str, str]] = NOTHING_MEASURED,
    replayed: Collection[tuple[str, str]] = NOTHING_MEASURED,
) -> dict[str, str]:
    """``segment -> trust`` for every segment of one device (JSON-ready)."""
    return {name: segment_trust(device_id, name, measured, replayed).value for name in segments}
