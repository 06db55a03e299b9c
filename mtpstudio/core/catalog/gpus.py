"""Catalogue GPU cards: VRAM, bandwidth and typical desktop use, to plan without the hardware."""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mtpstudio.core.catalog.resource import catalogue_document
from mtpstudio.core.errors import CatalogError
from mtpstudio.core.units import MIB

DEFAULT_GPU_CARD = "rtx-4070-super"
"""The card the demo plans for: a common 12 GB desktop GPU."""

_RESOURCE = "catalog/gpus.json"
INT32_SHARE = {
    "Turing": 1.0,
    "Ampere": 0.5,
    "Ada Lovelace": 0.5,
    "Hopper": 0.5,
    "Blackwell": 1.0,
}
"""The share of an NVIDIA architecture's shader units (CUDA cores) that run 32-bit integer
instructions: on Turing each SM has 64 INT32 cores beside its 64 FP32 cores (NVIDIA's Turing
GPU architecture whitepaper, 2018: "the Turing SM ... 64 FP32 cores and 64 INT32 cores"), so as
many integer lanes as CUDA cores; on Ampere and Ada one of each SM partition's two 16-lane
groups is FP32/INT32 and the other FP32 only (Hopper's SM: 128 FP32 and 64 INT32 cores); on
Blackwell (RTX 50) every CUDA core runs either (NVIDIA's RTX Blackwell GPU architecture
whitepaper, 2025: integer throughput per SM doubled over Ada). RDNA 3 is left out: its mat-vec
runs on Vulkan by other rules."""
_SCHEMA = 1

Vendor = Literal["nvidia", "amd", "intel"]
Backend = Literal["cuda", "vulkan", "rocm", "sycl"]
VENDOR_TITLES: dict[str, str] = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


class GpuCard(BaseModel):
    """One catalogue GPU, with every size in bytes.

    ``vram_bytes`` is the total the driver reports (NVML ``memory.total`` or amdgpu
    ``mem_info_vram_total``), which is a little under the nominal size on many cards.
    ``desktop_vram_bytes`` is a typical KDE Plasma Wayland session on this card and
    ``llvmpipe_desktop_vram_bytes`` the same desktop rendered in software.
    ``driver_overhead_bytes`` is the compute runtime's own context: for NVIDIA the CUDA
    context published for this card or the card closest in memory (``driver_overhead_source``
    says which), for AMD the runtime overhead others assume; ``None`` where nothing gives one.
    ``backends`` are the llama.cpp backends people run on the card; ``laptop`` cards carry the
    range of board power (``power_w``) their makers set, which moves their clocks. ``source``
    names where the figures come from, ``vram_source`` where ``vram_bytes`` does ("nominal":
    the marketed size, no reported total found).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    vendor: Vendor
    vram_bytes: int = Field(gt=0)
    nominal_vram_gb: int = Field(gt=0)
    memory_type: str
    bus_width_bits: int = Field(gt=0)
    data_rate_gbps: float = Field(gt=0)
    bandwidth_gb_s: float = Field(gt=0)
    chip: str
    arch: str
    compute_capability: str | None = None
    gfx_target: str | None = None
    shader_units: int | None = Field(default=None, gt=0)
    boost_clock_mhz: int | None = Field(default=None, gt=0)
    pcie_gen: int = Field(ge=1)
    pcie_lanes: int = Field(ge=1)
    desktop_vram_bytes: int = Field(ge=0)
    llvmpipe_desktop_vram_bytes: int = Field(ge=0)
    driver_overhead_bytes: int | None = Field(default=None, ge=0)
    driver_overhead_source: str = ""
    desktop_note: str = ""
    backends: tuple[Backend, ...] = ()
    laptop: bool = False
    power_w: tuple[int, int] | None = None
    source: str = ""
    vram_source: str = ""
    note: str = ""

    @property
    def int32_ops(self) -> float | None:
        """32-bit integer operations per second at the boost clock: the shader units that run
        integer instructions (``INT32_SHARE`` of them, by architecture) × clock; None where the
        architecture's share is not stated."""
        share = INT32_SHARE.get(self.arch)
        if self.shader_units is None or self.boost_clock_mhz is None or share is None:
            return None
        return self.shader_units * share * self.boost_clock_mhz * 1e6

    @property
    def vram_mib(self) -> int:
        return self.vram_bytes // MIB

    @property
    def label(self) -> str:
        """Short display name, e.g. ``NVIDIA GeForce RTX 4070 SUPER (12 GB)``, with the power
        range of a laptop card."""
        power = f", {self.power_w[0]}-{self.power_w[1]} W" if self.power_w else ""
        return f"{self.name} ({self.nominal_vram_gb} GB{power})"


