"""GPUs, display connectors and per-process GPU memory from sysfs and DRM fdinfo (any vendor)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mtpstudio.core.detect.models import Connector, GpuVendor

VENDORS = {"0x10de": GpuVendor.NVIDIA, "0x1002": GpuVendor.AMD, "0x8086": GpuVendor.INTEL}
VENDOR_NAMES = {GpuVendor.NVIDIA: "NVIDIA", GpuVendor.AMD: "AMD", GpuVendor.INTEL: "Intel"}
DISPLAY_CLASS_PREFIX = "0x03"  # 0x0300 VGA, 0x0302 3D controller, 0x0380 other display
AMD_APU_MAX_VRAM = 4 * 1024**3
DEFAULT_PCI_IDS = (
    Path("/usr/share/hwdata/pci.ids"),
    Path("/usr/share/misc/pci.ids"),
    Path("/usr/share/pci.ids"),
)
_UNITS = {"": 1, "B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "KB": 1024, "MB": 1024**2}
_CARD = re.compile(r"card(\d+)")
_CONNECTOR = re.compile(r"(card\d+)-(.+)")
_RENDER = re.compile(r"renderD\d+")
_DEVICE_REGIONS = re.compile(r"(vram|local)\d*")


@dataclass
class DrmCard:
    """A display-class PCI device with a DRM card node."""

    card: str
    pci_bus_id: str | None
    vendor: GpuVendor
    vendor_id: str | None
    device_id: str | None
    pci_class: str | None
    driver: str | None
    boot_vga: bool | None
    vram_total: int | None = None
    vram_used: int | None = None
    vram_vendor: str | None = None
    gtt_total: int | None = None
    product_name: str | None = None
    render_node: str | None = None
    connectors: list[Connector] = field(default_factory=list)
    integrated: bool = False
    name: str = ""

    @property
    def drives_display(self) -> bool:
        return any(c.active for c in self.connectors)

    @property
    def card_index(self) -> int:
        m = _CARD.fullmatch(self.card)
        return int(m.group(1)) if m else 0


@dataclass
class DrmClient:
    """One DRM client (an open device file, de-duplicated by drm-client-id) of a process."""

    pid: int
    pci_bus_id: str | None
    driver: str | None
    client_id: str | None
    regions: dict[str, int] = field(default_factory=dict)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _uevent(device: Path) -> dict[str, str]:
    text = _read(device / "uevent") or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _link_name(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path)) or None
    except OSError:
        return None


def _pci_bus_id(device: Path, uevent: dict[str, str]) -> str | None:
    slot = uevent.get("PCI_SLOT_NAME")
    if slot:
        return slot.lower()
    name = _link_name(device)
    if name and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name):
        return name
    return None


def _is_integrated(card: DrmCard) -> bool:
    """Heuristic: Intel's iGPU sits at 00:02.0; an AMD APU has no VRAM vendor and a carve-out."""
    if card.vendor is GpuVendor.INTEL:
        return card.pci_bus_id is None or card.pci_bus_id.endswith(":00:02.0")
    if card.vendor is GpuVendor.AMD:
        if card.vram_vendor:
            return False
        return card.vram_total is not None and card.vram_total <= AMD_APU_MAX_VRAM
    return False


def scan_cards(sys_root: Path, pci_ids: Path | None = None) -> tuple[list[DrmCard], list[str]]:
    """Display-class DRM cards under ``sys_root``/class/drm with their connectors.

    Returns the cards (by card number) and problems met on the way.
    """
    problems: list[str] = []
    drm = sys_root / "class" / "drm"
    try:
        entries = sorted(os.listdir(drm))
    except OSError:
        return [], []
    cards: dict[str, DrmCard] = {}
    render_pci: dict[str, str] = {}
    connectors: dict[str, list[Connector]] = {}
    for entry in entries:
        base = drm / entry
        if _CARD.fullmatch(entry):
            card = _read_card(entry, base / "device")
            if card is not None:
                cards[entry] = card
        elif m := _CONNECTOR.fullmatch(entry):
            status = _read(base / "status") or "unknown"
            enabled_text = _read(base / "enabled")
            enabled = None if enabled_text is None else enabled_text == "enabled"
            connectors.setdefault(m.group(1), []).append(
                Connector(card=m.group(1), name=m.group(2), status=status, enabled=enabled)
            )
        elif _RENDER.fullmatch(entry):
            device = base / "device"
            bus = _pci_bus_id(device, _uevent(device))
            if bus:
                render_pci[entry] = bus
    names = _pci_names(pci_ids, cards.values())
    for key, card in cards.items():
        card.connectors = connectors.get(key, [])
        card.render_node = next((r for r, b in render_pci.items() if b == card.pci_bus_id), None)
        card.integrated = _is_integrated(card)
        card.name = (
            card.product_name
            or names.get((card.vendor_id, card.device_id))
            or (
                f"{VENDOR_NAMES.get(card.vendor, 'Unknown')} GPU "
                f"{(card.vendor_id or '?')[2:]}:{(card.device_id or '?')[2:]}"
            )
        )
    return sorted(cards.values(), key=lambda c: c.card_index), problems


