"""Before Qt loads: what the xcb platform plugin lacks, and which packages bring it."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.runner import Runner, SubprocessRunner

# Qt >= 6.5 dlopens this itself before it loads the xcb plugin and aborts when it is missing.
XCB_CURSOR = "libxcb-cursor.so.0"
LDD_TIMEOUT_S = 20.0

# soname -> (Debian/Ubuntu package, Arch package). Every library ldd lists for PySide6's
# libqxcb.so outside PySide6 itself (recorded on Debian 12), plus the xcb extensions older Qt
# builds use. Names checked with `dpkg -S` (Debian 12) and the Arch package file lists.
SONAME_PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libX11.so.6": ("libx11-6", "libx11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libx11"),
    "libXau.so.6": ("libxau6", "libxau"),
    "libXdmcp.so.6": ("libxdmcp6", "libxdmcp"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libGL.so.1": ("libgl1", "libglvnd"),
    "libGLX.so.0": ("libglx0", "libglvnd"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd"),
    "libEGL.so.1": ("libegl1", "libglvnd"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype2"),
    "libpng16.so.16": ("libpng16-16", "libpng"),
    "libexpat.so.1": ("libexpat1", "expat"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libSM.so.6": ("libsm6", "libsm"),
    "libICE.so.6": ("libice6", "libice"),
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.MULTILINE)


class QtPlatformError(MtpStudioError):
    """Qt's platform plugin cannot load on this machine (the message names what to install)."""


@dataclass(frozen=True)
class XcbPreflightReport:
    """What the xcb platform plugin lacks, and the packages that provide it."""

    missing: tuple[str, ...]
    debian: tuple[str, ...]
    arch: tuple[str, ...]
    unknown: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.missing


def will_use_xcb(environ: Mapping[str, str]) -> bool:
    """True when Qt will pick its xcb (X11) platform plugin in this environment."""
    requested = environ.get("QT_QPA_PLATFORM", "").strip()
    if requested:  # "xcb", "wayland;xcb", "offscreen", "xcb:option=…": the first one is tried
        first = requested.split(";")[0].split(":")[0].strip()
        return first == "xcb"
    return bool(environ.get("DISPLAY")) and not environ.get("WAYLAND_DISPLAY")


def xcb_plugin_path(
    find_spec: Callable[[str], object | None] = importlib.util.find_spec,
) -> Path | None:
    """PySide6's ``libqxcb.so``, located without importing PySide6 (None when absent)."""
    spec = find_spec("PySide6")
    origin = getattr(spec, "origin", None)
    if not isinstance(origin, str):
        return None
    plugin = Path(origin).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def missing_sonames(ldd_output: str) -> tuple[str, ...]:
    """The libraries ``ldd`` reports as ``not found``, each once, in order of appearance."""
    return tuple(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def xcb_report(ldd_output: str, xcb_cursor_loads: bool) -> XcbPreflightReport:
    """Pure: the ldd output of libqxcb.so (and Qt's own xcb-cursor check) -> what to install."""
    missing = list(missing_sonames(ldd_output))
    if not xcb_cursor_loads and XCB_CURSOR not in missing:
        missing.append(XCB_CURSOR)
    known = [SONAME_PACKAGES[s] for s in missing if s in SONAME_PACKAGES]
    return XcbPreflightReport(
        missing=tuple(missing),
        debian=tuple(dict.fromkeys(deb for deb, _ in known)),
        arch=tuple(dict.fromkeys(arch for _, arch in known)),
        unknown=tuple(s for s in missing if s not in SONAME_PACKAGES),
    )


def _and_join(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def report_error(report: XcbPreflightReport) -> QtPlatformError:
    """One sentence naming the missing libraries, and the install commands as the hint."""
    message = (
        f"the GUI cannot start: this system lacks {_and_join(report.missing)}, which Qt's X11 "
        "(xcb) platform plugin needs"
    )
    steps: list[str] = []
    if report.debian:
        steps.append(f"`sudo apt install {' '.join(report.debian)}` (Debian/Ubuntu)")
        steps.append(f"`sudo pacman -S {' '.join(report.arch)}` (Arch)")
    hint = "Install them with " + " or ".join(steps) if steps else "Install them"
    if report.unknown:
        hint += f"; find the package holding {_and_join(report.unknown)} with `apt-file search`"
    return QtPlatformError(message, hint=hint + ", then start the GUI again.")


def _dlopen_ok(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def check_xcb_platform(
    environ: Mapping[str, str] | None = None,
    runner: Runner | None = None,
    plugin: Path | None = None,
    can_load: Callable[[str], bool] = _dlopen_ok,
) -> XcbPreflightReport | None:
    """Raise QtPlatformError when Qt would abort loading the xcb plugin; None when not checked.

    Runs only when Qt will use xcb and the plugin file and ``ldd`` are there; anything it
    cannot check is left to Qt, so the check never blocks a GUI that would have started.
    """
    env = os.environ if environ is None else environ
    if not will_use_xcb(env):
        return None
    plugin = plugin or xcb_plugin_path()
    if plugin is None:
        return None
    result = (runner or SubprocessRunner())(["ldd", str(plugin)], LDD_TIMEOUT_S)
    if not result.ok and "not found" not in result.stdout:
        return None
    report = xcb_report(result.stdout, can_load(XCB_CURSOR))
    if not report.ok:
        raise report_error(report)
    return report
