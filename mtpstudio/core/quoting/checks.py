"""What every written syntax refuses: line breaks, other control characters, text that is not
UTF-8; and environment variable names."""

from __future__ import annotations

import re

from mtpstudio.core.errors import RenderError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_one_line(value: str, what: str) -> str:
    """Return ``value`` if it is one line of valid UTF-8 text without control characters.

    Raises:
        RenderError: naming ``what`` when the value has a newline, another control
            character, or characters that cannot be written as UTF-8.
    """
    if "\n" in value or "\r" in value:
        raise RenderError(
            f"{what} contains a line break, which the generated files cannot hold: {value!r}",
            hint="Rename the file or folder so that its name is on one line.",
        )
    if _CONTROL.search(value):
        raise RenderError(
            f"{what} contains a control character (such as a tab), which the generated files "
            f"cannot hold: {value!r}",
            hint="Rename the file or folder without tabs or other control characters.",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RenderError(
            f"{what} is not valid UTF-8 text: {value!r}",
            hint="Rename the file or folder so that its name is valid UTF-8.",
        ) from None
    return value


def check_env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise RenderError(
            f"{name!r} is not a valid environment variable name (letters, digits and _, "
            "not starting with a digit)"
        )
    return name
