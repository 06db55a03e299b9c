"""What the helper accepts: file names, session files, systemd units, env files, NVIDIA profiles.

Each check raises ``Refused`` with one line saying what is wrong. The rules are narrower than
the formats: the helper installs the shapes mtpstudio renders, nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mtpstudio.core import quoting
from mtpstudio.helper.constants import ENV_DIR, NAME_PATTERN, NVIDIA_PROFILE_DIR, WRAPPER_DIR
from mtpstudio.helper.safefs import Refused

_DESKTOP_KEY = re.compile(
    r"(Type|Name|Comment|Exec|TryExec|DesktopNames|X-KDE-PluginInfo-Version)"
    r"(\[[A-Za-z0-9_@.-]+\])?\Z"
)
_UNIT_KEYS = {
    "Unit": {"Description", "Documentation", "After", "Wants", "Requires",
             "StartLimitIntervalSec", "StartLimitBurst"},
    "Service": {"Type", "User", "Group", "SupplementaryGroups", "EnvironmentFile", "Environment",
                "UnsetEnvironment", "ExecStart", "Restart", "RestartSec", "TimeoutStartSec",
                "TimeoutStopSec", "KillMode", "KillSignal", "CacheDirectory", "StateDirectory",
                "RuntimeDirectory", "WorkingDirectory", "LimitMEMLOCK", "NoNewPrivileges",
                "ProtectSystem", "ProtectHome", "PrivateTmp", "ProtectKernelTunables",
                "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
                "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality",
                "SystemCallArchitectures", "RestrictAddressFamilies", "UMask", "DeviceAllow",
                "DevicePolicy", "Nice", "CapabilityBoundingSet", "AmbientCapabilities",
                "PrivateMounts", "ProtectClock", "ProtectHostname", "ProtectProc",
                "SystemCallFilter", "SystemCallErrorNumber", "IPAddressDeny", "IPAddressAllow"},
    "Install": {"WantedBy"},
}  # fmt: skip
_REPEATABLE = {"After", "Wants", "Requires", "Environment", "UnsetEnvironment", "DeviceAllow",
               "SupplementaryGroups", "WantedBy", "Documentation", "SystemCallFilter",
               "IPAddressAllow", "IPAddressDeny"}  # fmt: skip
# Keys that could hand the engine privileges: only the value mtpstudio writes is accepted.
_ONLY_VALUE = {"AmbientCapabilities": "", "CapabilityBoundingSet": ""}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but \t and \n
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ROOT_USERS = {"root", "0"}
# A plain account name: no specifier (%u, %U, %i …), no number (a uid), never root.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
_GROUPS_WRITTEN = {"video", "render"}  # SupplementaryGroups= as mtpstudio renders it
_REFUSED_VARIABLES = {"GCONV_PATH", "GLIBC_TUNABLES"}  # besides LD_*: they load code
_PROFILE_KEYS = {"GLVidHeapReuseRatio"}


def check_name(name: str, suffix: str) -> str:
    """A plain file name ending in ``suffix`` (no ``/``, no ``..``, no newline)."""
    if not NAME_PATTERN.match(name) or ".." in name or not name.endswith(suffix):
        raise Refused(f"{name!r} is not an accepted name (letters, digits, _ @ + . - ; {suffix})")
    if name == suffix:
        raise Refused(f"{name!r} is not an accepted name")
    return name


def check_unit_name(name: str) -> str:
    """A unit file name mtpstudio installs: ``NAME.service``, never a template or instance
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


def parse_desktop(text: str) -> dict[str, str]:
    """The ``[Desktop Entry]`` keys of a session file (one group, known keys, no repeats)."""
    group: str | None = None
    entries: dict[str, str] = {}
    for line in text.split("\n"):
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            if group is not None:
                raise Refused("the session file may hold only the [Desktop Entry] group")
            group = line[1:-1]
            if group != "Desktop Entry":
                raise Refused(f"the session file has the group [{group}]")
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if group is None or not sep:
            raise Refused(f"the session file has a stray line {line[:60]!r}")
        if not _DESKTOP_KEY.match(key):
            raise Refused(f"the session file sets {key}=, which mtpstudio does not write")
        if key in entries:
            raise Refused(f"the session file sets {key}= twice")
        if any(ord(c) < 0x20 and c != "\t" for c in value):
            raise Refused(f"the session file's {key}= holds a control character")
        entries[key] = value.strip()
    if group is None:
        raise Refused("the session file has no [Desktop Entry] group")
    return entries


def check_session(text: str, wrapper_name: str) -> None:
    """A session file whose Exec= and TryExec= are exactly the installed wrapper."""
    wrapper = f"{WRAPPER_DIR}/{wrapper_name}"
    entries = parse_desktop(text)
    if not entries.get("Name"):
        raise Refused("the session file has no Name=")
    if entries.get("Type", "Application") != "Application":
        raise Refused("the session file's Type= must be Application")
    try:
        argv = quoting.split_desktop_exec(entries.get("Exec", ""))
    except ValueError as exc:
        raise Refused(f"the session file's Exec= does not parse ({exc})") from None
    if argv != [wrapper]:
        raise Refused(f"the session's Exec= must be the installed wrapper {wrapper}")
    if entries.get("TryExec") != wrapper:
        raise Refused(f"the session's TryExec= must be the installed wrapper {wrapper}")


def check_wrapper(text: str) -> None:
    """A session wrapper: a bash or sh script."""
    if not text.startswith(("#!/bin/bash\n", "#!/bin/sh\n")):
        raise Refused("the session wrapper must be a #!/bin/bash or #!/bin/sh script")


