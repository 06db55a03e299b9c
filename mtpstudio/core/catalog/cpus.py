"""Catalogue CPUs: the cores, clocks, vector units and memory of the CPUs people pair with 8-24 GB
cards, so a plan can be for another PC than this one (``core.speed.host_target``)."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mtpstudio.core.catalog.resource import catalogue_document
from mtpstudio.core.errors import CatalogError

_RESOURCE = "catalog/cpus.json"
_SCHEMA = 1

PUBLISHED_CPU = "ryzen-7-9700x"
"""The CPU of the published setup the demo plans (reference/world-2026-12.md §1)."""


class CpuSpec(BaseModel):
    """One catalogue CPU, as its vendor specifies it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,40}$")
    name: str = Field(min_length=1, max_length=80)
    vendor: Literal["AMD", "Intel"]
    form: Literal["desktop", "laptop", "workstation"]
    microarchitecture: str = Field(max_length=80)
    performance_cores: int = Field(gt=0, le=256)
    efficiency_cores: int = Field(ge=0, le=256)
    threads: int = Field(gt=0, le=512)
    base_ghz: float = Field(gt=0, le=10)
    boost_ghz: float = Field(gt=0, le=10)
    simd: Literal["avx512", "avx2"]
    simd_datapath_bits: Literal[256, 512]
    fma_units_per_core: int = Field(gt=0, le=8)
    memory_type: str = Field(max_length=16)
    memory_channels: int = Field(gt=0, le=16)
    memory_mts_official: int = Field(gt=0, le=20000)
    memory_mts_common: int | None = Field(default=None, gt=0, le=20000)
    l3_mib: float = Field(ge=0)
    tdp_w: int = Field(gt=0)
    released: str = Field(max_length=10)
    note: str = ""

    @property
    def cores(self) -> int:
        """All physical cores (the engines' default thread count counts these)."""
        return self.performance_cores + self.efficiency_cores

    @property
    def memory_mts(self) -> int:
        """The RAM speed a plan assumes without ``--ram``: what its owners commonly run."""
        return self.memory_mts_common or self.memory_mts_official

    @property
    def label(self) -> str:
        cores = (
            f"{self.performance_cores}P+{self.efficiency_cores}E"
            if self.efficiency_cores
            else (f"{self.performance_cores} cores")
        )
        return f"{self.name} ({cores}, {self.microarchitecture})"


@cache
def _document() -> dict[str, Any]:
    return catalogue_document(_RESOURCE, _SCHEMA, "the CPU catalogue")


@cache
def cpu_specs() -> tuple[CpuSpec, ...]:
    """Every catalogue CPU, in the catalogue's order."""
    records = _document().get("cpus")
    if not isinstance(records, list) or not records:
        raise CatalogError("the CPU catalogue lists no CPU")
    out = []
    for record in records:
        try:
            out.append(CpuSpec.model_validate(record))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            name = record.get("id") if isinstance(record, dict) else None
            raise CatalogError(
                f"the CPU catalogue entry {name!r} is invalid at {where}: {first['msg']}"
            ) from None
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise CatalogError("the CPU catalogue names a CPU twice")
    return tuple(out)


def catalogue_source() -> str:
    source = _document().get("source")
    return source if isinstance(source, str) else ""


def find_cpu(text: str) -> CpuSpec | None:
    """The catalogue CPU ``text`` names: its id or its name, in any case."""
    wanted = text.strip().casefold()
    for spec in cpu_specs():
        if wanted in (spec.id, spec.name.casefold(), spec.name.casefold().removeprefix("amd ")):
            return spec
        if wanted == spec.name.casefold().removeprefix("intel "):
            return spec
    return None


def cpu_ids() -> str:
    return ", ".join(c.id for c in cpu_specs())


def cpu_spec(text: str) -> CpuSpec:
    """The catalogue CPU ``text`` names.

    Raises:
        CatalogError: no such CPU; the message lists the catalogue's ids.
    """
    found = find_cpu(text)
    if found is None:
        raise CatalogError(
            f"unknown CPU {text!r}; catalogue ids: {cpu_ids()}",
            hint="Give one of the ids above, or leave --cpu out to plan for this computer.",
        )
    return found
