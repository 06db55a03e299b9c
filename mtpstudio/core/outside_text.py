"""Text from outside shown on a terminal or in the GUI: control characters made visible.

Model metadata, hub file names, server answers and log lines can hold terminal escape
sequences (set the title, clear the screen, move the cursor), carriage returns that overwrite
a line, or newlines that forge one. ``visible`` is the one way mtpstudio shows such text: every
C0 and C1 control character (and the Unicode line separators and bidirectional overrides) is
written as a ``\\xNN`` / ``\\uNNNN`` escape, so it is seen, never interpreted.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CONTROL", "has_control", "visible"]

_OTHERS = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
CONTROL: Final = re.compile(f"[\x00-\x1f{_OTHERS}]")
"""Characters that change how a terminal (or a text view) shows what follows them."""

_CONTROL_BUT_TAB: Final = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, keep_tabs: bool = False) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``…);
    ``keep_tabs`` leaves tabs (log lines align with them)."""
    pattern = _CONTROL_BUT_TAB if keep_tabs else CONTROL
    return pattern.sub(_escape, text)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character ``visible`` would escape."""
    return CONTROL.search(text) is not None
