"""The detection report's pydantic models: GPUs, VRAM users, display, host, engines, problems."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mtpstudio.core.detect.processes import ProcessCategory
from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.plan.choices import EngineFlavour

REPORT_SCHEMA_VERSION = 1


class _Model(BaseModel):
    # Validators are built at a model's first use: a launch reads only the engine entries.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class GpuVendor(StrEnum):
    """Who made a GPU (from the PCI vendor id or NVML)."""

    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"
    OTHER = "other"


class GpuMemory(_Model):
    """Device memory in bytes; None when the source cannot tell."""

    total_bytes: int | None = Field(default=None, description="Memory the device has.")
    used_bytes: int | None = Field(
        default=None,
        description="In use by processes and the driver (NVML v2 excludes reserved_bytes; "
        "NVML v1 includes it).",
    )
    free_bytes: int | None = Field(default=None, description="Free for new allocations.")
    reserved_bytes: int | None = Field(
        default=None, description="Held by the driver/firmware (NVML v2 only)."
    )
    source: str | None = Field(
        default=None, description="Where the numbers came from: 'nvml v2', 'nvml v1', 'sysfs'."
    )


class PcieLink(_Model):
    """PCIe link generation and width, now and at most."""

    current_gen: int | None = None
    max_gen: int | None = None
    current_width: int | None = None
    max_width: int | None = None


class Connector(_Model):
    """A display connector of a DRM card (/sys/class/drm/cardN-NAME)."""

    card: str = Field(description="DRM card, e.g. 'card1'.")
    name: str = Field(description="Connector name, e.g. 'DP-1', 'eDP-1', 'HDMI-A-1'.")
    status: str = Field(description="'connected', 'disconnected' or 'unknown'.")
    enabled: bool | None = Field(default=None, description="Lit by the compositor.")

    @property
    def active(self) -> bool:
        return self.status == "connected" and self.enabled is not False


class GpuInfo(_Model):
    """One GPU, vendor-neutral."""

    id: str = Field(
        description="Device id as the engine names it: 'CUDA0' (NVIDIA, CUDA order), "
        "'ROCm0' (AMD discrete), else the DRM card, e.g. 'card0'."
    )
    vendor: GpuVendor
    name: str
    integrated: bool = Field(description="Shares system memory (iGPU/APU), heuristic for AMD.")
    pci_bus_id: str | None = Field(default=None, description="e.g. '0000:01:00.0'.")
    pci_vendor_id: str | None = Field(default=None, description="e.g. '0x10de'.")
    pci_device_id: str | None = Field(default=None, description="e.g. '0x2783'.")
    pci_class: str | None = Field(default=None, description="e.g. '0x030000'.")
    uuid: str | None = None
    drm_card: str | None = Field(default=None, description="e.g. 'card1'.")
    render_node: str | None = Field(default=None, description="e.g. 'renderD128'.")
    driver: str | None = Field(default=None, description="Kernel driver: nvidia, amdgpu, i915, xe.")
    driver_version: str | None = None
    cuda_driver_version: str | None = Field(default=None, description="e.g. '12.8'.")
    compute_capability: str | None = Field(default=None, description="e.g. '8.9'.")
    memory: GpuMemory = Field(default_factory=GpuMemory)
    pcie: PcieLink | None = None
    boot_vga: bool | None = Field(default=None, description="Firmware's boot display device.")
    display_active: bool | None = Field(
        default=None, description="NVML: a display/framebuffer is initialised on it."
    )
    display_mode: bool | None = Field(
        default=None, description="NVML: a monitor is physically attached."
    )
    connectors: list[Connector] = Field(default_factory=list)
    drives_display: bool = Field(
        default=False, description="A connected connector is lit, or NVML says a display is active."
    )


class GpuProcess(_Model):
    """A process holding memory on a GPU."""

    gpu_id: str
    pid: int
    name: str | None = Field(default=None, description="comm; None when the process is gone.")
    command: str | None = Field(default=None, description="Command line from /proc.")
    used_bytes: int | None = Field(
        default=None, description="Device memory it holds; None when the driver does not say."
    )
    kinds: list[str] = Field(
        default_factory=list, description="'graphics', 'compute' (NVML) or 'drm' (fdinfo)."
    )
    category: ProcessCategory = ProcessCategory.OTHER
    regions: dict[str, int] = Field(
        default_factory=dict, description="DRM fdinfo resident bytes per memory region."
    )


class DisplayInfo(_Model):
    """Which GPU drives the display, and the desktop session around it."""

    session_type: str | None = Field(
        default=None, description="XDG_SESSION_TYPE: wayland, x11, tty."
    )
    desktop: str | None = Field(default=None, description="XDG_CURRENT_DESKTOP, e.g. 'KDE'.")
    display_manager: str | None = Field(default=None, description="e.g. 'sddm', 'gdm'.")
    kwin_compositing: str | None = Field(
        default=None, description="KWin 'Compositing Type' over D-Bus: OpenGL, QPainter, ..."
    )
    kwin_renderer: str | None = Field(default=None, description="KWin's OpenGL renderer string.")
    display_gpu_ids: list[str] = Field(default_factory=list, description="GPUs driving a display.")
    connectors: list[Connector] = Field(
        default_factory=list, description="Connected connectors of every card."
    )


class HostInfo(_Model):
    """CPU, memory and OS of this machine."""

    cpu_model: str | None = None
    physical_cores: int | None = None
    logical_cpus: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    os_name: str | None = None
    kernel: str | None = None


class FlagProbeInfo(_Model):
    """How one flag answered the ``<flag> <value> --version`` probe."""

    flag: str
    accepted: bool
    args: list[str] = Field(default_factory=list, description="The values that were tried last.")
    detail: str | None = Field(default=None, description="Why it was not accepted.")


class EngineInfo(_Model):
    """A llama-server build, identified and probed."""

    path: str = Field(description="Where it was found.")
    real_path: str = Field(description="The resolved file (cache key with size and mtime).")
    found_in: str = Field(description="Which search place found it.")
    flavour: EngineFlavour | None = Field(default=None, description="None when not recognised.")
    version: str | None = None
    build_number: int | None = None
    commit: str | None = None
    compiler: str | None = None
    build_target: str | None = None
    version_text: str | None = Field(default=None, description="First line of --version.")
    backends: list[Backend] = Field(default_factory=list)
    devices: list[str] = Field(
        default_factory=list, description="--list-devices lines, e.g. 'CUDA0: NVIDIA ...'."
    )
    companions: dict[str, str] = Field(
        default_factory=dict, description="llama-fit-params / llama-bench next to the binary."
    )
    accepted_flags: list[str] = Field(default_factory=list)
    rejected_flags: list[str] = Field(default_factory=list)
    flags: list[FlagProbeInfo] = Field(default_factory=list)
    spec_types: list[str] = Field(default_factory=list, description="Accepted --spec-type values.")
    mtp: MtpSupport = MtpSupport.UNAVAILABLE
    era: str | None = Field(
        default=None,
        description="The era mtpstudio plans it as, e.g. 'ik_llama.cpp 8337e4c (2026-08-15)'.",
    )
    size: int = 0
    mtime_ns: int = 0
    from_cache: bool = False
    problems: list[str] = Field(default_factory=list)

    @property
    def usable(self) -> bool:
        return self.flavour is not None

    def to_build(self) -> EngineBuild | None:
        """The adapters' view of this build; None when the flavour is unknown."""
        if self.flavour is None:
            return None
        return EngineBuild(
            binary=Path(self.path),
            flavour=self.flavour,
            version=self.version or "unknown",
            build_number=self.build_number,
            commit=self.commit,
            backends=tuple(self.backends) or (Backend.CPU,),
            accepted_flags=frozenset(self.accepted_flags),
            rejected_flags=frozenset(self.rejected_flags),
            spec_types=tuple(self.spec_types),
            mtp=self.mtp,
            companions={k: Path(v) for k, v in self.companions.items()},
            size=self.size,
            mtime_ns=self.mtime_ns,
        )


class DetectionReport(_Model):
    """Everything ``mtpstudio detect`` found; ``problems`` says what could not be found and why."""

    schema_version: Literal[1] = 1
    gpus: list[GpuInfo] = Field(default_factory=list)
    processes: list[GpuProcess] = Field(default_factory=list)
    display: DisplayInfo = Field(default_factory=DisplayInfo)
    host: HostInfo = Field(default_factory=HostInfo)
    engines: list[EngineInfo] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)

    def gpu(self, gpu_id: str) -> GpuInfo | None:
        """The GPU with this id, if detected."""
        return next((g for g in self.gpus if g.id == gpu_id), None)

    def builds(self) -> list[EngineBuild]:
        """The recognised engine builds, for the adapters."""
        return [b for b in (e.to_build() for e in self.engines) if b is not None]
