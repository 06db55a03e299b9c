"""A repository's GGUF files as models: split parts grouped, quant labels, projectors set apart."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mtpstudio.core.hub.client import RemoteFile

__all__ = ["RemoteModel", "group_models", "quant_label", "size_text"]

_SPLIT: Final = re.compile(r"^(?P<prefix>.+)-(?P<no>\d+)-of-(?P<count>\d+)\.gguf$", re.IGNORECASE)
_QUANT: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:(?:UD|i1)-)?"
    r"(?:IQ\d_[A-Z0-9]+(?:_[A-Z0-9]+)*|Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?|TQ\d_\d)"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_PROJECTOR: Final = re.compile(r"(^|[-_.])mmproj([-_.]|$)", re.IGNORECASE)


def size_text(n_bytes: int | float) -> str:
    """``18.6 GB`` or ``44.4 MB`` (decimal units, as the Hub and disk tools show sizes)."""
    if n_bytes >= 1e8:
        return f"{n_bytes / 1e9:,.1f} GB"
    return f"{n_bytes / 1e6:,.1f} MB" if n_bytes >= 1e5 else f"{n_bytes / 1e3:,.1f} kB"


def quant_label(filename: str) -> str | None:
    """The quant a GGUF file name states (``UD-Q4_K_XL``, ``IQ4_XS``, ``Q8_0``), if any."""
    stem = _SPLIT.sub(r"\g<prefix>", filename)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    found = list(_QUANT.finditer(stem))
    if not found:
        return None
    text = found[-1].group(0)
    head, _, rest = text.rpartition("-")
    return f"{head}-{rest.upper()}" if head else rest.upper()


@dataclass(frozen=True)
class RemoteModel:
    """One model of a repository: a GGUF file, or every part of a split one, in order.

    ``keep_folders``: another GGUF file of the repository has the same file name in another
    folder, so this model is shown and downloaded by its path in the repository.
    """

    parts: tuple[RemoteFile, ...]
    keep_folders: bool = False

    @property
    def path(self) -> str:
        """The first part's path in the repository (what llama.cpp is given)."""
        return self.parts[0].path

    @property
    def name(self) -> str:
        """The file name (its path when ``keep_folders``), or ``X-00001-of-00003.gguf (3
        parts)`` for a split model."""
        first = self.local_name(self.parts[0])
        return first if len(self.parts) == 1 else f"{first} ({len(self.parts)} parts)"

    def local_name(self, part: RemoteFile) -> str:
        """Where ``part`` goes below the download folder: its name, or its path in the
        repository when another file shares the name."""
        return part.path if self.keep_folders else part.name

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def quant(self) -> str | None:
        return quant_label(self.parts[0].name)

    @property
    def is_projector(self) -> bool:
        """A vision projector (``mmproj``): it goes with a model, it is not one to run."""
        return bool(_PROJECTOR.search(self.parts[0].name))


def group_models(files: Sequence[RemoteFile]) -> tuple[list[RemoteModel], list[str]]:
    """The GGUF files of a listing as models, and one sentence per file left out (an incomplete
    split model, a name with control characters, an empty file).

    Parts named ``X-0000i-of-0000N.gguf`` in the same folder form one model when all N are
    there. Files with the same name in different folders are told apart by their paths.
    Models come smallest first, vision projectors last.
    """
    singles: list[RemoteModel] = []
    splits: dict[tuple[str, int], dict[int, RemoteFile]] = {}
    notes: list[str] = []
    usable: list[RemoteFile] = []
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        if f.problem is not None:
            notes.append(f"{f.path} is left out: {f.problem}")
        elif f.size == 0:
            notes.append(f"{f.path} is left out: it is empty on the Hub (0 bytes)")
        else:
            usable.append(f)
    names = Counter(f.name for f in usable)
    for f in usable:
        m = _SPLIT.match(f.path)
        if m is None or int(m["count"]) < 2:
            singles.append(RemoteModel((f,), names[f.name] > 1))
            continue
        splits.setdefault((m["prefix"], int(m["count"])), {})[int(m["no"])] = f
    models = list(singles)
    for (prefix, count), parts in splits.items():
        missing = [i for i in range(1, count + 1) if i not in parts]
        if missing:
            shown = ", ".join(str(i) for i in missing)
            notes.append(
                f"{prefix.rsplit('/', 1)[-1]} is split into {count} parts but part(s) {shown} "
                "are missing from the repository, so it is left out"
            )
            continue
        ordered = tuple(parts[i] for i in range(1, count + 1))
        models.append(RemoteModel(ordered, any(names[p.name] > 1 for p in ordered)))
    models.sort(key=lambda m: (m.is_projector, m.size, m.path.lower()))
    return models, notes
