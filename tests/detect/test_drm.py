"""sysfs cards/connectors and DRM fdinfo, read from the recorded machine trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.detect.machines import KIB, PCI_IDS, Roots, amdgpu_fdinfo, i915_fdinfo

from mtpstudio.core.detect.drm import (
    client_regions,
    device_bytes,
    parse_fdinfo,
    parse_memory_value,
    scan_cards,
    scan_fdinfo,
)
from mtpstudio.core.detect.models import GpuVendor

Machines = Callable[[str], Roots]


def test_laptop_intel_igpu_drives_the_panel(machine_roots: Machines) -> None:
    roots = machine_roots("laptop_intel_nvidia")
    cards, problems = scan_cards(roots.sys_root, PCI_IDS)
    assert problems == []
    assert [c.card for c in cards] == ["card0", "card1"]
    nvidia, intel = cards
    assert (nvidia.vendor, nvidia.driver, nvidia.pci_bus_id) == (
        GpuVendor.NVIDIA,
        "nvidia",
        "0000:01:00.0",
    )
    assert nvidia.name == "AD106M [GeForce RTX 4070 Max-Q / Mobile]"
    assert not nvidia.integrated and not nvidia.drives_display
    assert {c.name: c.status for c in nvidia.connectors} == {
        "HDMI-A-1": "disconnected",
        "DP-1": "disconnected",
    }
    assert intel.vendor is GpuVendor.INTEL and intel.driver == "i915"
    assert intel.integrated and intel.boot_vga is True
    assert intel.drives_display
    assert [(c.name, c.status, c.enabled) for c in intel.connectors] == [
        ("eDP-1", "connected", True)
    ]
    assert intel.name == "Raptor Lake-P [Iris Xe Graphics]"
    assert intel.render_node == "renderD129" and nvidia.render_node == "renderD128"


def test_desktop_amd_igpu_is_integrated_and_dark(machine_roots: Machines) -> None:
    cards, _ = scan_cards(machine_roots("desktop_amd_igpu_nvidia").sys_root, PCI_IDS)
    nvidia, amd = cards
    assert nvidia.drives_display and nvidia.boot_vga is True
    assert amd.vendor is GpuVendor.AMD and amd.driver == "amdgpu"
    assert amd.integrated  # 512 MiB carve-out, no VRAM vendor
    assert amd.vram_total == 536_870_912 and amd.vram_used == 97_517_568
    assert not amd.drives_display
    assert amd.name == "Raphael"


def test_amd_dgpu_is_discrete_with_vram(machine_roots: Machines) -> None:
    (card,), _ = scan_cards(machine_roots("amd_dgpu").sys_root, PCI_IDS)
    assert card.vendor is GpuVendor.AMD and not card.integrated
    assert card.vram_vendor == "samsung"
    assert card.vram_total == 25_753_026_560
    assert card.drives_display
    assert card.name == "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]"


def test_name_without_pci_ids(machine_roots: Machines) -> None:
    (card,), _ = scan_cards(machine_roots("amd_dgpu").sys_root, None)
    assert card.name == "AMD GPU 1002:744c"


def test_no_drm_at_all(tmp_path: Path) -> None:
    assert scan_cards(tmp_path / "sys") == ([], [])


def test_fdinfo_amd_dgpu_dedup_and_units(machine_roots: Machines) -> None:
    roots = machine_roots("amd_dgpu")
    clients, unreadable = scan_fdinfo(roots.proc_root, roots.sys_root)
    assert unreadable == [1, 902]  # systemd and root's Xorg: no readable fd/
    by_pid = {}
    for c in clients:
        by_pid.setdefault(c.pid, []).append(c)
    assert len(by_pid[1187]) == 1  # kwin's dup'd fd shares drm-client-id 12
    kwin = by_pid[1187][0]
    assert kwin.driver == "amdgpu" and kwin.pci_bus_id == "0000:03:00.0"
    assert kwin.regions["vram"] == 180_432 * KIB  # new keys: drm-resident-vram
    xwayland = by_pid[1342][0]
    assert xwayland.regions["vram"] == 24_576 * KIB  # legacy keys: drm-memory-vram
    llama = by_pid[50127][0]
    assert device_bytes(llama.regions, integrated=False) == 18 * 1024**3


def test_fdinfo_intel_igpu_counts_system_memory(machine_roots: Machines) -> None:
    roots = machine_roots("laptop_intel_nvidia")
    clients, _ = scan_fdinfo(roots.proc_root, roots.sys_root)
    intel = [c for c in clients if c.driver == "i915"]
    nvidia = [c for c in clients if c.driver == "nvidia-drm"]
    assert {c.pid for c in intel} == {1187, 1342, 1409, 2761}
    assert all(c.regions == {} for c in nvidia)  # nvidia-drm reports no memory
    kwin = next(c for c in intel if c.pid == 1187)
    assert device_bytes(kwin.regions, integrated=True) == 180_432 * KIB
    assert device_bytes(kwin.regions, integrated=False) == 0


def test_fdinfo_without_pdev_maps_the_node(machine_roots: Machines, tmp_path: Path) -> None:
    roots = machine_roots("amd_dgpu")
    proc = tmp_path / "proc"
    fd_dir = proc / "777" / "fd"
    fd_dir.mkdir(parents=True)
    (fd_dir / "3").symlink_to("/dev/dri/renderD128")
    (proc / "777" / "fdinfo").mkdir()
    text = amdgpu_fdinfo("0000:03:00.0", 5, 1024, 0, legacy=True).replace(
        "drm-pdev:\t0000:03:00.0\n", ""
    )
    (proc / "777" / "fdinfo" / "3").write_text(text)
    (clients, _) = scan_fdinfo(proc, roots.sys_root)
    assert [(c.pid, c.pci_bus_id) for c in clients] == [(777, "0000:03:00.0")]


def test_parse_fdinfo_and_memory_values() -> None:
    info = parse_fdinfo(i915_fdinfo("0000:00:02.0", 7, 2048))
    assert info["drm-driver"] == "i915" and info["drm-pdev"] == "0000:00:02.0"
    assert client_regions(info)["system0"] == 2048 * KIB
    assert client_regions(info)["stolen-system0"] == 0
    assert parse_memory_value("123456 KiB") == 123456 * 1024
    assert parse_memory_value("12 MiB") == 12 * 1024**2
    assert parse_memory_value("4096") == 4096
    assert parse_memory_value("") is None
    assert parse_memory_value("n/a") is None


@pytest.mark.parametrize(
    ("regions", "integrated", "expected"),
    [
        ({"vram": 10, "gtt": 5, "cpu": 1}, False, 10),
        ({"local0": 7, "system0": 3}, False, 7),
        ({"vram0": 4, "vram1": 4, "system": 9}, False, 8),
        ({"system0": 3, "stolen-system0": 1}, True, 4),
        ({"gtt": 6, "cpu": 2}, True, 6),
        ({}, True, None),
    ],
)
def test_device_bytes(regions: dict[str, int], integrated: bool, expected: int | None) -> None:
    assert device_bytes(regions, integrated) == expected
