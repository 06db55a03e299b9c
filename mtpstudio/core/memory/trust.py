"""How sure each budget figure is: exact, measured, from the engine's source, or estimate."""

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
    CUDA = "measured on CUDA (sm_90, b11434)"
    """The same rule and figure were checked against a real CUDA build of the pinned engine on a
    Hopper card by the GPU kit (``tests/fixtures/cuda_truth``), not on this very card."""
    SOURCE = "source"
    """Follows the engine's source for this backend (the pinned ggml-cuda: alignment, padding,
    attention copies, graph rewrites), but was not measured on this kind of device."""
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
# from ggml-cuda's source (``source`` where the budget says so), not yet compared with a log.
_EXACT_ON_CPU = frozenset({"weights", "weights_mapped", "weights_resident", "weights_locked"})

Measured = frozenset[tuple[str, str]]
"""``(device id, segment)`` pairs a stored measurement of this build confirms (see
``core.memory.measured.measured_segments``); the host's id is ``host``."""

NOTHING_MEASURED: Measured = frozenset()


def segment_trust(
    device_id: str,
    segment: str,
    measured: Collection[tuple[str, str]] = NOTHING_MEASURED,
    replayed: Collection[tuple[str, str]] = NOTHING_MEASURED,
    sourced: Collection[tuple[str, str]] = NOTHING_MEASURED,
    kit: Collection[tuple[str, str]] = NOTHING_MEASURED,
) -> Trust:
    """How far ``segment`` on ``device_id`` (``CPU``, ``CUDA0``, ``host``) can be trusted;
    ``measured`` lists the (device, segment) pairs a stored measurement confirms, ``replayed``
    the pairs whose figure replays the engine's own allocator on a backend where that replay
    was checked against the engine's trace, ``sourced`` the pairs whose figure follows the
    engine's source for that backend without a check on such a device, ``kit`` the pairs the
    GPU kit measured on a CUDA card of the same kind."""
    if (device_id, segment) in measured:
        return Trust.MEASURED
    if (device_id, segment) in replayed or segment in _EXACT_ANYWHERE:
        return Trust.EXACT
    on_cpu = device_id in {"CPU", "host"}
    if on_cpu and segment in _EXACT_ON_CPU:
        return Trust.EXACT
    if (device_id, segment) in kit:
        return Trust.CUDA
    if (device_id, segment) in sourced:
        return Trust.SOURCE
    return Trust.ESTIMATE


def device_trust(
    device_id: str,
    segments: Mapping[str, int],
    measured: Collection[tuple[str, str]] = NOTHING_MEASURED,
    replayed: Collection[tuple[str, str]] = NOTHING_MEASURED,
    sourced: Collection[tuple[str, str]] = NOTHING_MEASURED,
    kit: Collection[tuple[str, str]] = NOTHING_MEASURED,
) -> dict[str, str]:
    """``segment -> trust`` for every segment of one device (JSON-ready)."""
    return {
        name: segment_trust(device_id, name, measured, replayed, sourced, kit).value
        for name in segments
    }


TRUST_MEANINGS = {
    Trust.EXACT: "byte formula checked against the engine's log, or the engine's graph "
    "allocator replayed",
    Trust.MEASURED: "this engine build logged this figure on this device at a launch",
    Trust.CUDA: "checked against the pinned engine's CUDA build on an H200 and an H100 by "
    "the GPU kit",
    Trust.SOURCE: "follows the engine's source for this backend (CUDA), not measured on such a "
    "device",
    Trust.ESTIMATE: "fitted or assumed (a compute buffer mtpstudio does not replay carries a "
    "safety margin, said under Warnings)",
}
"""What each level means, in the words the plan report and the GUI legend use."""

TRUST_ORDER = (Trust.MEASURED, Trust.EXACT, Trust.CUDA, Trust.SOURCE, Trust.ESTIMATE)
"""From the most to the least sure; a sum of figures is as sure as its least sure part."""


def weakest(*levels: Trust) -> Trust:
    """The least sure of ``levels`` (what a segment made of several figures can claim)."""
    return max(levels, key=TRUST_ORDER.index)
