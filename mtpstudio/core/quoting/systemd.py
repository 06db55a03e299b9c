"""systemd unit files: ``ExecStart=`` command lines, ``Environment=`` items, paths and free
text (systemd.syntax(7) "Quoting", systemd.service(5) "Command lines"), and the readers that
split them back as systemd does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

from mtpstudio.core.errors import RenderError
from mtpstudio.core.quoting.checks import check_env_name, check_one_line

# systemd splits words on these (WHITESPACE in systemd's string-util.h).
SYSTEMD_WHITESPACE = " \t\n\r"

# Characters that make a systemd word need double quotes (besides whitespace).
_SYSTEMD_QUOTE_TRIGGERS = frozenset("\"'\\;")


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
    check_env_name(name)
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


# --------------------------------------------------------------------------------------------
# readers (systemd's rules, for self-checks and tests)

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
        while i < n and text[i] in SYSTEMD_WHITESPACE:
            i += 1
        if i >= n:
            return words
        start = i
        out: list[str] = []
        quote: str | None = None
        while i < n:
            c = text[i]
            if quote is None and c in SYSTEMD_WHITESPACE:
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
