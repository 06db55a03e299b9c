"""What the installed SDDM reads: its version (package database), config and session folders.

Facts from SDDM's sources at the tags v0.19.0, v0.20.0 and v0.21.0 (``Configuration.h``,
``ConfigReader.cpp``, ``Session.cpp``, ``SessionModel.cpp``) and from the installed programs'
``sddm --example-config``:

* config files, later wins: every file in ``/usr/lib/sddm/sddm.conf.d``, then in
  ``/etc/sddm.conf.d`` (each folder in name order), then ``/etc/sddm.conf``; a ``#`` starts a
  comment anywhere on a line; ``[XDisplay]`` / ``[WaylandDisplay]`` are the pre-0.14 names of
  ``[X11]`` / ``[Wayland]``, the sections of every version since;
* ``SessionDir`` is one folder up to 0.19 (default ``/usr/share/…``: a comma list names a folder
  that does not exist) and a comma list from 0.20 (default ``/usr/local/share/…,/usr/share/…``);
* the session menu shows a Wayland session's ``Name`` with " (Wayland)" appended up to 0.19
  (unless it already ends so); from 0.20 only when another session has the same name.

The version comes from the package database (``dpkg-query``, ``pacman -Q``; with a root, that
root's database), never by starting ``sddm``: it has no ``--version`` and would start the
display manager.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mtpstudio.helper.constants import (
    DISTRO_SESSION_DIRS,
    LOCAL_SESSION_DIRS,
    SYSTEM_GROUP_FOLDERS,
    WAYLAND_SESSIONS,
    X11_SESSIONS,
    FolderRule,
)
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.store import Layout

SECTIONS = {WAYLAND_SESSIONS: "Wayland", X11_SESSIONS: "X11"}
CONFIG_DIRS = ("usr/lib/sddm/sddm.conf.d", "etc/sddm.conf.d")
CONFIG_FILE = "etc/sddm.conf"
LIST_VERSION = (0, 20, 0)
"""The first SDDM whose SessionDir is a list (with /usr/local/share first by default)."""
WAYLAND_SUFFIX = " (Wayland)"
PACKAGE_TIMEOUT_S = 10.0
# The package tools, looked up in the system folders only (the helper runs as root).
_SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_OLD_SECTION_NAMES = {"XDisplay": "X11", "WaylandDisplay": "Wayland"}
_MAX_CONFIG = 1024 * 1024


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    """(0, 19, 0) from '0.19.0-5', '4:0.19.0-5', '0.21.0.r14.gae072f9-1' or 'sddm 0.21.0'."""
    match = _VERSION.search((version or "").rpartition(":")[2])
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


# --------------------------------------------------------------------------------------------
# the package database


def _run(argv: Sequence[str]) -> tuple[int, str] | None:
    """(exit status, stdout) of a package tool, or None when it is not installed."""
    tool = shutil.which(argv[0], path=_SYSTEM_PATH)
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, *argv[1:]],
            capture_output=True,
            timeout=PACKAGE_TIMEOUT_S,
            env={"PATH": _SYSTEM_PATH, "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, done.stdout.decode(errors="replace")


def _dpkg_status_version(status: str) -> str | None:
    """The installed sddm's version from a dpkg status file, read to its end."""
    fields: dict[str, str] = {}
    with open(status, encoding="utf-8", errors="replace") as handle:
        for line in [*handle, "\n"]:
            if line.strip():
                key, sep, value = line.partition(":")
                if sep and not line[0].isspace():
                    fields[key] = value.strip()
                continue
            if fields.get("Package") == "sddm":
                installed = fields.get("Status", "").split()[-1:] == ["installed"]
                return fields.get("Version") if installed else None
            fields = {}
    return None


def _dpkg_version(root: str) -> tuple[str | None, str] | None:
    admindir = os.path.join(root, "var/lib/dpkg")
    status = os.path.join(admindir, "status")
    if not os.path.isfile(status):
        return None
    answer = _run(["dpkg-query", f"--admindir={admindir}", "-W",
                   "-f=${db:Status-Abbrev}|${Version}", "sddm"])  # fmt: skip
    if answer is None:  # no dpkg-query here (another distribution's tree): read the file
        return _dpkg_status_version(status), "dpkg database"
    code, out = answer
    state, _, version = out.partition("|")
    if code == 0 and state.startswith("ii") and version.strip():
        return version.strip(), "dpkg-query"
    return None, "dpkg-query"


