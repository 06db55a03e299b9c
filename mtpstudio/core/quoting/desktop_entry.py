""".desktop entries: string values and the ``Exec=`` key (the freedesktop Desktop Entry spec,
"The Exec key"), and the reader that splits ``Exec=`` back."""

from __future__ import annotations

from collections.abc import Sequence

from mtpstudio.core.errors import RenderError
from mtpstudio.core.quoting.checks import check_one_line

# Desktop Entry spec, "The Exec key": reserved characters force quoting.
_DESKTOP_RESERVED = frozenset(" \t\n\"'\\><~|&;$*?#()`")

_DESKTOP_ESCAPE_IN_QUOTES = frozenset('"`$\\')


def desktop_string(value: str, *, what: str = "a .desktop value") -> str:
    """A ``string``/``localestring`` value: one line, ``\\`` doubled, a leading space as ``\\s``."""
    check_one_line(value, what)
    escaped = value.replace("\\", "\\\\")
    if escaped.startswith(" "):
        escaped = "\\s" + escaped[1:]
    return escaped


def desktop_exec_arg(arg: str) -> str:
    """One ``Exec=`` argument before the file-level string escaping (see ``desktop_exec_line``).

    Arguments with reserved characters are double-quoted, and inside the quotes ``"``, `` ` ``,
    ``$`` and ``\\`` take a backslash; ``%`` is written ``%%`` (field codes).
    """
    check_one_line(arg, "a .desktop Exec argument")
    body = arg.replace("%", "%%")
    if arg and not any(c in _DESKTOP_RESERVED for c in arg):
        return body
    inner = "".join("\\" + c if c in _DESKTOP_ESCAPE_IN_QUOTES else c for c in body)
    return f'"{inner}"'


def desktop_exec_line(argv: Sequence[str]) -> str:
    """The value of ``Exec=``: arguments quoted per the spec, then string-escaped."""
    if not argv:
        raise RenderError("an empty command cannot be written into a .desktop file")
    line = " ".join(desktop_exec_arg(a) for a in argv)
    return line.replace("\\", "\\\\")


def desktop_unescape_string(value: str) -> str:
    """A ``.desktop`` string value as it reads (its ``\\s \\n \\t \\r \\\\`` escapes undone)."""
    out: list[str] = []
    i = 0
    table = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value) and value[i + 1] in table:
            out.append(table[value[i + 1]])
            i += 2
            continue
        if c == "\\":
            raise ValueError(f"unknown string escape in {value!r}")
        out.append(c)
        i += 1
    return "".join(out)


def split_desktop_exec(value: str) -> list[str]:
    """The argv of an ``Exec=`` value per the Desktop Entry spec (field codes: only ``%%``)."""
    line = desktop_unescape_string(value)
    args: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] == " ":
            i += 1
        if i >= n:
            break
        out: list[str] = []
        if line[i] == '"':
            i += 1
            while True:
                if i >= n:
                    raise ValueError("unclosed quote in Exec")
                c = line[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\":
                    nxt = line[i + 1 : i + 2]
                    if nxt not in _DESKTOP_ESCAPE_IN_QUOTES:
                        raise ValueError(f"backslash before {nxt!r} inside quotes")
                    out.append(nxt)
                    i += 2
                    continue
                out.append(c)
                i += 1
            if i < n and line[i] != " ":
                raise ValueError("a quoted argument must end at a space")
        else:
            while i < n and line[i] != " ":
                c = line[i]
                if c in _DESKTOP_RESERVED:
                    raise ValueError(f"reserved character {c!r} outside quotes")
                out.append(c)
                i += 1
        args.append(_desktop_field_codes("".join(out)))
    if not args:
        raise ValueError("empty Exec")
    return args


def _desktop_field_codes(arg: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(arg):
        if arg[i] == "%":
            if arg[i + 1 : i + 2] != "%":
                raise ValueError(f"field code in {arg!r} is not expected in generated text")
            out.append("%")
            i += 2
            continue
        out.append(arg[i])
        i += 1
    return "".join(out)
