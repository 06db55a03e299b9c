"""The service's files, as the faces write, export and install them (``core.service``).

``render``/``export-unit``/``apply unit`` and the Service page take the files of a plan resolved
once (``workbench.resolved_for`` / ``Workbench.resolved``) from here.
"""

from __future__ import annotations

from mtpstudio.core.planner.resolve import ResolvedPlan
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.boot_placement import boot_placement, boot_placement_gap
from mtpstudio.core.service.export import ServiceSet, write_files, write_service_set
from mtpstudio.core.service.render import UnitScope
from mtpstudio.core.service.service_files import (
    EngineNotHereError,
    RootAccountError,
    ServiceFiles,
    check_exportable,
    export_files,
    install_files,
)

__all__ = [
    "EngineNotHereError",
    "RenderedFile",
    "RootAccountError",
    "ServiceFiles",
    "ServiceSet",
    "UnitScope",
    "boot_words",
    "check_exportable",
    "export_files",
    "install_files",
    "write_files",
    "write_service_set",
]


def boot_words(resolved: ResolvedPlan) -> list[str]:
    """What a system unit of ``resolved`` (it starts at boot, before the desktop) runs, and
    the two moments, where they differ from the plan's own budget (empty: they do not)."""
    boot = boot_placement(resolved)
    if boot is not None:
        return boot.words()
    gap = boot_placement_gap(resolved, boot)
    return [] if gap is None else [gap]