def _pacman_desc_version(local: str) -> str | None:
    try:
        entries = sorted(os.listdir(local))
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("sddm-"):
            continue
        try:
            with open(os.path.join(local, entry, "desc"), encoding="utf-8") as handle:
                lines = handle.read(_MAX_CONFIG).splitlines()
        except OSError:
            continue
        values = {lines[i]: lines[i + 1] for i in range(len(lines) - 1) if lines[i][:1] == "%"}
        if values.get("%NAME%") == "sddm" and values.get("%VERSION%"):
            return values["%VERSION%"]
    return None


def _pacman_version(root: str) -> tuple[str | None, str] | None:
    dbpath = os.path.join(root, "var/lib/pacman")
    local = os.path.join(dbpath, "local")
    if not os.path.isdir(local):
        return None
    answer = _run(["pacman", "-Q", "--dbpath", dbpath, "sddm"])
    if answer is None:  # no pacman here: its database is one folder per package
        return _pacman_desc_version(local), "pacman database"
    code, out = answer
    words = out.split()
    if code == 0 and len(words) == 2 and words[0] == "sddm":
        return words[1], "pacman -Q"
    return None, "pacman -Q"


def package_version(root: str) -> tuple[str | None, str | None]:
    """(version, how it was read) of the sddm package in the package database below ``root``.

    ``(None, "dpkg-query")`` means the database was read and holds no installed sddm;
    ``(None, None)`` that there is no dpkg or pacman database.
    """
    asked: str | None = None
    for lookup in (_dpkg_version, _pacman_version):
        found = lookup(root)
        if found is None:
            continue
        if found[0] is not None:
            return found
        asked = asked or found[1]
    return None, asked


# --------------------------------------------------------------------------------------------
# the config files


def config_files(root: str) -> list[str]:
    """SDDM's config files below ``root`` in reading order (later wins), root-relative."""
    found: list[str] = []
    for folder in CONFIG_DIRS:
        try:
            names = sorted(os.listdir(os.path.join(root, folder)))
        except OSError:
            continue
        found += [f"{folder}/{n}" for n in names if os.path.isfile(os.path.join(root, folder, n))]
    if os.path.isfile(os.path.join(root, CONFIG_FILE)):
        found.append(CONFIG_FILE)
    return found


def parse_config(text: str) -> dict[tuple[str, str], str]:
    """(section, key) -> value as SDDM's ConfigReader reads a file: ``#`` comments anywhere,
    values trimmed and unquoted, ``[XDisplay]``/``[WaylandDisplay]`` read as X11/Wayland."""
    values: dict[tuple[str, str], str] = {}
    section = "General"
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        section = _OLD_SECTION_NAMES.get(section, section)
        key, sep, value = line.partition("=")
        if sep:
            values[(section, key.strip())] = value.strip()
        elif line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
    return values


def _read_config(root: str, rel: str) -> str:
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as handle:
            return handle.read(_MAX_CONFIG)
    except OSError:
        return ""


# --------------------------------------------------------------------------------------------
# the answer


@dataclass(frozen=True)
class SessionDirs:
    """The folders SDDM lists sessions from, per kind, and how that was worked out.

    ``version`` is the package's version (e.g. ``0.19.0-5``); ``problems`` holds, per kind, why
    SDDM lists no session at all from its setting (e.g. a comma list in 0.19).
    """

    version: str | None
    version_source: str | None
    dirs: dict[str, tuple[str, ...]]
    sources: dict[str, str]
    installed: bool
    notes: tuple[str, ...] = field(default=())
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def lists(self) -> bool:
        """SessionDir is a comma list (SDDM 0.20 and newer, or a version not known)."""
        parsed = version_tuple(self.version)
        return parsed is None or parsed >= LIST_VERSION

    def target(self, kind: str) -> str | None:
        """Where mtpstudio puts a session of ``kind``: ``/usr/local/share/…`` when SDDM reads it
        (or no SDDM is installed: GDM and others look there), else ``/usr/share/…``, else the
        folder the administrator configured; None when SDDM can list no session at all."""
        if not self.installed:
            return LOCAL_SESSION_DIRS[kind]
        read = self.dirs[kind]
        if kind in self.problems or not read:
            return None
        for candidate in (LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind]):
            if candidate in read:
                return candidate
        return read[0]

    def explain(self, kind: str) -> str:
        """One sentence: which folder, and why."""
        target = self.target(kind)
        if not self.installed:
            return f"SDDM is not installed; sessions go to {target}, where GDM and others look."
        who = f"sddm {self.version} ({self.version_source})" if self.version else "SDDM"
        read = ", ".join(self.dirs[kind])
        if target is None:
            return f"{who}: {self.problems.get(kind) or 'no session folder is configured'}."
        return f"{who} reads {read} ({self.sources[kind]}); the session goes to {target}."

    def shown_name(self, name: str, kind: str, others: Iterable[str] = ()) -> str:
        """What SDDM's session menu shows for a session called ``name`` of ``kind``, next to
        sessions called ``others``."""
        if not self.installed or kind != WAYLAND_SESSIONS:
            return name
        if not self.lists:  # 0.19 and older always mark Wayland sessions
            return name if name.endswith(WAYLAND_SUFFIX) else name + WAYLAND_SUFFIX
        return name + WAYLAND_SUFFIX if name in set(others) else name


