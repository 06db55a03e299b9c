"""Quoting for the files mtpstudio writes (systemd units, environment files, shell, .desktop).

Writers turn a value into text for one format and raise ``RenderError`` for values that
format cannot hold (newlines and other control characters, text that is not UTF-8). Readers
are the formats' own rules written out (systemd.syntax(7) "Quoting", systemd.service(5)
"Command lines", systemd's ``parse_env_file``, the freedesktop Desktop Entry spec "The Exec
key"); render.py uses them to check what it wrote, tests use them for round trips.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import PurePath

from mtpstudio.core.errors import RenderError

__all__ = [
    "RenderError",
    "check_one_line",
    "desktop_exec_arg",
    "desktop_exec_line",
    "desktop_string",
    "env_file_assignment",
    "parse_env_file",
    "parse_unit_file",
    "shell_join",
    "shell_quote",
    "split_desktop_exec",
    "split_environment_assignments",
    "split_systemd_command_line",
    "systemd_command_line",
    "systemd_environment_assignment",
    "systemd_exec_arg",
    "systemd_path",
    "systemd_text",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# systemd splits words on these (WHITESPACE in systemd's string-util.h).
_SYSTEMD_WHITESPACE = " \t\n\r"
# Characters that make a systemd word need double quotes (besides whitespace).
_SYSTEMD_QUOTE_TRIGGERS = frozenset("\"'\\;")
# Desktop Entry spec, "The Exec key": reserved characters force quoting.
_DESKTOP_RESERVED = frozenset(" \t\n\"'\\><~|&;$*?#()`")
_DESKTOP_ESCAPE_IN_QUOTES = frozenset('"`$\\')
# systemd env files: inside double quotes these take a backslash (SHELL_NEED_ESCAPE).
_ENV_FILE_ESCAPE = frozenset('"\\`$')


# --------------------------------------------------------------------------------------------
# shared checks


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


def _check_env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise RenderError(
            f"{name!r} is not a valid environment variable name (letters, digits and _, "
            "not starting with a digit)"
        )
    return name


# --------------------------------------------------------------------------------------------
# systemd unit files


def systemd_exec_arg(arg: str, *, what: str = "a command-line argument") -> str:
    """One ``ExecStart=`` word: ``%`` as ``%%``, ``$`` as ``$$``; quoted when needed.

    The word is wrapped in double quotes (with ``\\`` and ``"`` escaped) when it is empty,
    starts with ``#`` or holds whitespace, quotes, backslashes or ``;``; other text, UTF-8
    included, stays bare.
    """
    check_one_line(arg, what)
    needs_quotes = (
        arg == ""
        or arg.startswith("#")  # would start a comment at the head of a continuation line
        or any(c in _SYSTEMD_QUOTE_TRIGGERS for c in arg)
        or any(c.isspace() for c in arg)
    )
    body = arg.replace("%", "%%").replace("$", "$$")
    if not needs_quotes:
        return body
    body = body.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{body}"'


def _systemd_program(path: str) -> str:
    check_one_line(path, f"the program path {path!r}")
    if not PurePath(path).is_absolute():
        raise RenderError(f"the program path {path!r} must be absolute for a systemd unit")
    if "$" in path:
        raise RenderError(
            f"the program path {path!r} contains '$', which systemd cannot take in the "
            "program position",
            hint="Move the engine binary to a folder without '$' in its name.",
        )
    return systemd_exec_arg(path, what=f"the program path {path!r}")


def systemd_command_line(
    argv: Sequence[str], groups: Sequence[int] | None = None, indent: str = "    "
) -> str:
    """The value of ``ExecStart=`` for ``argv`` (program first), quoted per systemd.syntax(7).

    Args:
        argv: the program (absolute path) and its arguments.
        groups: optional sizes of the argument groups after the program (e.g. ``[2, 2, 1]``
            for ``-c 512 -fa on --cpu-moe``); each group goes on its own continuation line.
            Without it everything is on one line.
        indent: text that starts each continuation line.
    """
    if not argv:
        raise RenderError("an empty command cannot be written into a unit")
    words = [_systemd_program(argv[0])] + [systemd_exec_arg(a) for a in argv[1:]]
    if groups is None:
        return " ".join(words)
    if sum(groups) != len(words) - 1 or any(g < 1 for g in groups):
        raise ValueError("groups must partition the arguments after the program")
    lines = [words[0]]
    start = 1
    for size in groups:
        lines.append(indent + " ".join(words[start : start + size]))
        start += size
    return " \\\n".join(lines)


def systemd_environment_assignment(name: str, value: str) -> str:
    """One item of ``Environment=``: ``"NAME=value"`` with C escapes and ``%%``."""
    _check_env_name(name)
    check_one_line(value, f"the value of {name}")
    body = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{body}"'


def systemd_path(path: str, *, what: str = "a path") -> str:
    """An absolute path for settings such as ``EnvironmentFile=`` (``%`` written ``%%``)."""
    check_one_line(path, what)
    if not PurePath(path).is_absolute():
        raise RenderError(f"{what} {path!r} must be an absolute path for a systemd unit")
    if path != path.strip() or path.endswith("\\"):
        raise RenderError(f"{what} {path!r} must not end with a space or a backslash")
    return path.replace("%", "%%")


def systemd_text(value: str, *, what: str = "a unit setting") -> str:
    """Free text for settings such as ``Description=`` (one line, ``%`` as ``%%``)."""
    check_one_line(value, what)
    if value.endswith("\\"):
        raise RenderError(f"{what} {value!r} must not end with a backslash")
    return value.strip().replace("%", "%%")


def env_file_assignment(name: str, value: str) -> str:
    """One ``EnvironmentFile=`` line: ``NAME="value"`` with ``\\ " ` $`` backslash-escaped."""
    _check_env_name(name)
    check_one_line(value, f"the value of {name}")
    body = "".join("\\" + c if c in _ENV_FILE_ESCAPE else c for c in value)
    return f'{name}="{body}"'


# --------------------------------------------------------------------------------------------
# shell


def shell_quote(arg: str, *, what: str = "a shell word") -> str:
    """``shlex.quote`` for one line of text (newlines and control characters refused)."""
    return shlex.quote(check_one_line(arg, what))


def shell_join(argv: Iterable[str]) -> str:
    """The words quoted for bash and joined with spaces."""
    return " ".join(shell_quote(a) for a in argv)


# --------------------------------------------------------------------------------------------
# .desktop files


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


# --------------------------------------------------------------------------------------------
# readers (the formats' rules, for self-checks and tests)

_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}


