"""Whether the GUI can start on this display: checked before Qt loads, so a missing xcb library
is a one-sentence error with the package to install, not an abort."""

from __future__ import annotations

from mtpstudio.core.qt_platform import check_xcb_platform

__all__ = ["check_xcb_platform"]
