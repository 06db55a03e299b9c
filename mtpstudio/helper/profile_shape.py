"""The NVIDIA driver profile of mtpstudio's (``GLVidHeapReuseRatio=0`` for the desktop's
processes), built from the process names alone."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mtpstudio.core.quoting.checks import check_one_line
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.shape_common import RenderError, list_value, only_keys

NVIDIA_PROFILE_NAME = "50-mtpstudio-desktop-vram.json"
NVIDIA_PROFILE_PROCESSES = ("kwin_wayland", "Xwayland", "plasmashell")
_PROFILE_TITLE = "mtpstudio: return freed video memory in the desktop"
_PROCESS_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z")


def render_nvidia_profile(processes: Sequence[str] = NVIDIA_PROFILE_PROCESSES) -> str:
    """The profile ``GLVidHeapReuseRatio=0`` for ``processes`` (procname rules)."""
    if not processes:
        raise RenderError("the NVIDIA profile needs at least one process")
    rules = []
    for proc in processes:
        check_one_line(proc, "a process name")
        rules.append(
            "    {\n"
            f'      "pattern": {{ "feature": "procname", "matches": {_json_string(proc)} }},\n'
            f'      "profile": "{_PROFILE_TITLE}"\n'
            "    }"
        )
    return (
        "{\n"
        '  "rules": [\n' + ",\n".join(rules) + "\n  ],\n"
        '  "profiles": [\n'
        "    {\n"
        f'      "name": "{_PROFILE_TITLE}",\n'
        '      "settings": [ { "key": "GLVidHeapReuseRatio", "value": 0 } ]\n'
        "    }\n"
        "  ]\n"
        "}\n"
    )


def _json_string(text: str) -> str:
    return json.dumps(text)


def nvidia_profile_from_params(name: str, payload: Mapping[str, Any]) -> tuple[str, ...]:
    """The processes ``install-nvidia-profile NAME`` asks for; Refused otherwise."""
    if name != NVIDIA_PROFILE_NAME:
        raise Refused(f"the NVIDIA profile is called {NVIDIA_PROFILE_NAME}, not {name!r}")
    only_keys(payload, {"processes"}, "the NVIDIA profile")
    processes = list_value(payload.get("processes"), "processes", 32)
    if not processes:
        raise Refused("the NVIDIA profile needs at least one process")
    for proc in processes:
        if not isinstance(proc, str) or not _PROCESS_NAME.match(proc):
            raise Refused(f"{str(proc)[:40]!r} is not a process name")
    return tuple(processes)
