"""Resolve the Plan's target device (cpu, catalogue GPU, detected GPU) to a budget TargetDevice."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.model.catalog.gpus import GpuCard, gpu_card
from mtpstudio.core.plan import DesktopReclaim, Plan

# What each reclamation leaves of the desktop's VRAM on the card: the NVIDIA profile stops the
# compositor's heap growth (about half is typical, desktop.md §3); the iGPU takes the display.
NVIDIA_PROFILE_SHARE = 0.5


@dataclass(frozen=True)
class ResolvedTarget:
    """The device to plan for, the host, and how it was chosen (one sentence)."""

    device: TargetDevice
    host: HostSpec
    source: str


def desktop_after_reclaim(card_desktop: int, llvmpipe_desktop: int, reclaim: DesktopReclaim) -> int:
    """The desktop's VRAM on the card after the chosen reclamation."""
    if reclaim is DesktopReclaim.LLVMPIPE:
        return llvmpipe_desktop
    if reclaim is DesktopReclaim.IGPU:
        return 0
    if reclaim is DesktopReclaim.NVIDIA_PROFILE:
        return int(card_desktop * NVIDIA_PROFILE_SHARE)
    return card_desktop


def catalogue_target(card: GpuCard, reclaim: DesktopReclaim) -> TargetDevice:
    """A catalogue card as a budget device, with its typical desktop use."""
    return TargetDevice(
        id="CUDA0" if card.vendor == "nvidia" else "GPU0",
        name=f"{card.name} (catalogue)",
        total_bytes=card.vram_bytes,
        desktop_bytes=desktop_after_reclaim(
            card.desktop_vram_bytes, card.llvmpipe_desktop_vram_bytes, reclaim
        ),
        driver_overhead_bytes=card.driver_overhead_bytes or 0,
    )


def cpu_target(host: HostSpec, name: str = "CPU") -> TargetDevice:
    """A CPU-only plan: one device ``CPU`` sized by system RAM."""
    return TargetDevice(id="CPU", name=name, total_bytes=host.total_bytes)


def resolve_target(
    plan: Plan, host: HostSpec, detected: list[TargetDevice] | None = None
) -> ResolvedTarget:
    """Turn ``plan.device`` into a TargetDevice.

    ``detected`` are the GPUs detection found (already carrying desktop/other usage);
    ``auto`` takes the one with the most memory, or the CPU when there is none.
    """
    device = plan.device
    gpus = detected or []
    if device == "cpu":
        return ResolvedTarget(cpu_target(host), host, "CPU only (--gpu cpu)")
    if device == "auto":
        if gpus:
            best = max(gpus, key=lambda g: g.total_bytes or 0)
            return ResolvedTarget(best, host, f"detected {best.id}: {best.name}")
        return ResolvedTarget(
            cpu_target(host),
            host,
            "no GPU detected: planning for the CPU (use --gpu <catalogue id> to plan for a card)",
        )
    for gpu in gpus:
        if gpu.id.lower() == device.lower():
            return ResolvedTarget(gpu, host, f"detected {gpu.id}: {gpu.name}")
    card = gpu_card(device)  # raises CatalogError naming the known ids
    return ResolvedTarget(
        catalogue_target(card, plan.desktop), host, f"catalogue card {card.id}: {card.name}"
    )