def _cunescape_one(text: str, i: int) -> tuple[str, int] | None:
    """Decode the escape after a backslash at ``text[i]``; None when it is not a known one."""
    c = text[i] if i < len(text) else ""
    if c in _C_ESCAPES:
        return _C_ESCAPES[c], i + 1
    for prefix, width, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if c == prefix:
            digits = text[i + 1 : i + 1 + width]
            if len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits):
                code = int(digits, base)
                if code == 0 or code > 0x10FFFF:
                    return None
                return chr(code), i + 1 + width
            return None
    digits = text[i : i + 3]
    if len(digits) == 3 and all(d in "01234567" for d in digits):
        code = int(digits, 8)
        return (chr(code), i + 3) if code else None
    return None


def _extract_words(text: str) -> list[tuple[str, str]]:
    """systemd ``extract_first_word`` with UNQUOTE|CUNESCAPE|CUNESCAPE_RELAX, repeated.

    Returns (word, raw text of the word) pairs; the raw text lets callers spot a bare ``;``.
    """
    words: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _SYSTEMD_WHITESPACE:
            i += 1
        if i >= n:
            return words
        start = i
        out: list[str] = []
        quote: str | None = None
        while i < n:
            c = text[i]
            if quote is None and c in _SYSTEMD_WHITESPACE:
                break
            if c == "\\":
                if i + 1 >= n:
                    raise ValueError("a backslash ends the command line")
                decoded = _cunescape_one(text, i + 1)
                if decoded is None:  # CUNESCAPE_RELAX: keep unknown escapes as written
                    out.append("\\" + text[i + 1])
                    i += 2
                else:
                    out.append(decoded[0])
                    i = decoded[1]
                continue
            if quote is None and c in "'\"":
                quote = c
            elif quote is not None and c == quote:
                quote = None
            else:
                out.append(c)
            i += 1
        if quote is not None:
            raise ValueError("unbalanced quoting")
        words.append(("".join(out), text[start:i]))


