"""CPU, RAM, swap and OS from /proc and /etc; the desktop session, display manager and KWin."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.detect.models import HostInfo
from mtpstudio.core.runner import Runner, RunResult

KWIN_TIMEOUT_S = 1.5
# Asked in this order; the first that answers wins (qdbus6 on Plasma 6, qdbus on Plasma 5).
KWIN_SUPPORT_INFO_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("qdbus6", "org.kde.KWin", "/KWin", "org.kde.KWin.supportInformation"),
    ("qdbus", "org.kde.KWin", "/KWin", "org.kde.KWin.supportInformation"),
    (
        "gdbus",
        "call",
        "--session",
        "--dest",
        "org.kde.KWin",
        "--object-path",
        "/KWin",
        "--method",
        "org.kde.KWin.supportInformation",
    ),
    ("busctl", "--user", "call", "org.kde.KWin", "/KWin", "org.kde.KWin", "supportInformation"),
)
_COMPOSITING = re.compile(r"Compositing Type:\s*([^\n\\]+)")
_RENDERER = re.compile(r"OpenGL renderer string:\s*([^\n\\]+)")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per key ('MemTotal: 32768000 kB' -> 33554432000)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_cpuinfo(text: str) -> tuple[str | None, int | None, int | None]:
    """(model name, physical cores, logical CPUs) from /proc/cpuinfo."""
    model: str | None = None
    logical = 0
    cores: set[tuple[str, str]] = set()
    per_socket: dict[str, int] = {}
    block: dict[str, str] = {}

    def flush() -> None:
        nonlocal logical
        if "processor" not in block:
            return
        logical += 1
        if "physical id" in block and "core id" in block:
            cores.add((block["physical id"], block["core id"]))
        if "cpu cores" in block:
            with contextlib.suppress(ValueError):
                per_socket[block.get("physical id", "0")] = int(block["cpu cores"])

    for line in [*text.splitlines(), ""]:
        if not line.strip():
            flush()
            block = {}
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        block[key] = value
        if model is None and key in ("model name", "Model", "cpu model", "Hardware"):
            model = value or None
    physical = len(cores) or sum(per_socket.values()) or (logical or None)
    return model, physical, logical or None


def detect_host(proc_root: Path = Path("/proc"), etc_root: Path = Path("/etc")) -> HostInfo:
    """CPU model, physical cores, RAM/swap and OS name of the machine under these roots."""
    model, physical, logical = parse_cpuinfo(_read(proc_root / "cpuinfo") or "")
    mem = parse_meminfo(_read(proc_root / "meminfo") or "")
    available = mem.get("MemAvailable")
    if available is None and "MemFree" in mem:  # kernels before 3.14
        available = mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
    return HostInfo(
        cpu_model=_squash(model),
        physical_cores=physical,
        logical_cpus=logical,
        ram_total_bytes=mem.get("MemTotal"),
        ram_available_bytes=available,
        swap_total_bytes=mem.get("SwapTotal"),
        swap_free_bytes=mem.get("SwapFree"),
        os_name=_os_name(etc_root),
        kernel=(_read(proc_root / "sys" / "kernel" / "osrelease") or "").strip() or None,
    )


@dataclass(frozen=True)
class SessionInfo:
    """The graphical session as far as the environment, /etc and D-Bus tell."""

    session_type: str | None
    desktop: str | None
    display_manager: str | None
    kwin_compositing: str | None
    kwin_renderer: str | None
    problem: str | None = None


def detect_session(
    environ: Mapping[str, str],
    etc_root: Path = Path("/etc"),
    runner: Runner | None = None,
    timeout: float = KWIN_TIMEOUT_S,
) -> SessionInfo:
    """Session type and desktop from the environment, the display manager from /etc, and KWin's
    compositing type over D-Bus when this is a KDE session and a D-Bus tool answers."""
    desktop = environ.get("XDG_CURRENT_DESKTOP") or environ.get("XDG_SESSION_DESKTOP") or None
    compositing = renderer = problem = None
    if runner is not None and desktop and "kde" in desktop.lower().split(":"):
        compositing, renderer, problem = kwin_compositing(runner, timeout)
    return SessionInfo(
        session_type=environ.get("XDG_SESSION_TYPE") or None,
        desktop=desktop,
        display_manager=display_manager(etc_root),
        kwin_compositing=compositing,
        kwin_renderer=renderer,
        problem=problem,
    )


# What D-Bus tools print when KWin is not on the bus, or when there is no session bus.
_NOT_ON_BUS = ("does not exist", "ServiceUnknown", "was not provided by any", "not activatable")
_NO_BUS = ("connect", "autolaunch", "bus address", "DBUS_SESSION_BUS_ADDRESS")


def bus_failure(result: RunResult, timeout: float) -> str:
    """Why a D-Bus tool got no answer from KWin, as one phrase (not the tool's own text)."""
    text = result.output
    if result.timed_out:
        return f"KWin did not answer within {timeout:g} s"
    if any(marker in text for marker in _NOT_ON_BUS):
        return "KWin is not running on this session bus (not a Plasma session?)"
    if any(marker.lower() in text.lower() for marker in _NO_BUS):
        return "no session bus is reachable (DBUS_SESSION_BUS_ADDRESS is not set)"
    return f"{result.argv[0]} could not ask KWin ({result.reason(timeout)})"


def kwin_compositing(runner: Runner, timeout: float) -> tuple[str | None, str | None, str | None]:
    """(compositing type, OpenGL renderer, problem) from KWin's supportInformation; the
    problem is one phrase, and None as well when no D-Bus tool is installed."""
    reasons: list[str] = []
    for argv in KWIN_SUPPORT_INFO_COMMANDS:
        result = runner(argv, timeout)
        if result.error is not None:
            continue  # tool not installed: try the next one
        if not result.ok:
            reasons.append(bus_failure(result, timeout))
            if result.timed_out:
                break  # KWin (or the bus) is not answering: another tool will not fare better
            continue
        text = result.stdout
        comp = _COMPOSITING.search(text)
        rend = _RENDERER.search(text)
        if comp is None:
            reasons.append("KWin's answer has no 'Compositing Type' line")
            continue
        return comp.group(1).strip(), rend.group(1).strip() if rend else None, None
    if not reasons:
        return None, None, None  # no D-Bus tool installed: nothing to say
    return None, None, reasons[0]


def display_manager(etc_root: Path) -> str | None:
    """'sddm', 'gdm', 'lightdm', ... from systemd's display-manager.service link (or Debian's
    /etc/X11/default-display-manager)."""
    link = etc_root / "systemd" / "system" / "display-manager.service"
    try:
        target = os.readlink(link)
        return os.path.basename(target).removesuffix(".service") or None
    except OSError:
        pass
    text = _read(etc_root / "X11" / "default-display-manager")
    if text and text.strip():
        return os.path.basename(text.strip()) or None
    return None


def _os_name(etc_root: Path) -> str | None:
    text = _read(etc_root / "os-release") or ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"').strip("'")
    return fields.get("PRETTY_NAME") or fields.get("NAME") or None


def _squash(text: str | None) -> str | None:
    return " ".join(text.split()) if text else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