def _read_card(card: str, device: Path) -> DrmCard | None:
    uevent = _uevent(device)
    pci_class = _read(device / "class")
    if pci_class is None and not uevent:
        return None  # not a PCI device (e.g. a virtual or platform display)
    if pci_class is not None and not pci_class.lower().startswith(DISPLAY_CLASS_PREFIX):
        return None
    vendor_id = (_read(device / "vendor") or "").lower() or None
    if vendor_id is None and "PCI_ID" in uevent:
        vendor_id = "0x" + uevent["PCI_ID"].split(":")[0].lower()
    device_id = (_read(device / "device") or "").lower() or None
    boot = _read(device / "boot_vga")
    product = _read(device / "product_name")
    return DrmCard(
        card=card,
        pci_bus_id=_pci_bus_id(device, uevent),
        vendor=VENDORS.get(vendor_id or "", GpuVendor.OTHER),
        vendor_id=vendor_id,
        device_id=device_id,
        pci_class=pci_class.lower() if pci_class else None,
        driver=uevent.get("DRIVER") or _link_name(device / "driver"),
        boot_vga=None if boot is None else boot == "1",
        vram_total=_read_int(device / "mem_info_vram_total"),
        vram_used=_read_int(device / "mem_info_vram_used"),
        vram_vendor=_read(device / "mem_info_vram_vendor") or None,
        gtt_total=_read_int(device / "mem_info_gtt_total"),
        product_name=product or None,
    )


def _pci_names(
    pci_ids: Path | None, cards: Iterable[DrmCard]
) -> dict[tuple[str | None, str | None], str]:
    """Marketing names from a pci.ids file for the given cards (one pass over the file)."""
    wanted = {
        (c.vendor_id[2:], c.device_id[2:]): (c.vendor_id, c.device_id)
        for c in cards
        if c.vendor_id and c.device_id
    }
    if not wanted or pci_ids is None:
        return {}
    vendors = {v for v, _ in wanted}
    out: dict[tuple[str | None, str | None], str] = {}
    current: str | None = None
    try:
        with pci_ids.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip() or line.startswith("#"):
                    continue
                if not line.startswith("\t"):
                    if line.startswith("C "):
                        break  # device classes follow the vendor list
                    current = line[:4].lower()
                    continue
                if line.startswith("\t\t") or current not in vendors:
                    continue
                did, _, name = line.strip().partition(" ")
                key = (current, did.lower())
                if key in wanted:
                    out[wanted[key]] = name.strip()
                    if len(out) == len(wanted):
                        break
    except OSError:
        return {}
    return out


def find_pci_ids() -> Path | None:
    """The system's pci.ids file, if there is one."""
    return next((p for p in DEFAULT_PCI_IDS if p.is_file()), None)


def parse_fdinfo(text: str) -> dict[str, str]:
    """``key: value`` lines of a /proc/<pid>/fdinfo/<fd> file."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_memory_value(value: str) -> int | None:
    """'123456 KiB' / '12 MiB' / '4096' (bytes) -> bytes."""
    parts = value.split()
    if not parts:
        return None
    try:
        number = int(parts[0])
    except ValueError:
        return None
    unit = parts[1].upper() if len(parts) > 1 else ""
    return number * _UNITS.get(unit, 1)


def client_regions(info: dict[str, str]) -> dict[str, int]:
    """Resident bytes per region: drm-resident-*, else the legacy drm-memory-*, else drm-total-*."""
    regions: dict[str, int] = {}
    for prefix in ("drm-resident-", "drm-memory-", "drm-total-"):
        for key, value in info.items():
            if key.startswith(prefix):
                region = key[len(prefix) :]
                size = parse_memory_value(value)
                if size is not None and region not in regions:
                    regions[region] = size
    return regions


def device_bytes(regions: dict[str, int], integrated: bool) -> int | None:
    """GPU memory a client holds: device-local regions (vram*, local*), or for an iGPU every
    region except 'cpu' (its memory is system memory anyway)."""
    if not regions:
        return None
    local = [v for k, v in regions.items() if _DEVICE_REGIONS.fullmatch(k)]
    if local:
        return sum(local)
    if integrated:
        return sum(v for k, v in regions.items() if k != "cpu")
    return 0


def scan_fdinfo(proc_root: Path, sys_root: Path) -> tuple[list[DrmClient], list[int]]:
    """Every DRM client of every readable process, de-duplicated by (device, drm-client-id).

    Returns the clients and the pids whose fds could not be read (other users' processes need
    ptrace-level access).
    """
    node_pci = _node_pci(sys_root)
    clients: list[DrmClient] = []
    seen: set[tuple[str | None, str]] = set()
    unreadable: list[int] = []
    try:
        pids = sorted(int(p) for p in os.listdir(proc_root) if p.isdigit())
    except OSError:
        return [], []
    for pid in pids:
        fd_dir = proc_root / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            unreadable.append(pid)
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if not target.startswith("/dev/dri/"):
                continue
            text = _read(proc_root / str(pid) / "fdinfo" / fd)
            if not text:
                continue
            info = parse_fdinfo(text)
            if "drm-driver" not in info:
                continue
            bus = info.get("drm-pdev", "").lower() or node_pci.get(os.path.basename(target))
            client_id = info.get("drm-client-id")
            if client_id is not None:
                key = (bus, client_id)
                if key in seen:
                    continue
                seen.add(key)
            clients.append(
                DrmClient(
                    pid=pid,
                    pci_bus_id=bus,
                    driver=info.get("drm-driver"),
                    client_id=client_id,
                    regions=client_regions(info),
                )
            )
    return clients, unreadable


def _node_pci(sys_root: Path) -> dict[str, str]:
    """DRM node name (card1, renderD128) -> PCI bus id, for fdinfo without drm-pdev."""
    drm = sys_root / "class" / "drm"
    out: dict[str, str] = {}
    try:
        entries = os.listdir(drm)
    except OSError:
        return out
    for entry in entries:
        if _CARD.fullmatch(entry) or _RENDER.fullmatch(entry):
            device = drm / entry / "device"
            bus = _pci_bus_id(device, _uevent(device))
            if bus:
                out[entry] = bus
    return out
