"""Catalogue GPU cards: VRAM, bandwidth and typical desktop use, to plan without the hardware."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mtpstudio.core.errors import CatalogError
from mtpstudio.core.units import MIB

DEFAULT_GPU_CARD = "rtx-4070-super"
"""The card the demo plans for: a common 12 GB desktop GPU."""

_RESOURCE = "catalog/gpus.json"
_SCHEMA = 1

Vendor = Literal["nvidia", "amd"]


class GpuCard(BaseModel):
    """One catalogue GPU, with every size in bytes.

    ``vram_bytes`` is the total the driver reports (NVML ``memory.total`` or amdgpu
    ``mem_info_vram_total``), which is a little under the nominal size on many cards.
    ``desktop_vram_bytes`` is a typical KDE Plasma Wayland session on this card and
    ``llvmpipe_desktop_vram_bytes`` the same desktop rendered in software.
    ``driver_overhead_bytes`` estimates the compute runtime's own context (CUDA), or is
    ``None`` where no source gives a figure.
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
    pcie_gen: int = Field(ge=1)
    pcie_lanes: int = Field(ge=1)
    desktop_vram_bytes: int = Field(ge=0)
    llvmpipe_desktop_vram_bytes: int = Field(ge=0)
    driver_overhead_bytes: int | None = Field(default=None, ge=0)
    desktop_note: str = ""

    @property
    def vram_mib(self) -> int:
        return self.vram_bytes // MIB

    @property
    def label(self) -> str:
        """Short display name, e.g. ``NVIDIA GeForce RTX 4070 SUPER (12 GB)``."""
        return f"{self.name} ({self.nominal_vram_gb} GB)"


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
    try:
        return GpuCard.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CatalogError(
            f"the GPU catalogue entry {record.get('id')!r} is invalid at {where}: {first['msg']}"
        ) from None


@cache
def gpu_cards() -> tuple[GpuCard, ...]:
    """All catalogue GPUs, in catalogue order (read once from the packaged JSON)."""
    try:
        text = resources.files("mtpstudio.resources").joinpath(_RESOURCE).read_text("utf-8")
        document = json.loads(text)
    except (OSError, ValueError) as exc:
        raise CatalogError(
            f"cannot read the GPU catalogue ({_RESOURCE}): {exc}",
            hint="Reinstall mtpstudio; its data files are missing or damaged.",
        ) from None
    if not isinstance(document, dict) or document.get("schema") != _SCHEMA:
        raise CatalogError(f"the GPU catalogue is not schema {_SCHEMA}")
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
    known = ", ".join(card.id for card in gpu_cards())
    raise CatalogError(
        f"unknown GPU '{card_id}'; known: {known}",
        hint="Pick one of the listed catalogue ids, or use 'auto' to detect the real GPU.",
    )
