"""The service's files, as the faces write, export and install them (``core.service``).

``render``/``export-unit``/``apply unit`` and the Service page take the files of a plan resolved
once (``workbench.resolved_for`` / ``Workbench.resolved``) from here.
"""

from __future__ import annotations

from mtpstudio.core.rendered_file import RenderedFile
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
    "check_exportable",
    "export_files",
    "install_files",
    "write_files",
    "write_service_set",
]
