"""The choices and defaults the commands register with (argparse), kept light: importing this
loads no heavy library, so `mtpstudio --help` stays quick."""

from __future__ import annotations

from mtpstudio.core.bench.choices import EXPORT_FORMATS, PRESET_NAMES
from mtpstudio.core.server.health import DEFAULT_STARTUP_TIMEOUT_S

__all__ = ["DEFAULT_STARTUP_TIMEOUT_S", "EXPORT_FORMATS", "PRESET_NAMES"]
