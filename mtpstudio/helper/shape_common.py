"""What the helper's file shapes share: comment lines, and checks of the values a caller hands
over (one line of printable text, a boolean, a bounded list, only the keys a shape takes, file
and variable names). Each check raises ``Refused`` with one line saying what is wrong."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from typing import Any

from mtpstudio.core.quoting import RenderError
from mtpstudio.core.quoting.checks import check_one_line
from mtpstudio.helper.constants import NAME_PATTERN
from mtpstudio.helper.safefs import Refused

__all__ = [
    "MAX_TEXT",
    "MAX_WORD",
    "RenderError",
    "as_refusal",
    "bool_value",
    "check_file_name",
    "check_variable",
    "comment",
    "comment_wrap",
    "list_value",
    "only_keys",
    "pairs_value",
    "text_value",
]

# Limits on what a caller may hand over (far above anything mtpstudio renders).
MAX_WORD = 4096
MAX_TEXT = 2000

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REFUSED_VARIABLES = {"GCONV_PATH", "GLIBC_TUNABLES"}  # besides LD_*: they load code
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def comment(text: str) -> str:
    """Text for a ``#`` comment line (one line, never ending in a backslash)."""
    check_one_line(text, "a comment")
    return text.rstrip("\\ ")


def comment_wrap(text: str, first: str = "# ", rest: str | None = None, width: int = 96) -> str:
    """``text`` as ``#`` comment lines of at most ``width`` columns (hanging indent ``rest``)."""
    check_one_line(text, "a comment")
    rest = first if rest is None else rest
    lines = textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(line.rstrip("\\ ") for line in lines) or first.rstrip()


def text_value(value: Any, what: str, limit: int = MAX_TEXT, *, empty: bool = False) -> str:
    """One line of printable text (no control characters at all), at most ``limit`` long."""
    if not isinstance(value, str):
        raise Refused(f"{what} must be text")
    if not value and not empty:
        raise Refused(f"{what} is empty")
    if len(value) > limit:
        raise Refused(f"{what} is longer than {limit} characters")
    bad = _CONTROL.search(value)
    if bad is not None:
        raise Refused(f"{what} contains the control character {bad.group()!r}")
    return value


def bool_value(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise Refused(f"{what} must be true or false")
    return value


def list_value(value: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise Refused(f"{what} must be a list")
    if len(value) > limit:
        raise Refused(f"{what} has more than {limit} entries")
    return value


def only_keys(payload: Mapping[str, Any], allowed: set[str], what: str) -> None:
    extra = sorted(set(payload) - allowed)
    if extra:
        raise Refused(
            f"the input for {what} has {extra[0][:40]!r}, which the helper does not take "
            f"(it builds the files itself from: {', '.join(sorted(allowed))})"
        )


def check_variable(name: Any, where: str) -> str:
    """A variable name a file of mtpstudio's may set: no LD_* and no other loader knobs."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise Refused(f"{where} sets {str(name)[:60]!r}, which is not a variable name")
    if name.startswith("LD_") or name in _REFUSED_VARIABLES:
        raise Refused(f"{where} sets {name}, which mtpstudio does not write")
    return name


def check_file_name(name: Any, suffix: str) -> str:
    """A plain file name ending in ``suffix`` (no ``/``, no ``..``, no newline)."""
    if (
        not isinstance(name, str)
        or not NAME_PATTERN.match(name)
        or ".." in name
        or not name.endswith(suffix)
        or name == suffix
    ):
        shown = name if isinstance(name, str) else str(name)
        raise Refused(f"{shown!r} is not an accepted name (letters, digits, _ @ + . - ; {suffix})")
    return name


def pairs_value(value: Any, what: str, limit: int) -> list[tuple[Any, Any]]:
    out = []
    for item in list_value(value, what, limit):
        if not isinstance(item, list) or len(item) != 2:
            raise Refused(f"each entry of {what} must be a pair")
        out.append((item[0], item[1]))
    return out


def as_refusal(exc: RenderError) -> Refused:
    return Refused(str(exc).rstrip("."))
