"""Resolve the Plan's target device (cpu, catalogue GPU, detected GPU) to a budget TargetDevice."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.errors import PlanError
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.model.catalog.gpus import GpuCard, gpu_card
from mtpstudio.core.plan import DesktopReclaim, Plan
from mtpstudio.core.units import MIB

# What the NVIDIA application profile (GLVidHeapReuseRatio=0) leaves of the desktop's VRAM: it
# stops the driver's heap growth (kwin_wayland 110 MB -> 2.5 GB, egl-wayland#126), so KDE keeps
# about its start-up size: kwin_wayland about 110 MB at start plus plasmashell alone 309 MiB
# (ollama#15179). Both figures: shared/reference/peers.md §4.3 "Desktop / compositor share".
NVIDIA_PROFILE_DESKTOP_BYTES = 110_000_000 + 309 * MIB

# Which reclamations apply to a card of each vendor (the profile is an NVIDIA driver setting,
# peers.md §5 item 3; the iGPU and llvmpipe sessions work for any card, desktop.md §2).
VENDOR_RECLAIMS: dict[str | None, tuple[DesktopReclaim, ...]] = {
    "nvidia": tuple(DesktopReclaim),
    None: (DesktopReclaim.NONE,),
}
ANY_VENDOR_RECLAIMS = (DesktopReclaim.NONE, DesktopReclaim.IGPU, DesktopReclaim.LLVMPIPE)


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
        return min(card_desktop, NVIDIA_PROFILE_DESKTOP_BYTES)
    return card_desktop


def reclaims_for(vendor: str | None) -> tuple[DesktopReclaim, ...]:
    """The desktop reclamations that apply to a card of ``vendor`` (None: no GPU, none)."""
    return VENDOR_RECLAIMS.get(vendor, ANY_VENDOR_RECLAIMS)


def check_reclaim(reclaim: DesktopReclaim, device: TargetDevice) -> None:
    """Refuse a reclamation that does not apply to the target's vendor.

    Raises:
        PlanError: e.g. the NVIDIA profile for an AMD card.
    """
    if not device.is_gpu or device.vendor is None:
        return  # no card to judge (a CPU plan may still render the session files)
    allowed = reclaims_for(device.vendor)
    if reclaim not in allowed:
        vendor = {"amd": "AMD", "intel": "Intel"}.get(device.vendor, device.vendor)
        raise PlanError(
            f"--desktop {reclaim.value} does not apply to an {vendor} card ({device.name})",
            hint="Choose one of: " + ", ".join(r.value for r in allowed) + ".",
        )


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
        vendor=card.vendor,
        compute_capability=card.compute_capability,
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
