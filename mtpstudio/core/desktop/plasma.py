"""The login sessions installed below a root: Plasma's own (its file, Name and Exec) and the names
the login screen lists, read from the session folders the installed SDDM reads."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from mtpstudio.core.quoting.desktop_entry import split_desktop_exec
from mtpstudio.helper.constants import (
    DISTRO_SESSION_DIRS,
    LOCAL_SESSION_DIRS,
    WAYLAND_SESSIONS,
    X11_SESSIONS,
)
from mtpstudio.helper.sddm import SessionDirs
from mtpstudio.helper.session_shape import STARTPLASMA, desktop_entry, hidden, runs_plasma

__all__ = ["STARTPLASMA", "PlasmaSession", "desktop_entry", "listed_names", "plasma_session"]
# Plasma's own file names, tried first: Plasma 6 (plasma.desktop, plasmax11.desktop) and
# Plasma 5 (plasmawayland.desktop, and plasma.desktop for X11); then any other file whose
# Exec= runs startplasma.
KNOWN_FILES = {
    WAYLAND_SESSIONS: ("plasma.desktop", "plasmawayland.desktop"),
    X11_SESSIONS: ("plasmax11.desktop", "plasma.desktop"),
}
KIND_WORDS = {WAYLAND_SESSIONS: "Wayland", X11_SESSIONS: "X11"}
OWN_SUFFIX = "-mtpstudio.desktop"
_MAX_SESSION_FILE = 256 * 1024


@dataclass(frozen=True)
class PlasmaSession:
    """Plasma's own login session of one kind, as installed.

    Attributes:
        kind: ``wayland-sessions`` or ``xsessions``.
        path: the file as seen on the system, e.g. ``/usr/share/wayland-sessions/plasma.desktop``.
        name: its ``Name=`` (what the login screen is given).
        command: its ``Exec=`` split into words: what the distribution runs to start Plasma.
        version: its ``X-KDE-PluginInfo-Version=`` (Plasma's version), when present.
    """

    kind: str
    path: str
    name: str
    command: tuple[str, ...]
    version: str | None = None


def _below(root: str, folder: str) -> str:
    return os.path.join(root, folder.lstrip("/"))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(_MAX_SESSION_FILE)
    except OSError:
        return None


def _listing(root: str, folder: str) -> list[str]:
    try:
        names = os.listdir(_below(root, folder))
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(".desktop") and not n.endswith(OWN_SUFFIX))


def session_folders(sddm: SessionDirs, kind: str) -> tuple[str, ...]:
    """Where the login screen looks for sessions of ``kind``: SDDM's folders, else the usual."""
    if sddm.installed:
        return sddm.dirs[kind]
    return LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind]


def plasma_session(root: str, sddm: SessionDirs, kind: str) -> PlasmaSession | None:
    """Plasma's own session of ``kind``, if installed: from the folders the login screen reads,
    else from the usual ones.

    Raises:
        ValueError: the file exists but its ``Exec=`` cannot be split into words.
    """
    candidates: list[tuple[int, str, str]] = []
    folders = dict.fromkeys(
        (*session_folders(sddm, kind), LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind])
    )  # the login screen's folders first; Plasma's own file where the distribution put it
    for order, folder in enumerate(folders):
        for name in _listing(root, folder):
            known = name in KNOWN_FILES[kind]
            rank = KNOWN_FILES[kind].index(name) if known else len(KNOWN_FILES[kind])
            candidates.append((order * 100 + rank, folder, name))
    for _rank, folder, name in sorted(candidates):
        text = _read(os.path.join(_below(root, folder), name))
        entries = desktop_entry(text or "")
        if not runs_plasma(entries, kind) or hidden(entries):
            continue
        path = f"{folder.rstrip('/')}/{name}"
        try:
            command = tuple(split_desktop_exec(entries["Exec"]))
        except ValueError as exc:
            raise ValueError(f"the Exec= line of {path} cannot be read ({exc})") from None
        return PlasmaSession(
            kind, path, entries.get("Name", ""), command, entries.get("X-KDE-PluginInfo-Version")
        )
    return None


def listed_names(root: str, sddm: SessionDirs, leave_out: str = "") -> list[str]:
    """The ``Name=`` of every session the login screen lists (both kinds), but ``leave_out``."""
    names: list[str] = []
    for kind in (WAYLAND_SESSIONS, X11_SESSIONS):
        for folder in session_folders(sddm, kind):
            for file_name in _listing(root, folder):
                if file_name == leave_out:
                    continue
                entries = desktop_entry(_read(os.path.join(_below(root, folder), file_name)) or "")
                if entries.get("Name") and not hidden(entries):
                    names.append(entries["Name"])
    return names


def missing_plasma(kind: str, sddm: SessionDirs, others: Sequence[PlasmaSession]) -> str:
    """One sentence: Plasma's session of ``kind`` is not installed, where it was looked for."""
    folders = (*session_folders(sddm, kind), LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind])
    where = ", ".join(dict.fromkeys(folders))
    text = f"Plasma's {KIND_WORDS[kind]} session is not installed here (none in {where})"
    if others:
        found = ", ".join(f"{KIND_WORDS[o.kind]} ({o.path})" for o in others)
        text += f"; installed: {found}"
    return text
