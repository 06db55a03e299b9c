"""System files through the privileged helper: setting the helper up on first use, previewing
and applying an install plan (the session, the driver profile, the system unit), the user's own
unit, what is installed and how to revert it.

The Desktop VRAM and Service pages, the GUI's system access and `mtpstudio apply`/`revert`/
`status` enter the helper and the install records here.
"""

from __future__ import annotations

from mtpstudio.core.desktop.helper_setup import (
    HelperState,
    HelperStatus,
    InProcessSetup,
    PkexecSetup,
    SetupFirstTransport,
    as_json,
    describe_written,
    helper_state,
    polkit_package,
    set_up_helper,
    setup_note,
)
from mtpstudio.core.desktop.install import (
    FilePreview,
    HelperAnswer,
    HelperNotSetUp,
    HelperTransport,
    InProcessHelper,
    InstallPlan,
    UserInstallResult,
    apply_plan,
    helper_for,
    install_user_unit,
    nvidia_profile_plan,
    preview,
    revert_groups,
    revert_user_group,
    system_status,
    system_unit_plan,
    user_status,
)
from mtpstudio.core.runner import Runner, SubprocessRunner

__all__ = [
    "FilePreview",
    "HelperAnswer",
    "HelperNotSetUp",
    "HelperState",
    "HelperStatus",
    "HelperTransport",
    "InProcessHelper",
    "InProcessSetup",
    "InstallPlan",
    "PkexecSetup",
    "Runner",
    "SetupFirstTransport",
    "SubprocessRunner",
    "UserInstallResult",
    "apply_plan",
    "as_json",
    "describe_written",
    "helper_for",
    "helper_state",
    "install_user_unit",
    "nvidia_profile_plan",
    "polkit_package",
    "preview",
    "revert_groups",
    "revert_user_group",
    "set_up_helper",
    "setup_note",
    "system_status",
    "system_unit_plan",
    "user_status",
]
