"""How the pages reach the system: the helper (pkexec, or in-process against a root), commands.

The Desktop VRAM and Service pages take one ``SystemAccess``; the default is the real system
(pkexec and the installed helper, set up first when missing, ``systemctl``). Tests and
``--root``-style previews give a temporary root instead: the helper's own code then runs
in-process against that folder, the same checks and atomic writes as through pkexec. With
``setup_in_root`` the root starts without a helper and the first change sets it up there,
through the same setup program pkexec would run (``mtpstudio/helper/self_install.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mtpstudio.core.desktop.helper_setup import (
    HelperState,
    HelperStatus,
    InProcessSetup,
    SetupFirstTransport,
)
from mtpstudio.core.desktop.install import HelperTransport, InProcessHelper
from mtpstudio.core.runner import Runner, SubprocessRunner
from mtpstudio.core.server.systemd import SYSTEM_UNIT_DIR
from mtpstudio.core.usecases.system_install import helper_for, helper_state, polkit_package
from mtpstudio.helper.constants import HELPER_INSTALL_PATH


@dataclass(frozen=True)
class SystemAccess:
    """The root the helper writes below (None: the real / through pkexec), the command runner
    (systemctl, journalctl, glxinfo) and the environment (DESKTOP_SESSION).

    ``setup_in_root``: with a ``root``, read the helper's state there and set it up there
    first (tests of the setup offer); ``os_release`` stands in for ``/etc/os-release``.
    """

    root: Path | None = None
    runner: Runner = field(default_factory=SubprocessRunner)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    helper: Path = Path(HELPER_INSTALL_PATH)
    setup_in_root: bool = False
    pkexec_missing: bool = False  # tests: a system without pkexec
    os_release: str | None = None

    def helper_state(self) -> HelperState:
        """Whether the helper is set up (a plain test root: always, the code runs in-process)."""
        if self.root is not None and not self.setup_in_root:
            package, command = polkit_package(self.os_release or "")
            return HelperState(HelperStatus.READY, self.helper, "pkexec", package, command)
        state = helper_state(
            self.root or Path("/"),
            which=(lambda _: None) if self.pkexec_missing else _which_pkexec(self.root),
            os_release=self.os_release,
        )
        if self.root is None and self.helper != Path(HELPER_INSTALL_PATH):
            missing = not self.helper.is_file()  # tests name another path
            state = HelperState(
                HelperStatus.MISSING if missing else HelperStatus.READY, self.helper,
                state.pkexec, state.package, state.install_command,
            )  # fmt: skip
        return state

    def transport(self, *, setup: bool = False) -> HelperTransport:
        """The helper; ``setup``: set it up first, in the same authentication."""
        if self.root is not None and self.setup_in_root:
            inner = InProcessHelper(self.root)
            return SetupFirstTransport(InProcessSetup(self.root), inner) if setup else inner
        return helper_for(self.root, setup=setup)

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


def _which_pkexec(root: Path | None) -> Callable[[str], str | None]:
    if root is None:
        return shutil.which
    return lambda _: "pkexec"  # a test root: the in-process setup needs no pkexec


def install_words(state: HelperState, verb: str = "Install") -> str:
    """The confirm button's words: what it does first, and that it asks for a password."""
    if state.needs_setup:
        first = (
            "Update the helper" if state.status is HelperStatus.OUTDATED else ("Set up the helper")
        )
        return f"{first} and {verb.lower()} (asks for a password)"
    return f"{verb} (asks for a password)"
