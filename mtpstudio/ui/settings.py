"""What the GUI remembers between runs (last plan, window geometry), in the XDG config dir.

Both files are plain, versioned JSON written atomically and read back with size and depth
limits; a damaged file is set aside as ``NAME.bad-STAMP`` with one logged sentence (the wizard
then starts from the demo default) and never stops the program.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from pathlib import Path

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.io import load_plan, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.state_files import SchemaError
from mtpstudio.core.usecases.files import load_cache, set_aside, write_text_atomic
from mtpstudio.core.usecases.words import config_dir as core_config_dir

log = logging.getLogger(__name__)

WINDOW_STATE_VERSION = 1
WINDOW_MAX_BYTES = 64 * 1024


def _window_shape(data: object) -> dict[str, object]:
    if not isinstance(data, dict):
        raise SchemaError("is not a JSON object")
    return data


def config_dir() -> Path:
    """``~/.config/mtpstudio`` (or ``$XDG_CONFIG_HOME/mtpstudio``)."""
    return core_config_dir()


class StateStore:
    """Reads and writes ``last-plan.json`` and ``window.json`` in one folder."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else config_dir()

    @property
    def plan_path(self) -> Path:
        return self.folder / "last-plan.json"

    @property
    def window_path(self) -> Path:
        return self.folder / "window.json"

    def load_plan(self) -> Plan | None:
        """The plan saved at the end of the last session, or None (missing or unusable)."""
        if not self.plan_path.is_file():
            return None
        try:
            return load_plan(self.plan_path)
        except MtpStudioError as exc:
            moved = set_aside(self.plan_path)
            where = f"; moved to {moved.name}" if moved is not None else ""
            log.warning("mtpstudio: starting from the default plan: %s%s", exc, where)
            return None

    def save_plan(self, plan: Plan) -> None:
        save_plan(plan, self.plan_path)

    def load_window(self) -> dict[str, str]:
        """``{"geometry": bytes-as-base64, "plan_file": path}`` entries that were saved."""
        data = load_cache(self.window_path, "the window state", _window_shape,
                          max_bytes=WINDOW_MAX_BYTES)  # fmt: skip
        if data is None or data.get("version") != WINDOW_STATE_VERSION:
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)}

    def load_geometry(self) -> bytes | None:
        text = self.load_window().get("geometry")
        if not text:
            return None
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None

    def save_window(self, geometry: bytes, plan_file: Path | None = None) -> None:
        data: dict[str, object] = {
            "version": WINDOW_STATE_VERSION,
            "geometry": base64.b64encode(geometry).decode("ascii"),
        }
        if plan_file is not None:
            data["plan_file"] = str(plan_file)
        write_text_atomic(self.window_path, json.dumps(data, indent=2, sort_keys=True) + "\n")
