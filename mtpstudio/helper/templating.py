"""The templates the helper renders units, environment files and login sessions from.

The files' fixed text lives in ``templates/units/`` and ``templates/sessions/`` (the package
``mtpstudio.templates``); the values that vary come from a checked shape. The environment is
Jinja's immutable sandbox with ``StrictUndefined`` (a name the template uses and the shape does
not give is an error, never an empty string), autoescape off, and the quoting filters of
``core.quoting`` as the only way a value reaches the text. The same environment renders the
preview in the window and the file the helper installs, so the two are one piece of code.

At set-up the helper's copy in ``/usr/lib/mtpstudio`` takes these templates and the pure-Python
sources of jinja2 and markupsafe along (``core.desktop.helper_setup.helper_modules``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from mtpstudio.core.quoting import RenderError
from mtpstudio.core.quoting.desktop_entry import desktop_exec_line, desktop_string
from mtpstudio.core.quoting.env_file import env_file_assignment
from mtpstudio.core.quoting.shell import shell_join, shell_quote
from mtpstudio.core.quoting.systemd import systemd_command_line, systemd_path, systemd_text
from mtpstudio.helper.shape_common import comment, comment_wrap

TEMPLATE_PACKAGE = "mtpstudio.templates"
HELPER_TEMPLATE_FOLDERS = ("units", "sessions")
"""The template folders the helper renders from (and its set-up copies)."""


def _load(name: str) -> str:
    try:
        return resources.files(TEMPLATE_PACKAGE).joinpath(name).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise jinja2.TemplateNotFound(name) from None


def _systemd_command(argv: Sequence[str], groups: Sequence[int] | None = None) -> str:
    return systemd_command_line(list(argv), None if groups is None else list(groups))


FILTERS: Mapping[str, Callable[..., Any]] = {
    "comment": comment,
    "comment_wrap": comment_wrap,
    "shell": shell_quote,
    "shell_join": shell_join,
    "systemd_command": _systemd_command,
    "systemd_path": systemd_path,
    "systemd_text": systemd_text,
    "env_file_assignment": lambda pair: env_file_assignment(*pair),
    "desktop_string": desktop_string,
    "desktop_exec": desktop_exec_line,
}
"""The quoting filters a template may use: each checks its value for its syntax (one line, an
absolute path …) and raises ``RenderError`` when it cannot be written there."""


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    """The sandboxed environment (shared, read-only after creation)."""
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    return env


def render_template(name: str, **context: Any) -> str:
    """``name`` (below ``templates/``) rendered with ``context``.

    Raises:
        RenderError: a value a filter cannot write, or a broken template (a name it uses that
            the context lacks, a sandbox violation).
    """
    try:
        return template_environment().get_template(name).render(**context)
    except RenderError:
        raise
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {name} failed: {exc}") from exc
