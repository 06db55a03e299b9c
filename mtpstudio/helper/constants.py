"""Where the helper is installed, what polkit calls it, and the folders it may write."""

from __future__ import annotations

import re
from typing import NamedTuple

HELPER_INSTALL_PATH = "/usr/lib/mtpstudio/mtpstudio-helper"
"""The helper's installed path: the polkit policy's exec.path, PKGBUILD and install.sh use it.

Packaging installs it root-owned 0755 as a launcher run in Python's isolated mode, so neither
the caller's directory nor PYTHON* variables reach the root process::

    #!/usr/bin/python3 -I
    import sys
    from mtpstudio.helper.main import main
    sys.exit(main())
"""

POLICY_ACTION_ID = "io.github.mtpstudio.helper"
POLICY_FILE_NAME = f"{POLICY_ACTION_ID}.policy"
POLICY_INSTALL_DIR = "/usr/share/polkit-1/actions"

MAX_PAYLOAD_BYTES = 256 * 1024
STATE_DIR = "var/lib/mtpstudio"  # relative to the root: manifest, backups, measurements
MEASUREMENT_NAME = "desktop-vram-before.json"

WAYLAND_SESSIONS = "wayland-sessions"
X11_SESSIONS = "xsessions"
LOCAL_SESSION_DIRS = {
    WAYLAND_SESSIONS: "/usr/local/share/wayland-sessions",
    X11_SESSIONS: "/usr/local/share/xsessions",
}
DISTRO_SESSION_DIRS = {
    WAYLAND_SESSIONS: "/usr/share/wayland-sessions",
    X11_SESSIONS: "/usr/share/xsessions",
}
WRAPPER_DIR = "/usr/local/lib/mtpstudio"
SYSTEM_UNIT_DIR = "/etc/systemd/system"
ENV_DIR = "/etc/mtpstudio"
NVIDIA_PROFILE_DIR = "/etc/nvidia/nvidia-application-profiles-rc.d"


GROUP_SUFFIX = {"session": ".desktop", "unit": ".service", "nvidia-profile": ".json"}
"""The kinds of file groups and the suffix of each group's NAME."""


class FolderRule(NamedTuple):
    """A folder a group may hold files in (root-relative ``/…``) and the names it allows there.

    ``own``: the group's own file, named after the group (``unit:NAME`` is
    ``SYSTEM_UNIT_DIR/NAME``); the other files live in folders that only mtpstudio writes.
    """

    folder: str
    suffix: str = ""
    own: bool = False
    prefix: str = ""


SYSTEM_GROUP_FOLDERS: dict[str, tuple[FolderRule, ...]] = {
    "session": (
        *(FolderRule(d, ".desktop", own=True)
          for d in (*LOCAL_SESSION_DIRS.values(), *DISTRO_SESSION_DIRS.values())),
        FolderRule(WRAPPER_DIR),
        FolderRule(f"/{STATE_DIR}", ".json", prefix="desktop-vram-"),
    ),
    "unit": (FolderRule(SYSTEM_UNIT_DIR, ".service", own=True), FolderRule(ENV_DIR, ".env")),
    "nvidia-profile": (FolderRule(NVIDIA_PROFILE_DIR, ".json", own=True),),
}  # fmt: skip
"""What the manifest of the system layout may name; every entry is checked when it is read."""

USER_GROUP_FOLDERS: dict[str, tuple[FolderRule, ...]] = {
    "unit": (FolderRule("/systemd/user", ".service", own=True), FolderRule("/mtpstudio", ".env")),
}
"""The same for user units, relative to ``$XDG_CONFIG_HOME`` (no root involved)."""

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@+.-]{0,126}\Z")
"""A file name the helper accepts: letters, digits and ``_ @ + . -``; never ``..``."""

TEMP_MARK = ".mtpstudio-tmp"  # the helper's temp files end with this (swept after a crash)
