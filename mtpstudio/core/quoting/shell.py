"""Words for bash: one line of text, quoted as ``shlex.quote`` does."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from mtpstudio.core.quoting.checks import check_one_line


def shell_quote(arg: str, *, what: str = "a shell word") -> str:
    """``shlex.quote`` for one line of text (newlines and control characters refused)."""
    return shlex.quote(check_one_line(arg, what))


def shell_join(argv: Iterable[str]) -> str:
    """The words quoted for bash and joined with spaces."""
    return " ".join(shell_quote(a) for a in argv)
