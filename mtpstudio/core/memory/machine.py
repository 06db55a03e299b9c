"""What detection found, in the terms the budget and the adapters use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.catalog.gpus import cuda_context_for
from mtpstudio.core.detect.models import DetectionReport, GpuInfo, GpuVendor
from mtpstudio.core.detect.processes import ProcessCategory
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.plan.schema import Plan

DESKTOP_CATEGORIES = frozenset({ProcessCategory.COMPOSITOR, ProcessCategory.DESKTOP_SHELL})
# Other GPUs (ROCm/HIP, Vulkan): the runtime overhead other calculators assume, "about 0.5 GB
# fixed, real usage may be 200-800 MB" (peers.md §4.3, ggufvram.radicchio.page).
GPU_RUNTIME_BYTES = 500_000_000


@dataclass(frozen=True)
class MachineFacts:
    """Host RAM, the GPUs as budget devices, and the engine builds found."""

    host: HostSpec
    gpus: tuple[TargetDevice, ...]
    builds: tuple[EngineBuild, ...]
    problems: tuple[str, ...] = ()
    igpu_card: str | None = None

    def build_for(self, plan: Plan) -> EngineBuild | None:
        """The probed build the plan names (by path), else the first of its flavour."""
        if plan.engine.binary is not None:
            wanted = Path(plan.engine.binary).resolve()
            for build in self.builds:
                if Path(build.binary).resolve() == wanted:
                    return build
            return None
        return next((b for b in self.builds if b.flavour is plan.engine.flavour), None)


def gpu_target(gpu: GpuInfo, report: DetectionReport) -> TargetDevice:
    """A detected GPU with what the desktop and other processes hold on it now."""
    processes = [p for p in report.processes if p.gpu_id == gpu.id]
    desktop = sum(p.used_bytes or 0 for p in processes if p.category in DESKTOP_CATEGORIES)
    listed_other = sum(p.used_bytes or 0 for p in processes if p.category not in DESKTOP_CATEGORIES)
    used = gpu.memory.used_bytes
    other = max(listed_other, used - desktop) if used is not None else listed_other
    return TargetDevice(
        id=gpu.id,
        name=gpu.name,
        total_bytes=gpu.memory.total_bytes,
        desktop_bytes=desktop,
        other_bytes=other,
        driver_overhead_bytes=driver_bytes(gpu),
        vendor=gpu.vendor.value,
        compute_capability=gpu.compute_capability,
    )


def driver_bytes(gpu: GpuInfo) -> int:
    """What the driver holds on ``gpu`` outside every process: the engine's CUDA context (the
    catalogue's figure for the card, or the closest published one) and the memory NVML v2
    reports reserved (counted in the total, never free)."""
    if gpu.vendor is not GpuVendor.NVIDIA:
        return GPU_RUNTIME_BYTES
    context, _source = cuda_context_for(gpu.name, gpu.memory.total_bytes)
    return context + (gpu.memory.reserved_bytes or 0)


def machine_facts(report: DetectionReport) -> MachineFacts:
    """Convert a DetectionReport; integrated GPUs are not offered as targets."""
    host = HostSpec(report.host.ram_total_bytes, report.host.ram_available_bytes)
    gpus = tuple(gpu_target(g, report) for g in report.gpus if not g.integrated)
    return MachineFacts(
        host, gpus, tuple(report.builds()), tuple(report.problems), igpu_card_path(report)
    )


def igpu_card_path(report: DetectionReport) -> str | None:
    """The iGPU's DRM node, as the stable by-path link when the PCI address is known."""
    for gpu in report.gpus:
        if gpu.integrated and gpu.drm_card:
            if gpu.pci_bus_id:
                return f"/dev/dri/by-path/pci-{gpu.pci_bus_id}-card"
            return f"/dev/dri/{gpu.drm_card}"
    return None
