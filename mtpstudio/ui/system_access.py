"""How the pages reach the system: the helper (pkexec, or in-process against a root), commands.

The Desktop VRAM and Service pages take one ``SystemAccess``; the default is the real system
(pkexec and the installed helper, ``systemctl``). Tests and ``--root``-style previews give a
temporary root instead: the helper's own code then runs in-process against that folder, the
same checks and atomic writes as through pkexec.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mtpstudio.core.desktop.install import HelperTransport, helper_for
from mtpstudio.core.runner import Runner, SubprocessRunner
from mtpstudio.core.server.systemd import SYSTEM_UNIT_DIR
from mtpstudio.helper.constants import HELPER_INSTALL_PATH


@dataclass(frozen=True)
class SystemAccess:
    """The root the helper writes below (None: the real / through pkexec), the command runner
    (systemctl, journalctl, glxinfo) and the environment (DESKTOP_SESSION)."""

    root: Path | None = None
    runner: Runner = field(default_factory=SubprocessRunner)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    helper: Path = Path(HELPER_INSTALL_PATH)

    def transport(self) -> HelperTransport:
        return helper_for(self.root)

    def helper_missing(self) -> str | None:
        """Why system files cannot be written now (the helper is not installed), else None."""
        if self.root is not None or self.helper.is_file():
            return None
        return f"mtpstudio's helper, which writes system files, is not installed at {self.helper}"

    def system_unit_dir(self) -> Path:
        """Where system units are, below the root."""
        if self.root is None:
            return SYSTEM_UNIT_DIR
        return self.root / str(SYSTEM_UNIT_DIR).lstrip("/")

    @property
    def via(self) -> str:
        """How system files are written, for the buttons' tooltips."""
        if self.root is None:
            return "through the privileged helper (pkexec asks for an administrator's password)"
        return f"by the helper's own code into {self.root} (a test root: no password)"
