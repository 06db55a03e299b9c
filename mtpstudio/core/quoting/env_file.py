"""The environment files systemd's ``EnvironmentFile=`` reads: ``NAME="value"`` lines, and
systemd's own reader (``parse_env_file_internal``) written out."""

from __future__ import annotations

from mtpstudio.core.quoting.checks import check_env_name, check_one_line
from mtpstudio.core.quoting.systemd import SYSTEMD_WHITESPACE

# systemd env files: inside double quotes these take a backslash (SHELL_NEED_ESCAPE).
_ENV_FILE_ESCAPE = frozenset('"\\`$')


def env_file_assignment(name: str, value: str) -> str:
    """One ``EnvironmentFile=`` line: ``NAME="value"`` with ``\\ " ` $`` backslash-escaped."""
    check_env_name(name)
    check_one_line(value, f"the value of {name}")
    body = "".join("\\" + c if c in _ENV_FILE_ESCAPE else c for c in value)
    return f'{name}="{body}"'


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
            elif c not in SYSTEMD_WHITESPACE:
                state, key, last_key_ws = "key", [c], None
        elif state == "key":
            if c in "\n\r":
                state, key = "pre_key", []
            elif c == "=":
                state, value, last_value_ws = "pre_value", [], None
            else:
                if c not in SYSTEMD_WHITESPACE:
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
            elif c not in SYSTEMD_WHITESPACE:
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
                if c not in SYSTEMD_WHITESPACE:
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
