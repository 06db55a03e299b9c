"""The plan's server as a systemd unit: is it installed, its status, start and stop, its
journal, and where system units live.

`mtpstudio server` and the Service page enter systemd here.
"""

from __future__ import annotations

from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.server.systemd import (
    SYSTEM_UNIT_DIR,
    UnitRef,
    UnitStatus,
    journal_argv,
    journal_tail,
    require_installed,
    start_unit,
    stop_unit,
    unit_status,
)

__all__ = [
    "SYSTEM_UNIT_DIR",
    "SubprocessRunner",
    "UnitRef",
    "UnitStatus",
    "installed_unit",
    "journal_argv",
    "journal_tail",
    "require_installed",
    "start_unit",
    "stop_unit",
    "unit_status",
]


def installed_unit(name: str, user: bool) -> UnitRef:
    """The unit ``name`` (``.service`` added when it has no suffix) of the user's or the
    system's manager, which must be installed and written by mtpstudio (else ServerError)."""
    unit = UnitRef.of(name, user)
    require_installed(unit)
    return unit