def _mib(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CatalogError(f"the GPU catalogue has a non-integer {what}: {value!r}")
    return value * MIB


def _card_from_record(record: dict[str, Any], defaults: dict[str, dict[str, Any]]) -> GpuCard:
    vendor_defaults = defaults.get(str(record.get("vendor")), {})
    merged = {**vendor_defaults, **record}
    data: dict[str, Any] = {k: v for k, v in merged.items() if not k.endswith("_mib")}
    for key in ("vram", "desktop_vram", "llvmpipe_desktop_vram", "driver_overhead"):
        if f"{key}_mib" in merged:
            data[f"{key}_bytes"] = _mib(merged[f"{key}_mib"], f"{key}_mib")
    if data.get("vendor") == "nvidia" and "driver_overhead_bytes" not in data:
        # the figure published for a card of this name (the same chip), else the closest
        own = [f for f in cuda_context_figures() if f.name == data.get("name")]
        figure = own[0] if own else closest_context_figure(data.get("vram_bytes"))
        data["driver_overhead_bytes"] = figure.context_mib * MIB
        data["driver_overhead_source"] = (
            f"published for the {figure.name}: {figure.source.split(' (')[0]}"
            if own
            else _closest_words(figure)
        )
    try:
        return GpuCard.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CatalogError(
            f"the GPU catalogue entry {record.get('id')!r} is invalid at {where}: {first['msg']}"
        ) from None


@cache
def _document() -> dict[str, Any]:
    return catalogue_document(_RESOURCE, _SCHEMA, "the GPU catalogue")


class ContextFigure(BaseModel):
    """A published CUDA context size: the card, its memory, the figure and where it is from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    vram_mib: int = Field(gt=0)
    context_mib: int = Field(gt=0)
    source: str = Field(min_length=1)


@cache
def cuda_context_figures() -> tuple[ContextFigure, ...]:
    """The published CUDA context figures the catalogue's NVIDIA cards take theirs from."""
    section = _document().get("cuda_context", {})
    try:
        return tuple(ContextFigure.model_validate(f) for f in section.get("published", []))
    except ValidationError as exc:
        raise CatalogError(f"the GPU catalogue's CUDA context figures are invalid: {exc}") from None


def closest_context_figure(vram_bytes: int | None) -> ContextFigure:
    """The published figure of the card closest in memory (the larger figure on a tie)."""
    figures = cuda_context_figures()
    if not figures:
        raise CatalogError("the GPU catalogue lists no CUDA context figure")
    vram_mib = (vram_bytes or 0) // MIB
    return min(figures, key=lambda f: (abs(f.vram_mib - vram_mib), -f.context_mib))


def cuda_context_for(name: str, vram_bytes: int | None) -> tuple[int, str]:
    """(bytes, source) of the CUDA context for an NVIDIA card called ``name``: the catalogue
    card's figure when the name is a catalogue card's, else the closest published figure."""
    card = gpu_card_named(name, vram_bytes)
    if card is not None and card.driver_overhead_bytes is not None:
        return card.driver_overhead_bytes, card.driver_overhead_source
    figure = closest_context_figure(vram_bytes)
    return figure.context_mib * MIB, _closest_words(figure)


def _closest_words(figure: ContextFigure) -> str:
    return (
        f"the published figure of the card closest in memory: {figure.name}, "
        + figure.source.split(" (")[0]
    )


@cache
def gpu_cards() -> tuple[GpuCard, ...]:
    """All catalogue GPUs, in catalogue order (read once from the packaged JSON)."""
    document = _document()
    defaults = document.get("defaults", {})
    cards = tuple(_card_from_record(record, defaults) for record in document.get("gpus", []))
    ids = [card.id for card in cards]
    if len(set(ids)) != len(ids):
        raise CatalogError("the GPU catalogue lists an id twice")
    return cards


def gpu_card(card_id: str) -> GpuCard:
    """The catalogue GPU with this id.

    Raises:
        CatalogError: the id is not in the catalogue; the message lists the known ids.
    """
    for card in gpu_cards():
        if card.id == card_id:
            return card
    near = similar_gpu_ids(card_id)
    raise CatalogError(
        f"unknown GPU '{card_id}'" + (f"; did you mean {' or '.join(near)}?" if near else ""),
        hint="`mtpstudio plan --gpu list` lists the catalogue by vendor; or use 'auto' to "
        "detect the real GPU.",
    )


def similar_gpu_ids(text: str, count: int = 3) -> list[str]:
    """The catalogue ids nearest to ``text`` (a typo, a name written another way), best
    first; empty when none is close."""
    wanted = _slug(text)
    by_key: dict[str, str] = {}
    for card in gpu_cards():
        by_key.setdefault(card.id, card.id)
        by_key.setdefault(_slug(card.name), card.id)
    found: list[str] = []
    for key in difflib.get_close_matches(wanted, list(by_key), n=count * 2, cutoff=0.75):
        if by_key[key] not in found:
            found.append(by_key[key])
    return found[:count]


def gpu_cards_by_vendor() -> dict[str, tuple[GpuCard, ...]]:
    """The catalogue grouped by vendor (NVIDIA, AMD, Intel), each group desktop cards first,
    then laptop cards, in catalogue order."""
    groups: dict[str, tuple[GpuCard, ...]] = {}
    for vendor in VENDOR_TITLES:
        cards = [c for c in gpu_cards() if c.vendor == vendor]
        groups[vendor] = tuple(sorted(cards, key=lambda c: c.laptop))
    return groups


class DatacenterCard(BaseModel):
    """A card the GPU kit ran on (not a planning target): its rates, for the speed model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arch: str
    bandwidth_gb_s: float = Field(gt=0)
    pcie_gen: int = Field(ge=1)
    pcie_lanes: int = Field(ge=1)
    shader_units: int = Field(gt=0)
    boost_clock_mhz: int = Field(gt=0)
    source: str = Field(min_length=1)

    @property
    def int32_ops(self) -> float:
        """32-bit integer operations per second at the boost clock (``INT32_SHARE``)."""
        return self.shader_units * INT32_SHARE[self.arch] * self.boost_clock_mhz * 1e6


@cache
def datacenter_cards() -> tuple[DatacenterCard, ...]:
    """The cards the GPU kit ran on, from the catalogue's ``datacenter`` section."""
    section = _document().get("datacenter", {})
    try:
        return tuple(DatacenterCard.model_validate(c) for c in section.get("cards", []))
    except ValidationError as exc:
        raise CatalogError(f"the GPU catalogue's datacenter cards are invalid: {exc}") from None


def datacenter_card(name: str) -> DatacenterCard | None:
    """The kit's card a driver reports as ``name`` (None: not one of them)."""
    return next((c for c in datacenter_cards() if c.name == name), None)


def gpu_card_named(name: str, vram_bytes: int | None = None) -> GpuCard | None:
    """The catalogue card a driver reports as ``name`` (any case; several cards share a name,
    the RTX 3060 8 GB and 12 GB say: the one whose memory is nearest ``vram_bytes``)."""
    wanted = name.removesuffix(" (catalogue)").strip().casefold()
    named = [c for c in gpu_cards() if c.name.casefold() == wanted]
    if not named:
        return None
    return min(named, key=lambda c: abs(c.vram_bytes - (vram_bytes or c.vram_bytes)))


def _slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower().removeprefix("nvidia geforce ")))


def catalogue_gpu_id(text: str) -> str | None:
    """The catalogue id a GPU is written as (its id, or its name in any case: 'RTX 4070 Super'
    is rtx-4070-super; a name several cards share gives the first), or None when it names no
    catalogue GPU."""
    wanted = _slug(text)
    for card in gpu_cards():
        if wanted in (card.id, _slug(card.name)):
            return card.id
    return None
