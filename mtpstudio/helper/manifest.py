"""What a manifest the helper reads back may say: its shape and the rules its inputs follow.

The helper runs as root and trusts nothing it reads back: every path must be in a folder its
group kind writes (``FolderRule``), every name must be one the helper accepts, backups must be
hash-named files of its own state folder, modes and owners must be what it would write. A
manifest that breaks any rule is refused as a whole, in one line, before anything is touched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mtpstudio.helper.constants import GROUP_SUFFIX, NAME_PATTERN, FolderRule
from mtpstudio.helper.safefs import Refused, components
from mtpstudio.helper.validate import check_name

SCHEMA = 1
MAX_GROUPS = 64
MAX_FILES_PER_GROUP = 4
MAX_CREATED_DIRS = 32
MAX_FILE_BYTES = 16 * 1024 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_LEGACY_BACKUP = re.compile(r"([0-9a-f]{16})-[0-9a-f]{8}\Z")  # sha256[:16]-random, before 0.2
_FILE_KEYS = {"path", "sha256", "size", "mode", "backup", "backup_mode", "backup_owner",
              "replaces_sha256"}  # fmt: skip
WRITTEN_MODES = (0o644, 0o755)
RESTORED_MODE_BITS = 0o755
"""A replaced file comes back with at most these bits (no group/other write, no set-id)."""


def backup_digest_prefix(name: str) -> str | None:
    """What the sha256 of a backup's content must start with (backups are named by their
    hash); None for a name that is not a backup of the helper's."""
    if _HEX64.match(name):
        return name
    legacy = _LEGACY_BACKUP.match(name)
    return legacy.group(1) if legacy else None


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _folder_rule(path: str, rules: tuple[FolderRule, ...]) -> FolderRule | None:
    folder, _, name = path.rpartition("/")
    for rule in rules:
        if folder == rule.folder and name.endswith(rule.suffix) and name.startswith(rule.prefix):
            return rule
    return None


def _check_file(entry: Any, kind: str, name: str, rules: tuple[FolderRule, ...],
                owner_uid: int) -> bool:  # fmt: skip
    """One file entry; returns whether it is the group's own file."""
    if not isinstance(entry, dict) or set(entry) != _FILE_KEYS:
        raise Refused(f"a file of {kind}:{name} does not have the helper's fields")
    path = entry["path"]
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 512:
        raise Refused(f"a file of {kind}:{name} has no absolute path")
    components(path)  # no '..', '.', or empty parts
    base = path.rpartition("/")[2]
    rule = _folder_rule(path, rules)
    if rule is None or not NAME_PATTERN.match(base) or ".." in base:
        raise Refused(f"{path!r} is not in a folder the helper writes for {kind} files")
    if rule.own and base != name:
        raise Refused(f"{path} is not the file {kind}:{name} installs")
    if not (isinstance(entry["sha256"], str) and _HEX64.match(entry["sha256"])):
        raise Refused(f"the hash recorded for {path} is not a sha256")
    replaces = entry["replaces_sha256"]
    if replaces is not None and not (isinstance(replaces, str) and _HEX64.match(replaces)):
        raise Refused(f"the earlier hash recorded for {path} is not a sha256")
    if not _is_int(entry["size"], 0, MAX_FILE_BYTES) or entry["mode"] not in WRITTEN_MODES:
        raise Refused(f"the size or mode recorded for {path} is not one the helper writes")
    backup, mode, owner = entry["backup"], entry["backup_mode"], entry["backup_owner"]
    if backup is None:
        if mode is not None or owner is not None:
            raise Refused(f"{path} has a backup mode or owner but no backup")
        return rule.own
    if not isinstance(backup, str) or backup_digest_prefix(backup) is None:
        raise Refused(f"the backup name recorded for {path} is not a hash-named backup")
    if not _is_int(mode, 0, RESTORED_MODE_BITS) or mode & ~RESTORED_MODE_BITS:
        raise Refused(f"the mode recorded for the backup of {path} is not one the helper restores")
    if (
        not isinstance(owner, list)
        or len(owner) != 2
        or not all(_is_int(v, 0, 2**32 - 2) for v in owner)
        or owner[0] != owner_uid
    ):
        raise Refused(f"the owner recorded for the backup of {path} is not one the helper restores")
    return rule.own


def _check_group(key: Any, group: Any, folders: Mapping[str, tuple[FolderRule, ...]],
                 owner_uid: int) -> None:  # fmt: skip
    kind, _, name = key.partition(":") if isinstance(key, str) else ("", "", "")
    if kind not in GROUP_SUFFIX:
        raise Refused(f"the group {str(key)[:80]!r} is not a kind the helper installs")
    check_name(name, GROUP_SUFFIX[kind])
    if not isinstance(group, dict) or set(group) != {"installed_at", "files"}:
        raise Refused(f"the group {key} does not have the helper's fields")
    stamp, files = group["installed_at"], group["files"]
    if not isinstance(stamp, str) or len(stamp) > 64:
        raise Refused(f"the group {key} has no installation time")
    if not isinstance(files, list) or not 1 <= len(files) <= MAX_FILES_PER_GROUP:
        raise Refused(f"the group {key} does not list between 1 and {MAX_FILES_PER_GROUP} files")
    own = [_check_file(f, kind, name, folders.get(kind, ()), owner_uid) for f in files]
    if own.count(True) != 1:
        raise Refused(f"the group {key} does not hold exactly one {GROUP_SUFFIX[kind]} file")
    if len({f["path"] for f in files}) != len(files):
        raise Refused(f"the group {key} lists a file twice")


def _ancestors(folder: str) -> set[str]:
    parts = components(folder)
    return {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}


def check_manifest(
    data: Any, folders: Mapping[str, tuple[FolderRule, ...]], owner_uid: int
) -> dict[str, Any]:
    """The manifest as the helper wrote it, or Refused naming the first rule it breaks.

    Args:
        data: the parsed JSON.
        folders: the layout's folder rules per group kind.
        owner_uid: the only owner a backup may be restored to (root when run as root).
    """
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise Refused("it has an unknown format")
    if not set(data) <= {"schema", "groups", "created_dirs"} or "groups" not in data:
        raise Refused("it does not have the helper's fields")
    groups = data["groups"]
    if not isinstance(groups, dict) or len(groups) > MAX_GROUPS:
        raise Refused("its groups are not a mapping of at most 64 groups")
    for key, group in groups.items():
        _check_group(key, group, folders, owner_uid)
    created = data.get("created_dirs", [])
    allowed = set().union(*(_ancestors(r.folder) for rs in folders.values() for r in rs))
    if not isinstance(created, list) or len(created) > MAX_CREATED_DIRS:
        raise Refused("its created folders are not a short list")
    for folder in created:
        if not isinstance(folder, str) or folder not in allowed:
            raise Refused(f"{str(folder)[:80]!r} is not a folder the helper creates")
    return {"schema": SCHEMA, "groups": groups, "created_dirs": list(created)}
