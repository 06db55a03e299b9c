"""Tooltips from the single sources of truth: Plan field descriptions and LaunchSpec notes."""

from __future__ import annotations

import shlex

from pydantic import BaseModel

from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.plan.schema import Plan


def field_description(path: str) -> str:
    """The ``description`` of a Plan field by dotted path (``runtime.ctx``), or ''."""
    model: type[BaseModel] = Plan
    *parents, leaf = path.split(".")
    for name in parents:
        annotation = model.model_fields[name].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    field = model.model_fields.get(leaf)
    return (field.description or "") if field is not None else ""


def flag_help(spec: LaunchSpec | None, path: str) -> str:
    """What the command line does for this setting: ``-c 32768: Context window of …``."""
    if spec is None:
        return ""
    lines = [
        f"{shlex.join(note.words)}: {note.explanation}"
        for note in spec.flags
        if note.setting == path
    ]
    return "\n".join(lines)


def setting_tooltip(path: str, spec: LaunchSpec | None, reason: str | None = None) -> str:
    """Description, then the flags it becomes, then (if any) why it is unavailable."""
    parts = [field_description(path)]
    flags = flag_help(spec, path)
    if flags:
        parts.append("On the command line:\n" + flags)
    if reason:
        parts.insert(0, f"Not available: {reason}.")
    return "\n\n".join(p for p in parts if p)
