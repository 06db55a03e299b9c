"""A file mtpstudio renders for installing: its text, mode and place, and what it is for.

The service's files (``core.service``) and the desktop's session and driver-profile files
(``core.desktop.session_files``) are both returned as ``RenderedFile``; exporting and the
helper's install take them from either room.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RenderedFile:
    """One generated file and where it is meant to go.

    Attributes:
        name: the file name.
        text: the whole content.
        mode: permission bits to write it with.
        install_path: the suggested absolute path.
        explanation: one line for the GUI / CLI listing.
        privileged: installing it needs root (the helper).
        warnings: things to tell the user about this file.
        params: for a file the helper installs, the values it builds the file from (what is
            handed to it instead of the text).
    """

    name: str
    text: str
    mode: int
    install_path: Path
    explanation: str
    privileged: bool = False
    warnings: tuple[str, ...] = ()
    params: Mapping[str, Any] | None = None
