"""Desktop VRAM: who holds it, and the ways to take it back, cheapest first (pure).

The figures come from detection (per-process VRAM on the dedicated GPUs); when nothing was
detected they come from the plan's catalogue card (a typical KDE Plasma desktop). What each
option would give back uses the same rule as the memory budget (``desktop_after_reclaim``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.catalog.gpus import GpuCard
from mtpstudio.core.desktop.session_files import SessionVariant
from mtpstudio.core.detect.models import DetectionReport, GpuInfo, GpuProcess, GpuVendor
from mtpstudio.core.memory.machine import DESKTOP_CATEGORIES
from mtpstudio.core.memory.targets import desktop_after_reclaim
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.units import MIB

# An llvmpipe session still keeps scanout and console framebuffers on the card (desktop.md
# §2.2; about 130 MB measured on KDE Wayland, the catalogue's llvmpipe_desktop_vram figure).
LLVMPIPE_RESIDUAL_BYTES = 130 * MIB
SWITCH_BACK = {"wayland-sessions": "Plasma (Wayland)", "xsessions": "Plasma (X11)"}
"""The session to pick at the login screen to go back, per session folder kind."""


@dataclass(frozen=True)
class DesktopUsage:
    """The desktop's VRAM on the dedicated GPUs: per process, per category and in total.

    ``measured`` is False when the figure is the catalogue card's typical desktop (nothing was
    detected here); ``source`` says where the figure comes from in one phrase.
    """

    processes: tuple[GpuProcess, ...]
    total_bytes: int
    by_category: tuple[tuple[str, int], ...]
    measured: bool
    source: str
    llvmpipe_residual_bytes: int = LLVMPIPE_RESIDUAL_BYTES


def desktop_usage(report: DetectionReport | None, card: GpuCard | None = None) -> DesktopUsage:
    """What the desktop holds now (detection), else the catalogue card's typical figure."""
    residual = card.llvmpipe_desktop_vram_bytes if card is not None else LLVMPIPE_RESIDUAL_BYTES
    dedicated = {g.id for g in report.gpus if not g.integrated} if report is not None else set()
    processes = tuple(
        sorted(
            (
                p
                for p in (report.processes if report is not None else [])
                if p.category in DESKTOP_CATEGORIES and p.gpu_id in dedicated
            ),
            key=lambda p: (-(p.used_bytes or 0), p.pid),
        )
    )
    if dedicated:
        totals: dict[str, int] = {}
        for proc in processes:
            totals[proc.category.value] = totals.get(proc.category.value, 0) + (
                proc.used_bytes or 0
            )
        total = sum(totals.values())
        return DesktopUsage(
            processes,
            total,
            tuple(sorted(totals.items(), key=lambda kv: -kv[1])),
            True,
            "measured now",
            min(residual, total),
        )
    if card is not None:
        return DesktopUsage(
            (),
            card.desktop_vram_bytes,
            (("typical desktop", card.desktop_vram_bytes),),
            False,
            f"typical for KDE Plasma on the catalogue {card.label} (no GPU detected here)",
            residual,
        )
    return DesktopUsage((), 0, (), False, "no GPU detected and no catalogue card chosen", residual)


@dataclass(frozen=True)
class ReclaimOption:
    """One way to take desktop VRAM back.

    Attributes:
        kind: the Plan's ``desktop`` value this option stands for.
        rank: 1 = cheapest (least change for the user).
        title: a few words.
        cost: what it costs the user, one sentence.
        likely_saved_bytes: what it would likely give back on the card (an estimate).
        available: whether it applies to this computer.
        detail: what to do / why not, one or two sentences (e.g. which connector to use).
        variant: the login session it installs (None for the NVIDIA profile).
    """

    kind: DesktopReclaim
    rank: int
    title: str
    cost: str
    likely_saved_bytes: int
    available: bool
    detail: str
    variant: SessionVariant | None = None


def integrated_gpus(report: DetectionReport | None) -> list[GpuInfo]:
    return [g for g in report.gpus if g.integrated] if report is not None else []


