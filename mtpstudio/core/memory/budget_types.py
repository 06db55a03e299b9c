"""The memory budget's types: the segments of each device and of host RAM, the whole answer
(``Budget``), the settings the engine really uses, and what its own fit decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.engine_fit import FitSearch
from mtpstudio.core.memory.moe_cache import MoeCache
from mtpstudio.core.memory.placement import PartialLayer, Placement
from mtpstudio.core.memory.runtime_growth import NO_GROWTH, RuntimeGrowth
from mtpstudio.core.memory.trust import NOTHING_MEASURED, Measured, device_trust

# Segment names in drawing order; the JSON output and the bar use these keys.
DEVICE_SEGMENTS = (
    "weights",
    "kv_cache",
    "recurrent_state",
    "mtp_kv_cache",
    "mtp_compute",
    "moe_cache",  # only with --moe-cache-mib
    "compute",
    "output",
    "desktop",
    "other_processes",
    "driver_overhead",
    "runtime_growth",
    "margin",
)


HOST_SEGMENTS = (
    "weights_mapped",
    "weights_resident",
    "weights_locked",
    "kv_cache",
    "recurrent_state",
    "mtp_kv_cache",
    "compute",
    "output",
    "prompt_cache_max",
)


@dataclass(frozen=True)
class DeviceBudget:
    """Segments of one device; ``free_bytes``/``fits`` are ``None`` when the size is unknown."""

    id: str
    name: str
    total_bytes: int | None
    segments: dict[str, int]
    endpoint: str | None = None
    """``HOST:PORT`` of an RPC device (the engine names its buffers after it)."""

    @property
    def used_bytes(self) -> int:
        return sum(self.segments.values())

    @property
    def free_bytes(self) -> int | None:
        return None if self.total_bytes is None else self.total_bytes - self.used_bytes

    @property
    def fits(self) -> bool | None:
        free = self.free_bytes
        return None if free is None else free >= 0

    def to_json(
        self,
        measured: Measured = NOTHING_MEASURED,
        replayed: Measured = NOTHING_MEASURED,
        sourced: Measured = NOTHING_MEASURED,
        kit: Measured = NOTHING_MEASURED,
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "total_bytes": self.total_bytes,
            "segments": dict(self.segments),
            "segment_trust": device_trust(self.id, self.segments, measured, replayed, sourced, kit),
            "free_bytes": self.free_bytes,
            "fits": self.fits,
        }


@dataclass(frozen=True)
class HostBudget:
    """System RAM: CPU-side weights and buffers."""

    total_bytes: int | None
    available_bytes: int | None
    segments: dict[str, int]

    @property
    def needed_bytes(self) -> int:
        """RAM that must be there for the load: resident weights and buffers (no page cache)."""
        s = self.segments
        return (
            s["weights_resident"]
            + s["weights_locked"]
            + s["kv_cache"]
            + s["recurrent_state"]
            + s["mtp_kv_cache"]
            + s["compute"]
            + s["output"]
        )

    @property
    def fits(self) -> bool | None:
        if self.available_bytes is None:
            return None
        return self.needed_bytes <= self.available_bytes

    def to_json(self, measured: Measured = NOTHING_MEASURED) -> dict[str, Any]:
        return {
            "total_bytes": self.total_bytes,
            "available_bytes": self.available_bytes,
            "segments": dict(self.segments),
            "segment_trust": device_trust("host", self.segments, measured),
            "needed_bytes": self.needed_bytes,
            "fits": self.fits,
        }


@dataclass(frozen=True)
class EffectiveSettings:
    """What the engine will really use after padding and its own rules."""

    n_ctx: int
    n_ctx_seq: int
    n_stream: int
    n_seq: int
    flash_attn: bool
    mtp_active: bool
    n_rs_seq: int
    cpu_expert_layers: frozenset[int]
    n_gpu_layers: int | None


@dataclass(frozen=True)
class Budget:
    """The answer to 'will it fit': per-device segments, host RAM, warnings.

    ``parts`` holds the engine-side totals per buffer kind (all devices together), the figures
    the engine's own load log reports. ``measured`` names the (device, segment) figures a
    stored measurement of the same build on the same device confirmed; ``replayed`` those that
    replay the engine's graph allocator on a backend where the replay matched its trace;
    ``sourced`` those that follow the engine's source for this backend, unmeasured here;
    ``kit`` those the GPU kit measured on a CUDA card of the same kind (``Trust.CUDA``).
    ``growth``: what the engine process adds after the load (its ``runtime_growth`` segment).
    """

    devices: tuple[DeviceBudget, ...]
    host: HostBudget
    effective: EffectiveSettings
    placement: Placement
    warnings: tuple[str, ...] = field(default=())
    parts: dict[str, int] = field(default_factory=dict)
    measured: Measured = NOTHING_MEASURED
    replayed: Measured = NOTHING_MEASURED
    sourced: Measured = NOTHING_MEASURED
    kit: Measured = NOTHING_MEASURED
    growth: RuntimeGrowth = NO_GROWTH
    fit: FitPlacement | None = None
    """What the engine's own fit was expected to decide, where it places the weights."""
    split: Any = None
    """A model split over several devices: ``split_budget.SplitOutcome`` (placement, layout,
    the engine's fit over the devices), None for one device."""
    moe_cache: MoeCache | None = None
    """What ``--moe-cache-mib`` builds for this placement (None: no cache asked for, or the
    engine has none)."""

    @property
    def fits(self) -> bool | None:
        verdicts = [d.fits for d in self.devices] + [self.host.fits]
        if any(v is False for v in verdicts):
            return False
        return None if any(v is None for v in verdicts) else True

    def to_json(self, argv: list[str] | None = None) -> dict[str, Any]:
        growth = self.growth
        search = self.fit.search if self.fit is not None else None
        return {
            "devices": [
                d.to_json(self.measured, self.replayed, self.sourced, self.kit)
                for d in self.devices
            ],
            "host": self.host.to_json(self.measured),
            "runtime_growth": {
                "bytes": growth.bytes,
                "load_bytes": growth.load_bytes,
                "trust": growth.trust,
                "parts": [
                    {"name": p.name, "bytes": p.bytes, "trust": p.trust, "why": p.why}
                    for p in growth.parts
                ],
            },
            "engine_fit": None
            if search is None
            else {
                "layout": None
                if search.layout is None
                else {
                    "n_layer": search.layout.n_layer,
                    "n_part": search.layout.n_part,
                    "overflow": search.layout.overflow,
                },
                "target_bytes": search.target,
                "projected_bytes": search.projected,
            },
            **(
                {"split": self.split.to_json([_device_named(d) for d in self.devices])}
                if self.split is not None
                else {}
            ),
            "argv": list(argv or []),
            "warnings": list(self.warnings),
        }


def _device_named(d: DeviceBudget) -> TargetDevice:
    return TargetDevice(d.id, d.name, d.total_bytes)


@dataclass(frozen=True)
class SlotContext:
    """The context cells the engine allocates: padded in total, per slot, and KV streams."""

    n_ctx: int
    n_ctx_seq: int
    n_stream: int


@dataclass(frozen=True)
class FitPlacement:
    """What the engine's fit is expected to decide.

    Attributes:
        cpu_expert_layers: blocks whose expert tensors go to system RAM.
        partial: the layer whose FFN the fit splits between GPU and RAM (upstream), or None.
        n_gpu_layers: the ``-ngl`` the fit sets (counted from the back, the output layer is
            one); None when it leaves every layer on the GPU.
        fails: the fit cannot make the model fit and the engine stops (ik with a MoE model that
            does not fit even with every expert in RAM: ``Unable to auto-fit model``).
    """

    cpu_expert_layers: frozenset[int]
    partial: PartialLayer | None = None
    n_gpu_layers: int | None = None
    fails: bool = False
    search: FitSearch | None = None
    """Upstream's own search (its layout, target and projections), where it was replayed."""
