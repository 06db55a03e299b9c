"""Who a process is (name, command from /proc) and which category of VRAM user it belongs to."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

# comm is cut to 15 bytes by the kernel (TASK_COMM_LEN 16, NUL included).
COMM_LEN = 15


class ProcessCategory(StrEnum):
    """What kind of program holds GPU memory; the Desktop VRAM page ranks by this."""

    COMPOSITOR = "compositor"
    DESKTOP_SHELL = "desktop shell"
    BROWSER = "browser"
    INFERENCE_ENGINE = "inference engine"
    OTHER = "other"


_COMPOSITORS = frozenset(
    {
        "kwin_wayland",
        "kwin_x11",
        "kwin",
        "kwin_wayland_wrapper",
        "xorg",
        "xwayland",
        "gnome-shell",
        "mutter",
        "sway",
        "hyprland",
        "wayfire",
        "weston",
        "labwc",
        "niri",
        "river",
        "cosmic-comp",
        "gamescope",
        "gamescope-wl",
        "picom",
        "compiz",
        "xfwm4",
        "muffin",
        "cinnamon",
        "marco",
        "openbox",
        "i3",
        "budgie-wm",
        "enlightenment",
        "dwl",
        "qtile",
    }
)

_DESKTOP_SHELL = frozenset(
    {
        "plasmashell",
        "krunner",
        "kded5",
        "kded6",
        "ksmserver",
        "kactivitymanagerd",
        "kaccess",
        "ksplashqml",
        "kscreenlocker_greet",
        "polkit-kde-authentication-agent-1",
        "org_kde_powerdevil",
        "xdg-desktop-portal",
        "xdg-desktop-portal-kde",
        "xdg-desktop-portal-gnome",
        "xdg-desktop-portal-gtk",
        "xdg-desktop-portal-hyprland",
        "xdg-desktop-portal-wlr",
        "maliit-keyboard",
        "maliit-server",
        "gsd-xsettings",
        "gjs",
        "gnome-software",
        "nautilus",
        "dolphin",
        "konsole",
        "yakuake",
        "latte-dock",
        "waybar",
        "polybar",
        "xfce4-panel",
        "xfdesktop",
        "lxqt-panel",
        "mate-panel",
        "budgie-panel",
        "cosmic-panel",
        "cosmic-launcher",
        "swaybg",
        "hyprpaper",
        "mako",
        "dunst",
        "sddm-greeter",
        "sddm-greeter-qt6",
        "gdm-wayland-session",
        "gdm-x-session",
        "ibus-ui-gtk3",
        "fcitx5",
    }
)

_BROWSERS = frozenset(
    {
        "firefox",
        "firefox-bin",
        "firefox-esr",
        "librewolf",
        "waterfox",
        "floorp",
        "zen",
        "zen-bin",
        "thunderbird",
        "chrome",
        "google-chrome",
        "chromium",
        "chromium-browser",
        "brave",
        "brave-browser",
        "msedge",
        "microsoft-edge",
        "opera",
        "vivaldi",
        "vivaldi-bin",
        "epiphany",
        "falkon",
        "qutebrowser",
        "konqueror",
        "web content",
        "isolated web co",
        "gpu process",
        "rdd process",
        "webkitwebprocess",
        "webkitgpuprocess",
        "qtwebengineprocess",
    }
)

_ENGINES = frozenset(
    {
        "llama-server",
        "llama-cli",
        "llama-bench",
        "llama-fit-params",
        "llama-perplexity",
        "llama-mtmd-cli",
        "ik_llama-server",
        "ik-llama-server",
        "ollama",
        "ollama_llama_server",
        "koboldcpp",
        "lm-studio",
        "lmstudio",
        "lms",
        "llama-swap",
        "text-generation-launcher",
        "text-generation-server",
        "vllm",
        "sglang",
        "tabbyapi",
        "localai",
        "local-ai",
        "jan",
        "mistral.rs",
        "mistralrs-server",
        "exllamav2",
        "aphrodite",
        "comfyui",
    }
)

# Interpreted servers show up as python/node; their command line tells.
_ENGINE_WORDS = (
    "llama-server",
    "llama_cpp.server",
    "vllm",
    "sglang",
    "tabbyapi",
    "exllama",
    "koboldcpp",
    "text-generation-webui",
    "textgen",
    "aphrodite",
    "comfyui",
    "ollama",
)


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as /proc tells it; fields are None when the process is gone or unreadable."""

    pid: int
    name: str | None
    command: str | None
    exe_name: str | None

    @property
    def label(self) -> str:
        return self.name or self.exe_name or f"pid {self.pid}"


def read_process(proc_root: Path, pid: int) -> ProcessIdentity:
    """Name (comm), command line and executable name of ``pid`` under ``proc_root``."""
    base = proc_root / str(pid)
    name = _read_text(base / "comm")
    raw = _read_bytes(base / "cmdline")
    command: str | None = None
    argv0: str | None = None
    if raw:
        parts = [p.decode("utf-8", errors="replace") for p in raw.rstrip(b"\0").split(b"\0")]
        command = " ".join(parts)
        argv0 = parts[0] if parts else None
    exe_name: str | None = None
    try:
        exe_name = os.path.basename(os.readlink(base / "exe")).removesuffix(" (deleted)")
    except OSError:
        if argv0:
            exe_name = os.path.basename(argv0.split(" ")[0]) or None
    return ProcessIdentity(
        pid=pid, name=name.strip() if name else None, command=command, exe_name=exe_name
    )


def categorize(
    name: str | None, command: str | None = None, exe_name: str | None = None
) -> ProcessCategory:
    """The category of a process from its comm name, executable name and command line."""
    candidates = [c.lower() for c in (name, exe_name) if c]
    if command:
        argv0 = command.split(" ", 1)[0]
        candidates.append(os.path.basename(argv0).lower())
    for table, category in (
        (_COMPOSITORS, ProcessCategory.COMPOSITOR),
        (_DESKTOP_SHELL, ProcessCategory.DESKTOP_SHELL),
        (_ENGINES, ProcessCategory.INFERENCE_ENGINE),
        (_BROWSERS, ProcessCategory.BROWSER),
    ):
        for cand in candidates:
            if cand in table or (len(cand) == COMM_LEN and any(t.startswith(cand) for t in table)):
                return category
    if command:
        low = command.lower()
        if any(word in low for word in _ENGINE_WORDS):
            return ProcessCategory.INFERENCE_ENGINE
    return ProcessCategory.OTHER


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
