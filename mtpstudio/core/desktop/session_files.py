"""The desktop's files: the login sessions that keep the desktop off the NVIDIA card's VRAM
(a ``.desktop`` entry and its wrapper script) and the NVIDIA driver profile, for a plan's
desktop reclaim choice.

Pure: the text comes from ``helper.session_shape`` and ``helper.profile_shape``, the code the
helper builds the installed files with; installing is ``core.desktop.install``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from mtpstudio.core.errors import RenderError
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.helper import profile_shape, session_shape
from mtpstudio.helper.profile_shape import NVIDIA_PROFILE_NAME, NVIDIA_PROFILE_PROCESSES
from mtpstudio.helper.session_shape import SESSION_VARIABLES, SessionShape

__all__ = [
    "NVIDIA_PROFILE_PROCESSES",
    "SESSION_VARIABLES",
    "SessionSettings",
    "SessionVariant",
    "render_nvidia_profile",
    "render_reclaim_files",
    "render_session_files",
    "session_variant_for",
]


class SessionVariant(StrEnum):
    """Which login session keeps the desktop off the NVIDIA card's VRAM."""

    WAYLAND_IGPU = "wayland-igpu"  # the display is on the iGPU: KWin uses only that GPU
    WAYLAND_LLVMPIPE = "wayland-llvmpipe"  # the display is on NVIDIA: software rendering
    X11_LLVMPIPE = "x11-llvmpipe"  # X11 Plasma with software GL


ARCH_PLASMA_WAYLAND = ("/usr/lib/plasma-dbus-run-session-if-needed", "/usr/bin/startplasma-wayland")
"""Exec= of Plasma 6's own Wayland session on Arch/CachyOS (plasma-workspace 6.x)."""


ARCH_PLASMA_X11 = ("/usr/bin/startplasma-x11",)


@dataclass(frozen=True)
class SessionSettings:
    """Paths and choices for the session files.

    ``wayland_command`` / ``x11_command`` are what the distribution runs to start Plasma: the
    ``Exec=`` of its installed session file (``plasma_source`` names that file), read with
    ``core.desktop.session_apply.session_settings``; the defaults are Arch/CachyOS Plasma 6's,
    for rendering on a machine without Plasma. ``igpu_card`` is the iGPU's DRM node, preferably
    the stable ``/dev/dri/by-path/pci-…-card`` link; the wrapper resolves it at login.
    """

    igpu_card: str | None = None
    wayland_command: tuple[str, ...] = ARCH_PLASMA_WAYLAND
    x11_command: tuple[str, ...] = ARCH_PLASMA_X11
    plasma_source: Mapping[str, str] | None = None  # folder kind -> the Plasma session file
    wrapper_dir: str = "/usr/local/lib/mtpstudio"
    wayland_sessions_dir: str = "/usr/local/share/wayland-sessions"
    x11_sessions_dir: str = "/usr/local/share/xsessions"
    mesa_egl_vendor_file: str = "/usr/share/glvnd/egl_vendor.d/50_mesa.json"
    llvmpipe_threads: int | None = None


def session_variant_for(display_on_igpu: bool, *, x11: bool = False) -> SessionVariant:
    """The variant detection calls for: iGPU routing when a monitor hangs off the iGPU."""
    if x11:
        return SessionVariant.X11_LLVMPIPE
    return SessionVariant.WAYLAND_IGPU if display_on_igpu else SessionVariant.WAYLAND_LLVMPIPE


def render_session_files(
    variant: SessionVariant, settings: SessionSettings | None = None
) -> dict[str, RenderedFile]:
    """The session ``.desktop`` file and its wrapper script for ``variant`` (written by
    ``helper.session_shape``, the code the helper builds the installed files with).

    Returns:
        ``{"desktop": …, "wrapper": …}``; both need root to install (SDDM reads only system
        session folders). The desktop file carries the helper's parameters when the helper can
        install it (Plasma's own session file is known).

    Raises:
        RenderError: the iGPU variant without ``settings.igpu_card``, or paths that cannot be
            written safely.
    """
    settings = settings or SessionSettings()
    facts = session_shape.VARIANTS[variant.value]
    x11 = facts.kind == "xsessions"
    shape = SessionShape(
        variant=variant.value,
        sessions_dir=settings.x11_sessions_dir if x11 else settings.wayland_sessions_dir,
        plasma_command=tuple(settings.x11_command if x11 else settings.wayland_command),
        plasma_source=(settings.plasma_source or {}).get(facts.kind),
        igpu_card=settings.igpu_card,
        llvmpipe_threads=settings.llvmpipe_threads,
        wrapper_dir=settings.wrapper_dir,
        mesa_egl_vendor_file=settings.mesa_egl_vendor_file,
    )
    desktop_text = session_shape.render_session_desktop(shape)
    wrapper_text = session_shape.render_session_wrapper(shape)
    try:
        params: Mapping[str, Any] | None = shape.params()
    except RenderError:
        params = None  # rendered for a look (no Plasma here): not something to install
    return {
        "desktop": RenderedFile(
            name=facts.file_name,
            text=desktop_text,
            mode=0o644,
            install_path=Path(shape.desktop_path),
            explanation=f"Login-screen entry '{facts.session_name}'.",
            privileged=True,
            params=params,
        ),
        "wrapper": RenderedFile(
            name=facts.wrapper_name,
            text=wrapper_text,
            mode=0o755,
            install_path=Path(shape.wrapper_path),
            explanation="Sets the rendering variables, starts Plasma, and clears them at logout.",
            privileged=True,
        ),
    }


def render_nvidia_profile(processes: Sequence[str] = NVIDIA_PROFILE_PROCESSES) -> RenderedFile:
    """The NVIDIA driver profile ``GLVidHeapReuseRatio=0`` for the desktop's processes.

    The lightest reclaim: the driver stops keeping freed video memory in a pool for these
    processes (egl-wayland#126); nothing else about the session changes.
    """
    path = Path("/etc/nvidia/nvidia-application-profiles-rc.d") / NVIDIA_PROFILE_NAME
    return RenderedFile(
        name=path.name,
        text=profile_shape.render_nvidia_profile(processes),
        mode=0o644,
        install_path=path,
        explanation="NVIDIA driver profile: the compositor and shell return freed VRAM "
        "instead of pooling it.",
        privileged=True,
        params={"processes": list(processes)},
    )


def render_reclaim_files(
    reclaim: DesktopReclaim,
    settings: SessionSettings | None = None,
    *,
    x11: bool = False,
) -> dict[str, RenderedFile]:
    """The files for the plan's desktop reclaim choice (empty for ``none``)."""
    if reclaim is DesktopReclaim.NONE:
        return {}
    if reclaim is DesktopReclaim.NVIDIA_PROFILE:
        return {"nvidia-profile": render_nvidia_profile()}
    if x11:
        return render_session_files(SessionVariant.X11_LLVMPIPE, settings)
    variant = session_variant_for(reclaim is DesktopReclaim.IGPU)
    return render_session_files(variant, settings)