def _expand_specifiers(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%":
            nxt = text[i + 1 : i + 2]
            if nxt != "%":
                raise ValueError(f"specifier %{nxt} is not expected in generated text")
            out.append("%")
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _replace_dollars(word: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(word):
        c = word[i]
        if c == "$":
            nxt = word[i + 1 : i + 2]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "{":
                raise ValueError("variable references are not expected in generated commands")
        out.append(c)
        i += 1
    return "".join(out)


def split_systemd_command_line(value: str) -> list[str]:
    """The argv systemd runs for one ``ExecStart=`` value (already joined from its lines).

    Applies, in systemd's order: specifiers (only ``%%`` is expected), unquoting with C
    escapes, then ``$$`` -> ``$`` in the arguments. Raises ValueError for anything mtpstudio
    never writes (other specifiers, variables, several commands) or for broken quoting.
    """
    words = _extract_words(_expand_specifiers(value))
    if not words:
        raise ValueError("empty command line")
    argv: list[str] = []
    for index, (word, raw) in enumerate(words):
        if raw == ";":
            raise ValueError("several commands on one line are not expected")
        if raw == "\\;":
            word = ";"
        if index == 0:
            if not word.startswith("/"):
                raise ValueError("the program must be an absolute path")
            argv.append(word)
            continue
        if raw.startswith("$") and not raw.startswith(("$$", "${")) and len(raw) > 1:
            raise ValueError("unbraced variable words are not expected in generated commands")
        argv.append(_replace_dollars(word))
    return argv


def split_environment_assignments(value: str) -> list[tuple[str, str]]:
    """The (name, value) pairs of one ``Environment=`` line, split as systemd splits it
    (quotes and C escapes; specifiers stay as written). Raises ValueError for a word without
    ``=`` or broken quoting."""
    pairs: list[tuple[str, str]] = []
    for word, _raw in _extract_words(value):
        name, sep, rest = word.partition("=")
        if not sep:
            raise ValueError(f"{word[:40]!r} is not an assignment")
        pairs.append((name, rest))
    return pairs


def _continues(line: str) -> bool:
    """True when ``line`` ends with an odd number of backslashes (a continuation)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_unit_file(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for each assignment of a unit file, continuations joined.

    Follows systemd's config parser: ``#``/``;`` comment lines are skipped (also inside a
    continuation), a trailing backslash joins the next line with a space in its place.
    """
    entries: list[tuple[str, str, str]] = []
    section = ""
    pending: str | None = None
    for raw_line in text.split("\n"):
        line = raw_line.strip()
        if pending is not None:
            if line.startswith(("#", ";")):
                continue
            joined = pending + " "
            if _continues(line):
                pending = joined + line[:-1]
                continue
            line = joined + line
            pending = None
        elif not line or line.startswith(("#", ";")):
            continue
        elif _continues(line):
            pending = line[:-1]
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if "=" not in line:
            raise ValueError(f"line without '=': {line!r}")
        key, _, value = line.partition("=")
        entries.append((section, key.strip(), value.strip()))
    if pending is not None:
        raise ValueError("the file ends inside a continued line")
    return entries


def parse_env_file(text: str) -> dict[str, str]:
    """What systemd's ``EnvironmentFile=`` reader (``parse_env_file_internal``) reads."""
    result: dict[str, str] = {}
    state = "pre_key"
    key: list[str] = []
    value: list[str] = []
    last_value_ws: int | None = None
    last_key_ws: int | None = None

    def push() -> None:
        k = "".join(key)
        if last_key_ws is not None:
            k = k[:last_key_ws]
        result[k] = "".join(value)

    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif c not in _SYSTEMD_WHITESPACE:
                state, key, last_key_ws = "key", [c], None
        elif state == "key":
            if c in "\n\r":
                state, key = "pre_key", []
            elif c == "=":
                state, value, last_value_ws = "pre_value", [], None
            else:
                if c not in _SYSTEMD_WHITESPACE:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key.append(c)
        elif state == "pre_value":
            if c in "\n\r":
                push()
                state, key = "pre_key", []
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif c not in _SYSTEMD_WHITESPACE:
                state = "value"
                value.append(c)
        elif state == "value":
            if c in "\n\r":
                if last_value_ws is not None:
                    del value[last_value_ws:]
                push()
                state, key = "pre_key", []
            elif c == "\\":
                state, last_value_ws = "value_escape", None
            else:
                if c not in _SYSTEMD_WHITESPACE:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value.append(c)
        elif state == "value_escape":
            state = "value"
            if c not in "\n\r":
                value.append(c)
        elif state == "single":
            if c == "'":
                state = "pre_value"
            else:
                value.append(c)
        elif state == "double":
            if c == '"':
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value.append(c)
        elif state == "double_escape":
            state = "double"
            if c in _ENV_FILE_ESCAPE:
                value.append(c)
            elif c != "\n":
                value.extend(("\\", c))
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c in "\n\r":
                state = "pre_key"
        elif state == "comment_escape":
            state = "pre_key" if c in "\n\r" else "comment"
    if state in ("pre_value", "value", "value_escape", "single", "double", "double_escape"):
        if state == "value" and last_value_ws is not None:
            del value[last_value_ws:]
        push()
    return result


def _desktop_unescape_string(value: str) -> str:
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
    line = _desktop_unescape_string(value)
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