def check_unit(text: str, *, system: bool, env_name: str | None) -> None:
    """A unit that parses, uses only known keys, and runs one absolute ExecStart=."""
    try:
        entries = quoting.parse_unit_file(text)
    except ValueError as exc:
        raise Refused(f"the unit does not parse ({exc})") from None
    seen: dict[tuple[str, str], str] = {}
    for section, key, value in entries:
        allowed = _UNIT_KEYS.get(section)
        if allowed is None:
            raise Refused(f"the unit has the section [{section}], which mtpstudio does not write")
        if key not in allowed:
            raise Refused(f"the unit sets {key}= in [{section}], which mtpstudio does not write")
        if (section, key) in seen and key not in _REPEATABLE:
            raise Refused(f"the unit sets {key}= twice")
        if key in _ONLY_VALUE and value != _ONLY_VALUE[key]:
            raise Refused(f"the unit sets {key}={value[:40]}, which could grant privileges")
        seen[(section, key)] = value
    exec_start = seen.get(("Service", "ExecStart"))
    if exec_start is None:
        raise Refused("the unit has no ExecStart=")
    try:
        argv = quoting.split_systemd_command_line(exec_start)
    except ValueError as exc:
        raise Refused(f"the unit's ExecStart= is not an absolute command ({exc})") from None
    if not argv[0].startswith("/"):
        raise Refused("the unit's ExecStart= must start with an absolute path")
    env_file = seen.get(("Service", "EnvironmentFile"))
    if env_file is not None:
        path = env_file.removeprefix("-")
        if not path.startswith("/"):
            raise Refused("the unit's EnvironmentFile= must be an absolute path")
        if system and path != f"{ENV_DIR}/{env_name}":
            raise Refused(f"the unit's EnvironmentFile= must be {ENV_DIR}/{env_name}")
    _check_accounts(entries, system)
    for section, key, value in entries:
        if (section, key) == ("Service", "Environment"):
            try:
                pairs = quoting.split_environment_assignments(value)
            except ValueError as exc:
                raise Refused(f"the unit's Environment= does not parse ({exc})") from None
            for name, _value in pairs:
                check_variable(name, "the unit")


def _check_accounts(entries: list[tuple[str, str, str]], system: bool) -> None:
    """User=, Group= and SupplementaryGroups= name plain accounts, never root.

    A specifier would let the account be chosen later: ``%u``/``%U`` are the manager's own user
    (root for a system unit), ``%i`` a template instance (``h@root``), ``%g``/``%G`` its group.
    """
    values = {(s, k): v for s, k, v in entries}
    user = values.get(("Service", "User"))
    if system and not user:
        raise Refused("a system unit must name its account with User=")
    for key in ("User", "Group"):
        value = values.get(("Service", key))
        if value is None:
            continue
        if value in _ROOT_USERS:
            raise Refused("mtpstudio does not install units that run as root")
        if not _ACCOUNT.match(value):
            raise Refused(
                f"the unit's {key}= must be a plain account name, not {value[:40]!r} "
                "(specifiers such as %u, %U or %i can name root)"
            )
    for section, key, value in entries:
        if (section, key) == ("Service", "SupplementaryGroups"):
            extra = set(value.split()) - _GROUPS_WRITTEN
            if extra:
                raise Refused(
                    f"the unit's SupplementaryGroups= may name only video and render, not "
                    f"{' '.join(sorted(extra))[:60]}"
                )


def check_variable(name: str, where: str) -> None:
    """A variable name a file of mtpstudio's may set: no LD_* and no other loader knobs."""
    if not _ENV_NAME.match(name):
        raise Refused(f"{where} sets {name[:60]!r}, which is not a variable name")
    if name.startswith("LD_") or name in _REFUSED_VARIABLES:
        raise Refused(f"{where} sets {name}, which mtpstudio does not write")


def check_env_file(text: str) -> None:
    """An environment file of plain ``NAME=value`` assignments (no LD_* variables)."""
    for name in quoting.parse_env_file(text):
        check_variable(name, "the environment file")


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


def _sibling(group: Mapping[str, Any], match: str) -> str | None:
    """The name of the group's file whose path matches (ends with ``match``, or in that folder)."""
    for f in group["files"]:
        path = str(f["path"])
        if path.endswith(match) or path.startswith(match + "/"):
            return path.rpartition("/")[2]
    return None


def check_installed(path: str, data: bytes, group: Mapping[str, Any], system: bool) -> None:
    """A file the helper is about to remove or replace is one it would have installed.

    The manifest names the file and its hash, but a manifest is read back as hostile input:
    the content must also pass the checks the helper's inputs pass.
    """
    name = path.rpartition("/")[2]
    try:
        text = text_of(data, path)
        if name.endswith(".service"):
            check_unit(text, system=system, env_name=_sibling(group, ".env"))
        elif name.endswith(".env"):
            check_env_file(text)
        elif name.endswith(".desktop"):
            check_session(text, _sibling(group, WRAPPER_DIR) or "")
        elif path.startswith(WRAPPER_DIR + "/"):
            check_wrapper(text)
        elif path.startswith(NVIDIA_PROFILE_DIR + "/"):
            check_nvidia_profile(text)
        elif not isinstance(json.loads(text), dict):
            raise Refused("not a JSON object")
    except (Refused, ValueError, RecursionError) as exc:
        why = f"{path} is not a file mtpstudio installs ({exc}); nothing was changed"
        raise Refused(why) from None