def default_variant(report: DetectionReport) -> tuple[SessionVariant, str]:
    """The session detection calls for, and why (iGPU first, software rendering otherwise)."""
    igpus = integrated_gpus(report)
    if any(g.drives_display for g in igpus):
        return SessionVariant.WAYLAND_IGPU, "the display is on the iGPU: Plasma can stay there"
    if igpus:
        return SessionVariant.WAYLAND_LLVMPIPE, (
            "an iGPU is present but no monitor is lit on it: with the monitor on the "
            "motherboard's output, `--variant igpu` keeps hardware rendering; until then, "
            "software rendering"
        )
    if report.display.display_gpu_ids:
        shown = ", ".join(report.display.display_gpu_ids)
        return SessionVariant.WAYLAND_LLVMPIPE, f"the display is on {shown}: software rendering"
    return SessionVariant.WAYLAND_LLVMPIPE, (
        "no GPU drives a display here (none detected): software rendering, the safe choice"
    )


def llvmpipe_variant(report: DetectionReport | None) -> SessionVariant:
    """The software-rendered session for this desktop: X11 when the session is X11."""
    session = (report.display.session_type or "").lower() if report is not None else ""
    return SessionVariant.X11_LLVMPIPE if session == "x11" else SessionVariant.WAYLAND_LLVMPIPE


def _connector_advice(igpu: GpuInfo) -> str:
    names = [c.name for c in igpu.connectors]
    lit = [c.name for c in igpu.connectors if c.active]
    if lit:
        return (
            f"The monitor is already on the iGPU ({', '.join(lit)}): install the iGPU session "
            "so Plasma renders there and leaves the graphics card alone."
        )
    if names:
        return (
            f"Plug the monitor into the motherboard's output ({' or '.join(names)} of "
            f"{igpu.name}), enable the iGPU in the firmware if needed, then install the iGPU "
            "session."
        )
    return (
        f"Plug the monitor into the motherboard's video output ({igpu.name}); no connector of "
        "it was listed, so the iGPU may need enabling in the firmware first."
    )


def reclaim_options(
    report: DetectionReport | None, card: GpuCard | None = None
) -> list[ReclaimOption]:
    """The three options ranked by cost, with what each would likely give back."""
    usage = desktop_usage(report, card)
    total = usage.total_bytes
    residual = usage.llvmpipe_residual_bytes

    def saved(kind: DesktopReclaim) -> int:
        return max(0, total - desktop_after_reclaim(total, residual, kind))

    gpus = report.gpus if report is not None else []
    nvidia = any(g.vendor is GpuVendor.NVIDIA and not g.integrated for g in gpus) or (
        not gpus and card is not None and card.vendor == "nvidia"
    )
    igpus = integrated_gpus(report)
    variant = llvmpipe_variant(report)
    options = [
        ReclaimOption(
            DesktopReclaim.NVIDIA_PROFILE,
            1,
            "NVIDIA driver profile",
            "Nothing visible changes; the compositor returns freed memory instead of pooling "
            "it (GLVidHeapReuseRatio=0). Takes effect at the next login.",
            saved(DesktopReclaim.NVIDIA_PROFILE),
            nvidia,
            "Installs one JSON file in /etc/nvidia/nvidia-application-profiles-rc.d."
            if nvidia
            else "Only for the NVIDIA driver: no NVIDIA GPU was detected.",
        ),
        ReclaimOption(
            DesktopReclaim.IGPU,
            2,
            "Display on the iGPU",
            "Move the monitor cable; the integrated GPU draws the desktop (hardware "
            "rendering, no CPU cost) and the graphics card keeps nothing.",
            saved(DesktopReclaim.IGPU),
            bool(igpus),
            _connector_advice(igpus[0]) if igpus else "No integrated GPU was detected.",
            SessionVariant.WAYLAND_IGPU,
        ),
        ReclaimOption(
            DesktopReclaim.LLVMPIPE,
            3,
            "Software-rendered (llvmpipe) session",
            "The CPU draws the desktop: animations are slower and screen sharing does not "
            "work in this session; you pick it (or your usual one) at the login screen.",
            saved(DesktopReclaim.LLVMPIPE),
            True,
            f"Installs the '{variant.value}' login session (variant from detection: "
            f"{'an X11 desktop' if variant is SessionVariant.X11_LLVMPIPE else 'Wayland'}).",
            variant,
        ),
    ]
    return sorted(options, key=lambda o: o.rank)


def session_display_name(desktop_text: str) -> str:
    """The ``Name=`` of a session ``.desktop`` file (what the login screen shows)."""
    for line in desktop_text.splitlines():
        if line.startswith("Name="):
            return line.removeprefix("Name=")
    return ""
