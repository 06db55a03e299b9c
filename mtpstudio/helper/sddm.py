"""Which session folders the installed SDDM reads: its version and any SessionDir setting.

SDDM ≥ 0.20 reads ``[Wayland] SessionDir`` / ``[X11] SessionDir`` (defaults
``/usr/local/share/…,/usr/share/…``); SDDM ≤ 0.19 (Debian 12) reads ``[WaylandDisplay]`` /
``[XDisplay] SessionDir`` with the single default ``/usr/share/…``. Config files are read in
SDDM's order, later wins: ``/usr/lib/sddm/sddm.conf.d/*.conf``, ``/etc/sddm.conf.d/*.conf``,
``/etc/sddm.conf``. The version comes from the package database (pacman or dpkg) below the
root, so the same answer holds for ``--root`` trees; callers may pass a version they read
otherwise (``sddm --version``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from mtpstudio.helper.constants import (
    DISTRO_SESSION_DIRS,
    LOCAL_SESSION_DIRS,
    WAYLAND_SESSIONS,
    X11_SESSIONS,
)

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_NEW_SECTIONS = {WAYLAND_SESSIONS: "Wayland", X11_SESSIONS: "X11"}
_OLD_SECTIONS = {WAYLAND_SESSIONS: "WaylandDisplay", X11_SESSIONS: "XDisplay"}
_MAX_CONFIG = 1024 * 1024


@dataclass(frozen=True)
class SessionDirs:
    """The folders SDDM lists sessions from, per kind, and how that was worked out."""

    version: str | None
    version_source: str | None
    dirs: dict[str, tuple[str, ...]]
    sources: dict[str, str]
    installed: bool
    notes: tuple[str, ...] = field(default=())

    def target(self, kind: str) -> str | None:
        """Where mtpstudio puts a session of ``kind``: ``/usr/local/share/…`` when SDDM reads
        it, else ``/usr/share/…`` when that is what it reads, else None (a custom folder)."""
        if not self.installed:
            return LOCAL_SESSION_DIRS[kind]
        read = self.dirs[kind]
        for candidate in (LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind]):
            if candidate in read:
                return candidate
        return None

    def explain(self, kind: str) -> str:
        """One sentence: which folder, and why."""
        target = self.target(kind)
        if not self.installed:
            return f"SDDM is not installed; sessions go to {target}, where GDM and others look."
        version = f"sddm {self.version} ({self.version_source})" if self.version else "SDDM"
        read = ", ".join(self.dirs[kind])
        if target is None:
            return f"{version} reads only {read} ({self.sources[kind]}), not a standard folder."
        return f"{version} reads {read} ({self.sources[kind]}); the session goes to {target}."


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    match = _VERSION.search(version or "")
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _read(root: str, rel: str) -> str | None:
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as handle:
            return handle.read(_MAX_CONFIG)
    except OSError:
        return None


def package_version(root: str) -> tuple[str | None, str | None]:
    """(version, where it was read) of the sddm package from pacman's or dpkg's database."""
    local = os.path.join(root, "var/lib/pacman/local")
    try:
        for entry in sorted(os.listdir(local)):
            match = re.fullmatch(r"sddm-(\d[^-]*)-[^-]+", entry)
            if match:
                return match.group(1), "pacman database"
    except OSError:
        pass
    status = _read(root, "var/lib/dpkg/status") or ""
    for stanza in status.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if fields.get("Package") == "sddm" and "installed" in fields.get("Status", "").split():
            version = fields.get("Version", "")
            version = version.split(":", 1)[-1].split("-", 1)[0]
            return version or None, "dpkg database"
    return None, None


def config_files(root: str) -> list[str]:
    """SDDM's config files below ``root`` in reading order (later wins), root-relative."""
    found: list[str] = []
    for folder in ("usr/lib/sddm/sddm.conf.d", "etc/sddm.conf.d"):
        try:
            names = sorted(os.listdir(os.path.join(root, folder)))
        except OSError:
            continue
        found += [f"{folder}/{n}" for n in names if n.endswith(".conf")]
    if os.path.isfile(os.path.join(root, "etc/sddm.conf")):
        found.append("etc/sddm.conf")
    return found


def parse_ini(text: str) -> dict[tuple[str, str], str]:
    """(section, key) -> value of an SDDM config file (Qt-style INI, ``#``/``;`` comments)."""
    values: dict[tuple[str, str], str] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[(section, key.strip())] = value.strip().strip('"')
    return values


def session_dirs(root: str = "/", version: str | None = None) -> SessionDirs:
    """What the SDDM installed below ``root`` reads (``version`` overrides the package one)."""
    source = "given"
    if version is None:
        version, source_or_none = package_version(root)
        source = source_or_none or ""
    files = config_files(root)
    installed = (
        version is not None or bool(files) or os.path.exists(os.path.join(root, "usr/bin/sddm"))
    )
    parsed = version_tuple(version)
    old = parsed is not None and parsed < (0, 20, 0)
    notes: list[str] = []
    if installed and parsed is None:
        notes.append("SDDM's version is unknown; assuming 0.20 or newer")
    sections = _OLD_SECTIONS if old else _NEW_SECTIONS
    dirs: dict[str, tuple[str, ...]] = {}
    sources: dict[str, str] = {}
    for kind in (WAYLAND_SESSIONS, X11_SESSIONS):
        if old:
            default: tuple[str, ...] = (DISTRO_SESSION_DIRS[kind],)
            why = f"the default of sddm {version}, which has no /usr/local default"
        else:
            default = (LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind])
            why = "SDDM's default"
        value: tuple[str, ...] = default
        for rel in files:
            setting = parse_ini(_read(root, rel) or "").get((sections[kind], "SessionDir"))
            if setting is not None:
                value = tuple(d.strip().rstrip("/") for d in setting.split(",") if d.strip())
                why = f"SessionDir in /{rel}, section [{sections[kind]}]"
        dirs[kind] = value
        sources[kind] = why
    return SessionDirs(version, source if version else None, dirs, sources, installed, tuple(notes))
