"""Desktop VRAM options ranked by cost: what each gives back, when it applies, which session."""

from __future__ import annotations

from mtpstudio.core.catalog.gpus import gpu_card
from mtpstudio.core.desktop.reclaim import (
    default_variant,
    desktop_usage,
    llvmpipe_variant,
    reclaim_options,
    session_display_name,
)
from mtpstudio.core.desktop.session_files import SessionVariant, render_session_files
from mtpstudio.core.detect.models import (
    Connector,
    DetectionReport,
    DisplayInfo,
    GpuInfo,
    GpuMemory,
    GpuProcess,
    GpuVendor,
)
from mtpstudio.core.detect.processes import ProcessCategory
from mtpstudio.core.memory.targets import NVIDIA_PROFILE_DESKTOP_BYTES
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.units import MIB


def report(
    *, igpu_lit: bool = False, session: str = "wayland", amd: bool = False
) -> DetectionReport:
    dgpu = GpuInfo(
        id="ROCm0" if amd else "CUDA0",
        vendor=GpuVendor.AMD if amd else GpuVendor.NVIDIA,
        name="dGPU",
        integrated=False,
        memory=GpuMemory(total_bytes=16000 * MIB, used_bytes=2000 * MIB),
        drives_display=not igpu_lit,
    )
    igpu = GpuInfo(
        id="card1",
        vendor=GpuVendor.INTEL,
        name="Intel UHD 770",
        integrated=True,
        drm_card="card1",
        connectors=[
            Connector(card="card1", name="DP-2", status="connected" if igpu_lit else "disconnected",
                      enabled=igpu_lit),
            Connector(card="card1", name="HDMI-A-2", status="disconnected"),
        ],
        drives_display=igpu_lit,
    )  # fmt: skip
    procs = [
        GpuProcess(gpu_id=dgpu.id, pid=10, name="kwin_wayland", used_bytes=1500 * MIB,
                   category=ProcessCategory.COMPOSITOR),
        GpuProcess(gpu_id="card1", pid=10, name="kwin_wayland", used_bytes=90 * MIB,
                   category=ProcessCategory.COMPOSITOR),  # the iGPU's share is not the point
        GpuProcess(gpu_id=dgpu.id, pid=11, name="plasmashell", used_bytes=None,
                   category=ProcessCategory.DESKTOP_SHELL),
        GpuProcess(gpu_id=dgpu.id, pid=12, name="llama-server", used_bytes=9000 * MIB,
                   category=ProcessCategory.INFERENCE_ENGINE),
    ]  # fmt: skip
    return DetectionReport(
        gpus=[dgpu, igpu],
        processes=procs,
        display=DisplayInfo(
            session_type=session, display_gpu_ids=[igpu.id if igpu_lit else dgpu.id]
        ),
    )


def test_usage_counts_desktop_processes_on_the_dedicated_gpu_only() -> None:
    usage = desktop_usage(report())
    assert usage.measured and usage.total_bytes == 1500 * MIB
    assert [p.name for p in usage.processes] == ["kwin_wayland", "plasmashell"]
    assert list(usage.by_category) == [("compositor", 1500 * MIB), ("desktop shell", 0)]


def test_options_are_ranked_and_estimate_what_they_give_back() -> None:
    options = reclaim_options(report())
    assert [o.rank for o in options] == [1, 2, 3]
    by_kind = {o.kind: o for o in options}
    # the profile leaves kwin_wayland and plasmashell's sourced figures (the budget's rule)
    assert by_kind[DesktopReclaim.NVIDIA_PROFILE].likely_saved_bytes == (
        1500 * MIB - NVIDIA_PROFILE_DESKTOP_BYTES
    )
    assert by_kind[DesktopReclaim.IGPU].likely_saved_bytes == 1500 * MIB
    assert by_kind[DesktopReclaim.LLVMPIPE].likely_saved_bytes == (1500 - 130) * MIB
    assert "DP-2 or HDMI-A-2" in by_kind[DesktopReclaim.IGPU].detail
    assert by_kind[DesktopReclaim.LLVMPIPE].variant is SessionVariant.WAYLAND_LLVMPIPE


def test_a_lit_igpu_connector_is_named_and_the_igpu_session_is_the_default() -> None:
    lit = report(igpu_lit=True)
    igpu = {o.kind: o for o in reclaim_options(lit)}[DesktopReclaim.IGPU]
    assert igpu.available and "already on the iGPU (DP-2)" in igpu.detail
    assert default_variant(lit)[0] is SessionVariant.WAYLAND_IGPU


def test_no_nvidia_no_profile_and_x11_gets_the_x11_session() -> None:
    amd = {o.kind: o for o in reclaim_options(report(amd=True, session="x11"))}
    assert not amd[DesktopReclaim.NVIDIA_PROFILE].available
    assert amd[DesktopReclaim.LLVMPIPE].variant is SessionVariant.X11_LLVMPIPE
    assert llvmpipe_variant(None) is SessionVariant.WAYLAND_LLVMPIPE


def test_without_detection_the_catalogue_card_stands_in() -> None:
    card = gpu_card("rtx-4070-super")
    usage = desktop_usage(DetectionReport(), card)
    assert not usage.measured and usage.total_bytes == card.desktop_vram_bytes
    llvm = {o.kind: o for o in reclaim_options(None, card)}[DesktopReclaim.LLVMPIPE]
    assert llvm.likely_saved_bytes == card.desktop_vram_bytes - card.llvmpipe_desktop_vram_bytes


def test_session_display_name_reads_the_desktop_file() -> None:
    desktop = render_session_files(SessionVariant.WAYLAND_LLVMPIPE)["desktop"].text
    assert session_display_name(desktop) == "Plasma software rendering by mtpstudio (Wayland)"
