"""What the helper accepts: file names, text, environment files, NVIDIA profiles, and the files
it is about to replace or remove (read back field by field: ``helper.unit_shape``,
``helper.session_shape``).

Each check raises ``Refused`` with one line saying what is wrong. The rules are narrower than
the formats: the helper installs the shapes mtpstudio renders, nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mtpstudio.helper.constants import NVIDIA_PROFILE_DIR, WRAPPER_DIR
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.session_shape import check_installed_desktop, check_installed_wrapper
from mtpstudio.helper.shape_common import check_file_name, check_variable
from mtpstudio.helper.unit_shape import check_installed_env, check_installed_unit

__all__ = [
    "check_env_file",
    "check_installed",
    "check_name",
    "check_nvidia_profile",
    "check_unit_name",
    "check_variable",
    "text_of",
]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but \t and \n
_PROFILE_KEYS = {"GLVidHeapReuseRatio"}


def check_name(name: str, suffix: str) -> str:
    """A plain file name ending in ``suffix`` (no ``/``, no ``..``, no newline)."""
    return check_file_name(name, suffix)


def check_unit_name(name: str) -> str:
    """A unit file name mtpstudio writes: ``NAME.service``, never a template or instance
    (``h@.service`` started as ``h@root`` would pick its account from the instance)."""
    check_name(name, ".service")
    if "@" in name:
        raise Refused(f"{name!r} is a template or instance unit, which mtpstudio does not install")
    return name


def text_of(data: bytes, what: str) -> str:
    """UTF-8 text without NUL bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"{what} is not UTF-8 text") from None
    bad = _CONTROL.search(text)
    if bad is not None:
        # systemd's line reader also ends a line at \r and NUL: a value could smuggle a key
        raise Refused(f"{what} contains the control character {bad.group()!r}")
    return text


def check_env_file(text: str) -> None:
    """An environment file of plain ``NAME=value`` assignments (no LD_* variables)."""
    check_installed_env(text)


def check_nvidia_profile(text: str) -> None:
    """An application-profile file: procname rules and the settings mtpstudio writes."""
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Refused(f"the NVIDIA profile is not JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"rules", "profiles"}:
        raise Refused("the NVIDIA profile must hold exactly 'rules' and 'profiles'")
    profiles = data["profiles"]
    if not isinstance(profiles, list) or not profiles:
        raise Refused("the NVIDIA profile's 'profiles' must be a non-empty list")
    names = set()
    for profile in profiles:
        settings = profile.get("settings") if isinstance(profile, dict) else None
        if not isinstance(settings, list) or not isinstance(profile.get("name"), str):
            raise Refused("each NVIDIA profile needs a name and a settings list")
        for setting in settings:
            if not isinstance(setting, dict) or setting.get("key") not in _PROFILE_KEYS:
                raise Refused("the NVIDIA profile sets a key mtpstudio does not write")
            if not isinstance(setting.get("value"), int):
                raise Refused("the NVIDIA profile's values must be integers")
        names.add(profile["name"])
    rules = data["rules"]
    if not isinstance(rules, list) or not rules:
        raise Refused("the NVIDIA profile's 'rules' must be a non-empty list")
    for rule in rules:
        pattern = rule.get("pattern") if isinstance(rule, dict) else None
        if (
            not isinstance(pattern, dict)
            or pattern.get("feature") != "procname"
            or not isinstance(pattern.get("matches"), str)
            or rule.get("profile") not in names
        ):
            raise Refused("each NVIDIA rule must match a procname and name a listed profile")


def _sibling(group: Mapping[str, Any], suffix: str) -> str | None:
    """The name of the group's file whose name ends with ``suffix``."""
    for f in group["files"]:
        name = str(f["path"]).rpartition("/")[2]
        if name.endswith(suffix):
            return name
    return None


def check_installed(path: str, data: bytes, group: Mapping[str, Any], system: bool) -> None:
    """A file the helper is about to remove or replace is one it would have installed.

    The manifest names the file and its hash, but a manifest is read back as hostile input:
    the file is read back field by field and must be one of mtpstudio's shapes.
    """
    name = path.rpartition("/")[2]
    try:
        text = text_of(data, path)
        if name.endswith(".service"):
            check_unit_name(name)
            check_installed_unit(text, name, _sibling(group, ".env"), system=system)
        elif name.endswith(".env"):
            check_env_file(text)
        elif name.endswith(".desktop"):
            check_installed_desktop(text, name)
        elif path.startswith(WRAPPER_DIR + "/"):
            check_installed_wrapper(text, name)
        elif path.startswith(NVIDIA_PROFILE_DIR + "/"):
            check_nvidia_profile(text)
        elif not isinstance(json.loads(text), dict):
            raise Refused("not a JSON object")
    except (Refused, ValueError, RecursionError) as exc:
        why = f"{path} is not a file mtpstudio installs ({exc}); nothing was changed"
        raise Refused(why) from None
