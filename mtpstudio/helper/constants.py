"""Where the helper is installed, what polkit calls it, and the folders it may write."""

from __future__ import annotations

import re

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

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@+.-]{0,126}\Z")
"""A file name the helper accepts: letters, digits and ``_ @ + . -``; never ``..``."""

TEMP_MARK = ".mtpstudio-tmp"  # the helper's temp files end with this (swept after a crash)
