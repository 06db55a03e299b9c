"""The reclaim session to install (SDDM's folders, the 'before' figure) and the one to verify.

Shared by ``mtpstudio apply session`` / ``verify-session`` and the Desktop VRAM page, so both
install the same files and compare against the same stored measurement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtpstudio.core.desktop.install import (
    InstallPlan,
    read_measurement,
    session_kind,
    session_plan,
    system_status,
)
from mtpstudio.core.desktop.reclaim import SWITCH_BACK, session_display_name
from mtpstudio.core.desktop.session_check import desktop_vram, measurement_candidates
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.memory.machine import igpu_card_path
from mtpstudio.core.runner import Runner
from mtpstudio.core.service.render import SessionSettings, SessionVariant
from mtpstudio.helper.sddm import SessionDirs, session_dirs, version_tuple

SDDM_VERSION_TIMEOUT_S = 10.0


def sddm_dirs(root: Path | None, runner: Runner) -> SessionDirs:
    """The session folders the installed SDDM reads (asks ``sddm --version`` on the real /)."""
    dirs = session_dirs(str(root or "/"))
    if root is None and dirs.installed and dirs.version is None:
        result = runner(["sddm", "--version"], SDDM_VERSION_TIMEOUT_S)
        if result.ok and version_tuple(result.output):
            dirs = session_dirs("/", result.output.strip().split()[-1])
    return dirs


def prepare_session(
    report: DetectionReport, variant: SessionVariant, sddm: SessionDirs
) -> tuple[InstallPlan, dict[str, Any]]:
    """The session's install plan, carrying the desktop's VRAM now as the 'before' figure."""
    settings = SessionSettings(igpu_card=igpu_card_path(report))
    stem = session_plan(variant, settings, sddm).name.removesuffix(".desktop")
    vram = desktop_vram(report, session=stem)
    return session_plan(variant, settings, sddm, vram), vram


def session_name(plan: InstallPlan) -> str:
    """What the login screen lists for the plan's session."""
    desktop = next(f for f in plan.files if f.name.endswith(".desktop"))
    return session_display_name(desktop.text)


def switch_back_name(variant: SessionVariant) -> str:
    """The usual session to pick at the login screen to go back."""
    return SWITCH_BACK[session_kind(variant)]


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