def _defaults(kind: str, lists: bool) -> tuple[str, ...]:
    if lists:
        return LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind]
    return (DISTRO_SESSION_DIRS[kind],)


def _folders(setting: str, lists: bool) -> tuple[tuple[str, ...], str | None]:
    """The folders a SessionDir value names, and why it names none."""
    parts = [p.strip() for p in setting.split(",")] if lists else [setting.strip()]
    folders = tuple(p.rstrip("/") or "/" for p in parts if p)
    if not lists and "," in setting:
        return folders, (
            f"SDDM before 0.20 reads SessionDir={setting} as one folder of that name, so the "
            "login screen lists no session from it; set one folder"
        )
    relative = [f for f in folders if not f.startswith("/")]
    if relative:
        return folders, f"SessionDir names {relative[0]}, which is not an absolute folder"
    return folders, None


def session_dirs(root: str = "/", version: str | None = None) -> SessionDirs:
    """What the SDDM installed below ``root`` reads (``version`` overrides the package one)."""
    source: str | None = "given"
    if version is None:
        version, source = package_version(root)
    files = config_files(root)
    installed = (
        version is not None or bool(files) or os.path.exists(os.path.join(root, "usr/bin/sddm"))
    )
    parsed = version_tuple(version)
    lists = parsed is None or parsed >= LIST_VERSION
    notes: list[str] = []
    if installed and parsed is None:
        notes.append(
            "SDDM's version is unknown (no sddm package in the dpkg or pacman database): "
            "mtpstudio uses the folders every SDDM version reads by default"
        )
    settings = [(rel, parse_config(_read_config(root, rel))) for rel in files]
    dirs: dict[str, tuple[str, ...]] = {}
    sources: dict[str, str] = {}
    problems: dict[str, str] = {}
    for kind, section in SECTIONS.items():
        value: tuple[str, ...] = _defaults(kind, lists and parsed is not None)
        why = "its default, as `sddm --example-config` prints it"
        problem = None
        for rel, parsed_file in settings:
            setting = parsed_file.get((section, "SessionDir"))
            if setting is not None:
                value, problem = _folders(setting, lists)
                why = f"SessionDir in /{rel}, section [{section}]"
        dirs[kind] = value
        sources[kind] = why
        if problem is not None or not value:
            problems[kind] = f"{problem or 'SessionDir names no folder'} ({why})"
    return SessionDirs(
        version, source if version else None, dirs, sources, installed, tuple(notes), problems
    )


def allowed_session_dir(root: str, sessions_dir: str) -> str:
    """The kind of session folder ``sessions_dir`` is, when the helper may write there:
    ``/usr/local/share/{wayland-sessions,xsessions}`` always, else only the folder the installed
    SDDM's own (root-owned) configuration makes the target. Raises Refused otherwise."""
    dirs: SessionDirs | None = None
    for kind, local in LOCAL_SESSION_DIRS.items():
        if sessions_dir == local:
            return kind
    for kind in LOCAL_SESSION_DIRS:
        dirs = dirs or session_dirs(root)
        if dirs.installed and sessions_dir == dirs.target(kind):
            return kind
    if sessions_dir in DISTRO_SESSION_DIRS.values():
        raise Refused(f"{sessions_dir} is used only where SDDM reads nothing else")
    raise Refused(f"{sessions_dir!r} is not a session folder the helper writes")


def system_layout(root: str = "/") -> Layout:
    """The system tree's layout: the fixed folders, plus the session folder that the installed
    SDDM's own (root-owned) configuration makes the target when it is none of them, so a session
    installed there is one the manifest may name (and revert can remove)."""
    rules = SYSTEM_GROUP_FOLDERS["session"]
    fixed = {r.folder for r in rules}
    dirs = session_dirs(root)
    configured = {dirs.target(kind) for kind in LOCAL_SESSION_DIRS} if dirs.installed else set()
    extra = tuple(
        FolderRule(folder, ".desktop", own=True)
        for folder in sorted(f for f in configured if f and f not in fixed)
    )
    if not extra:
        return Layout(root=root)
    return Layout(root=root, folders={**SYSTEM_GROUP_FOLDERS, "session": (*rules, *extra)})
