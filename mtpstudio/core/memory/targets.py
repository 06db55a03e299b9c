"""Resolve the Plan's target device (cpu, catalogue GPU, detected GPU) to a budget TargetDevice."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mtpstudio.core.catalog.gpus import GpuCard, gpu_card
from mtpstudio.core.errors import PlanError
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.schema import Plan, RpcServer
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


def rpc_target(index: int, server: RpcServer) -> TargetDevice:
    """An rpc-server endpoint as a budget device (``RPC<index>``, the engine's name): its size
    is what it reported when probed (or what the plan gives); what it reported in use already
    counts as other processes."""
    if server.memory_mib is None:
        raise PlanError(
            f"the RPC endpoint {server.endpoint} has no known memory size",
            hint=f"Probe it (mtpstudio detect --rpc {server.endpoint}) so the plan records "
            f"what it reports, or give the size yourself (--rpc {server.endpoint}=MiB).",
        )
    total = server.memory_mib * MIB
    free = total if server.free_mib is None else server.free_mib * MIB
    return TargetDevice(
        id=f"RPC{index}",
        name=f"rpc-server {server.endpoint}",
        total_bytes=total,
        other_bytes=total - free,
        vendor="nvidia" if server.backend == "CUDA" else None,
        rpc_endpoint=server.endpoint,
    )


def _local_index(device: TargetDevice) -> tuple[int, str]:
    digits = "".join(c for c in device.id if c.isdigit())
    return (int(digits) if digits else 0, device.id)


@dataclass(frozen=True)
class ResolvedDevices:
    """Every device a split plan runs on, in the engine's order (RPC servers, then local GPUs
    by their index), and whether ``-dev`` must name them (the machine has other GPUs)."""

    devices: tuple[TargetDevice, ...]
    restrict: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.devices)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(
            "RPC" if d.rpc_endpoint else "CUDA" if d.is_cuda else "GPU" for d in self.devices
        )


def resolve_devices(
    plan: Plan, first: TargetDevice, detected: list[TargetDevice] | None = None
) -> ResolvedDevices:
    """The plan's devices: its RPC endpoints, ``first`` (the resolved ``device``) and its
    further GPUs (detected ids, else catalogue cards numbered after the first, without a
    desktop: the display is on the first card).

    Raises:
        PlanError: a further GPU is neither detected nor a catalogue card, is the CPU, or an
            RPC endpoint has no known size.
    """
    gpus = detected or []
    rpc = tuple(rpc_target(i, s) for i, s in enumerate(plan.split.rpc))
    if not first.is_gpu and not plan.split.gpus:
        local: list[TargetDevice] = []  # RPC devices beside the CPU
    elif not plan.split.gpus:
        local = [first]
    else:
        if not first.is_gpu:
            raise PlanError("a plan split over several devices needs a GPU as its first device")
        local = [first]
        for name in plan.split.gpus:
            found = next((g for g in gpus if g.id.lower() == name.lower()), None)
            if found is None:
                card = gpu_card(name)  # raises CatalogError naming the known ids
                base = catalogue_target(card, DesktopReclaim.NONE)
                prefix = "CUDA" if card.vendor == "nvidia" else "GPU"
                found = replace(base, id=f"{prefix}{len(local)}", desktop_bytes=0)
            local.append(found)
    detected_ids = {g.id for g in gpus}
    if all(d.id in detected_ids for d in local):
        local.sort(key=_local_index)
    restrict = bool(detected_ids) and len([d for d in local if d.id in detected_ids]) < len(gpus)
    if not rpc and not local:
        raise PlanError("the plan names no device to split over")
    return ResolvedDevices((*rpc, *local), restrict and bool(plan.split.gpus or plan.split.rpc))
