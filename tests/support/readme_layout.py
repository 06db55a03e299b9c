"""The README's Layout section read as the tree it draws.

Each line of the ``text`` block is ``<branches><name>  <note>``: the branches (``├── ``,
``└── ``, ``│   ``, four spaces) say how deep the entry sits, a name ending in ``/`` is a
folder. A note's backticked ``name.py`` or ``name/`` (a name with an extension, or a folder)
is in that folder; a backticked name with a ``/`` inside is a path from the repository's root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_BRANCHES = r"(?:├── |└── |│   |    )"
_BRANCH = re.compile(_BRANCHES)
_ENTRY = re.compile(
    rf"^(?P<branches>{_BRANCHES}*)(?P<name>[^\s`│├└][^\s`]*)(?:\s{{2,}}(?P<note>.*))?$"
)
_LOCAL_NAME = re.compile(r"[\w-]+(?:\.[\w-]+)*\.\w+|[\w-]+/")


@dataclass(frozen=True)
class LayoutEntry:
    path: str  # from the repository's root; a folder ends in /
    note: str

    @property
    def named(self) -> list[str]:
        """Every path the note names: in this folder, or from the root when it holds a /."""
        out = []
        for name in re.findall(r"`([^`\s]+)`", self.note):
            inner = name.rstrip("/")
            if "/" in inner:
                if not name.startswith("../"):
                    out.append(name)
            elif self.path.endswith("/") and _LOCAL_NAME.fullmatch(name):
                out.append(self.path + name)
        return out


def layout_entries(readme: str) -> list[LayoutEntry]:
    """The tree in the README's Layout section, each entry with its full path."""
    match = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if match is None:
        return []
    block = re.search(r"^```text\n(.*?)^```", match.group(1), re.M | re.S)
    if block is None:
        return []
    entries: list[LayoutEntry] = []
    folders: list[str] = []
    for line in block.group(1).splitlines():
        found = _ENTRY.match(line)
        if found is None or not line.strip():
            raise ValueError(f"not a tree line: {line!r}")
        depth = len(_BRANCH.findall(found.group("branches")))
        if depth > len(folders):
            raise ValueError(f"{line!r} sits under no folder")
        del folders[depth:]
        path = "".join(folders) + found.group("name")
        entries.append(LayoutEntry(path, found.group("note") or ""))
        if path.endswith("/"):
            folders.append(found.group("name"))
    return entries


def missing_layout_paths(readme: str, root: Path) -> list[str]:
    """Every path the tree or its notes name that is not in ``root``."""
    named = [p for e in layout_entries(readme) for p in (e.path, *e.named)]
    return [p for p in dict.fromkeys(named) if not (root / p).exists()]
