"""The reclaim session to install (from the installed SDDM and Plasma, the 'before' figure) and
the one to verify.

Shared by ``mtpstudio apply session`` / ``verify-session`` and the Desktop VRAM page, so both
install the same files and compare against the same stored measurement. Everything about the
system comes from its files below the root and its package database (dpkg-query, pacman); the
display manager is never started.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mtpstudio.core.desktop.install import (
    InstallError,
    InstallPlan,
    read_measurement,
    session_kind,
    session_plan,
    system_status,
)
from mtpstudio.core.desktop.plasma import (
    KIND_WORDS,
    PlasmaSession,
    listed_names,
    missing_plasma,
    plasma_session,
)
from mtpstudio.core.desktop.reclaim import SWITCH_BACK, reclaim_options, session_display_name
from mtpstudio.core.desktop.session_check import desktop_vram, measurement_candidates
from mtpstudio.core.desktop.session_files import SessionSettings, SessionVariant
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.memory.machine import igpu_card_path
from mtpstudio.helper.constants import WAYLAND_SESSIONS, X11_SESSIONS
from mtpstudio.helper.sddm import SessionDirs, session_dirs

PLASMA_PACKAGES = {
    WAYLAND_SESSIONS: "Debian/Ubuntu: plasma-workspace-wayland; Fedora: plasma-workspace-wayland; "
    "Arch/CachyOS: plasma-workspace",
    X11_SESSIONS: "your distribution's Plasma X11 session package; Debian/Ubuntu: plasma-workspace",
}


def sddm_dirs(root: Path | None) -> SessionDirs:
    """The session folders the installed SDDM reads, from its package database and config
    files below ``root`` (SDDM itself is never started to learn its version)."""
    return session_dirs(str(root or "/"))


@dataclass(frozen=True)
class DesktopFacts:
    """The installed login screen and Plasma below a root: what a session plan is built from."""

    root: str
    sddm: SessionDirs
    plasma: dict[str, PlasmaSession]
    problems: dict[str, str]  # kind -> why Plasma's session of that kind cannot be used

    def settings(self, igpu_card: str | None = None) -> SessionSettings:
        """Session settings that run the installed Plasma's own commands (Arch's Plasma 6
        commands where none is installed)."""
        settings = SessionSettings()
        wayland, x11 = self.plasma.get(WAYLAND_SESSIONS), self.plasma.get(X11_SESSIONS)
        return SessionSettings(
            igpu_card=igpu_card,
            wayland_command=wayland.command if wayland else settings.wayland_command,
            x11_command=x11.command if x11 else settings.x11_command,
            plasma_source={kind: p.path for kind, p in self.plasma.items()},
        )


def desktop_facts(root: Path | None, sddm: SessionDirs | None = None) -> DesktopFacts:
    """SDDM's folders and Plasma's own sessions as installed below ``root``."""
    where = str(root or "/")
    sddm = sddm or session_dirs(where)
    plasma: dict[str, PlasmaSession] = {}
    problems: dict[str, str] = {}
    for kind in (WAYLAND_SESSIONS, X11_SESSIONS):
        try:
            found = plasma_session(where, sddm, kind)
        except ValueError as exc:
            problems[kind] = str(exc)
            continue
        if found is not None:
            plasma[kind] = found
    for kind in (WAYLAND_SESSIONS, X11_SESSIONS):
        if kind not in plasma and kind not in problems:
            problems[kind] = missing_plasma(kind, sddm, list(plasma.values()))
    return DesktopFacts(where, sddm, plasma, problems)


def usable_variant(
    variant: SessionVariant, facts: DesktopFacts, chosen: bool
) -> tuple[SessionVariant, str | None]:
    """``variant``, or the X11 session when only Plasma's X11 session is installed and the
    variant was not chosen by the user; with the reason for the change."""
    if chosen or session_kind(variant) in facts.plasma or X11_SESSIONS not in facts.plasma:
        return variant, None
    return SessionVariant.X11_LLVMPIPE, (
        f"Plasma's Wayland session is not installed here, its X11 one is "
        f"({facts.plasma[X11_SESSIONS].path})"
    )


def no_plasma_error(kind: str, facts: DesktopFacts, report: DetectionReport | None) -> InstallError:
    """Plasma's session of ``kind`` is missing: say so, and what applies instead."""
    offers = [f"install Plasma ({PLASMA_PACKAGES[kind]})"]
    other = X11_SESSIONS if kind == WAYLAND_SESSIONS else WAYLAND_SESSIONS
    if other in facts.plasma:
        variant = "x11" if other == X11_SESSIONS else "llvmpipe"
        offers.append(f"use `--variant {variant}` for the installed {KIND_WORDS[other]} session")
    profile = [o for o in reclaim_options(report) if o.variant is None and o.available]
    if profile:
        offers.append("use `mtpstudio apply nvidia-profile`, which works with any desktop")
    text = " or ".join(offers)
    return InstallError(
        f"{facts.problems[kind]}: mtpstudio's login sessions start Plasma",
        hint=f"{text[0].upper()}{text[1:]}.",
    )


def prepare_session(
    report: DetectionReport,
    variant: SessionVariant,
    sddm: SessionDirs,
    root: Path | None = None,
) -> tuple[InstallPlan, dict[str, Any]]:
    """The session's install plan for the installed SDDM and Plasma below ``root``, carrying
    the desktop's VRAM now as the 'before' figure.

    Raises:
        InstallError: Plasma's session of that kind is not installed, or SDDM lists no session
            from its configured folder.
    """
    facts = desktop_facts(root, sddm)
    kind = session_kind(variant)
    plasma = facts.plasma.get(kind)
    if plasma is None:
        raise no_plasma_error(kind, facts, report)
    settings = facts.settings(igpu_card_path(report))
    first = session_plan(variant, settings, sddm)
    listed = listed_names(facts.root, sddm, leave_out=first.name)  # all sessions but ours
    desktop = next(f for f in first.files if f.name.endswith(".desktop"))
    beside_plasma = [*listed, session_display_name(desktop.text)]
    if plasma.name in beside_plasma:
        beside_plasma.remove(plasma.name)  # Plasma's own entry is not its own namesake
    back = sddm.shown_name(plasma.name, kind, beside_plasma) if plasma.name else SWITCH_BACK[kind]
    vram = desktop_vram(report, session=first.name.removesuffix(".desktop"))
    plan = session_plan(variant, settings, sddm, vram, listed=listed, switch_back=back)
    runs = (
        f"The wrapper runs Plasma's own command, Exec= of {plasma.path} "
        f"({' '.join(plasma.command)}), with the rendering variables set."
    )
    return replace(plan, notes=(*plan.notes, runs)), vram


def session_name(plan: InstallPlan) -> str:
    """What the login screen lists for the plan's session."""
    return plan.shown_name


def switch_back_name(plan: InstallPlan) -> str:
    """The usual session to pick at the login screen to go back."""
    return plan.switch_back


def installed_groups(root: Path | None, kind: str | None = None) -> list[str]:
    """Helper-installed groups (``session:NAME`` …), optionally of one kind."""
    groups = list(system_status(root)["groups"])
    return [g for g in groups if kind is None or g.partition(":")[0] == kind]


def stored_measurement(session: str | None, root: Path | None) -> dict[str, Any] | None:
    """The 'before' figure kept when a session was installed (this session's first)."""
    names = [
        Path(f["path"]).name
        for info in system_status(root)["groups"].values()
        for f in info["files"]
        if Path(f["path"]).name.startswith("desktop-vram-")
    ]
    for name in measurement_candidates(session, names):
        before = read_measurement(name, root)
        if before is not None:
            return before
    return None
