"""The desktop's VRAM taken back: who holds it, the ranked reclaim options, the llvmpipe
session (its files, how it is prepared and checked after login) and the NVIDIA driver profile.

The Desktop VRAM page and `mtpstudio apply`/`render`/`status` enter the desktop rooms here; the
helper that writes the system files is reached through :mod:`usecases.system_install`.
"""

from __future__ import annotations

from mtpstudio.core.desktop.reclaim import (
    DesktopUsage,
    ReclaimOption,
    default_variant,
    desktop_usage,
    reclaim_options,
)
from mtpstudio.core.desktop.session_apply import (
    DesktopFacts,
    desktop_facts,
    installed_groups,
    prepare_session,
    sddm_dirs,
    session_name,
    stored_measurement,
    switch_back_name,
    usable_variant,
)
from mtpstudio.core.desktop.session_check import SessionCheckReport, check_session
from mtpstudio.core.desktop.session_files import (
    SessionSettings,
    SessionVariant,
    render_nvidia_profile,
)
from mtpstudio.core.detect.models import DetectionReport

__all__ = [
    "DesktopUsage",
    "ReclaimOption",
    "SessionCheckReport",
    "SessionSettings",
    "SessionVariant",
    "check_session",
    "default_session",
    "default_variant",
    "desktop_facts",
    "desktop_usage",
    "installed_groups",
    "prepare_session",
    "reclaim_options",
    "render_nvidia_profile",
    "sddm_dirs",
    "session_name",
    "stored_measurement",
    "switch_back_name",
    "usable_variant",
]


def default_session(report: DetectionReport, facts: DesktopFacts) -> tuple[SessionVariant, str]:
    """The session to install when the user did not choose one, and why: the one detection
    calls for (iGPU first, software rendering otherwise), or Plasma's X11 session when that is
    the only one installed."""
    variant, why = default_variant(report)
    variant, changed = usable_variant(variant, facts, chosen=False)
    return variant, changed or why
