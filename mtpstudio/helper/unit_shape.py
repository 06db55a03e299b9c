"""A systemd unit of mtpstudio's and its environment file, built from the few values that vary
(account, model name, command, flag notes, memory lock, loopback, variables).

``render_unit``/``render_env`` write them from ``templates/units/`` and read each back against its
shape (mtpstudio's renderer and the helper both call them: the preview is the installed file);
``system_unit_from_params`` checks what a caller hands the helper for ``install-unit``;
``check_installed_unit`` reads an installed unit back field by field before the helper replaces
or removes it. System units are named ``mtpstudio-….service`` and never take a name that the
distribution's unit folders hold.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.quoting.env_file import parse_env_file
from mtpstudio.core.quoting.systemd import (
    parse_unit_file,
    split_environment_assignments,
    split_systemd_command_line,
)
from mtpstudio.helper.constants import ENV_DIR
from mtpstudio.helper.prestart_shape import (
    PLACEMENT_FILE,
    PLACEMENT_VAR,
    PrestartShape,
    poststart_from_argv,
    prestart_from_argv,
    prestart_from_params,
)
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.session_shape import SESSION_VARIABLES
from mtpstudio.helper.shape_common import (
    MAX_WORD,
    RenderError,
    as_refusal,
    bool_value,
    check_file_name,
    check_variable,
    list_value,
    only_keys,
    pairs_value,
    text_value,
)
from mtpstudio.helper.templating import render_template

UNIT_PREFIX = "mtpstudio-"
"""Every system unit the helper installs is named ``mtpstudio-….service``."""

DISTRO_UNIT_DIRS = (
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/local/lib/systemd/system",
    "/run/systemd/system",
)
"""Where the distribution's (and the administrator's packaged) units live: a unit of that name
in ``/etc/systemd/system`` would override theirs, so such a name is refused."""

_MAX_WORDS = 512
_MAX_NOTES = 512
_MAX_WARNINGS = 64
_MAX_ENV = 64
_MAX_FILE_NAME = 255
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
_ROOT_USERS = {"root", "0"}


@dataclass(frozen=True)
class UnitShape:
    """The values a unit of mtpstudio's is made of (the rest of its text is fixed).

    Attributes:
        system: a system unit (``User=``, hardening, started at boot) or a user unit.
        unit_name: ``NAME.service``.
        env_path: the absolute path of its ``EnvironmentFile=``.
        user: the account a system unit runs as (None for a user unit).
        model_file: the model's file name, for ``Description=``.
        argv: the command (an absolute program path first).
        arg_groups: how many words of ``argv[1:]`` go on each continuation line.
        notes: (flag, what it means) for the comment block.
        warnings: sentences for the comment block.
        mlock: the weights are locked in RAM (``LimitMEMLOCK=infinity``).
        loopback: the server listens on loopback only (``IPAddress*=``).
        env: the environment file's (name, value) pairs.
        prestart: the check before the engine starts (``ExecStartPre=``; None: none).
    """

    system: bool
    unit_name: str
    env_path: str
    user: str | None
    model_file: str
    argv: tuple[str, ...]
    arg_groups: tuple[int, ...] | None = None
    notes: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    mlock: bool = False
    loopback: bool = True
    env: tuple[tuple[str, str], ...] = ()
    prestart: PrestartShape | None = None

    @property
    def description(self) -> str:
        return f"llama-server {self.model_file} (mtpstudio)"

    @property
    def env_name(self) -> str:
        return self.env_path.rpartition("/")[2]

    def params(self) -> dict[str, Any]:
        """What a caller hands the helper for ``install-unit NAME`` (a system unit)."""
        return {
            "env_name": self.env_name,
            "user": self.user,
            "model_file": self.model_file,
            "argv": list(self.argv),
            "arg_groups": None if self.arg_groups is None else list(self.arg_groups),
            "notes": [list(n) for n in self.notes],
            "warnings": list(self.warnings),
            "mlock": self.mlock,
            "loopback": self.loopback,
            "env": [list(p) for p in self.env],
            "prestart": None if self.prestart is None else self.prestart.params(),
        }


PLACEMENT_REF = f"${PLACEMENT_VAR}"
"""The last word of ``ExecStart=`` when the check may swap the placement (systemd splits the
variable's value into words)."""
_RUNTIME_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}\Z")


def _swaps(shape: UnitShape) -> bool:
    return shape.prestart is not None and shape.prestart.swaps_placement


def runtime_folder(unit_name: str) -> str:
    """The unit's runtime folder (``RuntimeDirectory=``, below /run or $XDG_RUNTIME_DIR)."""
    stem = unit_name.removesuffix(".service")
    if not _RUNTIME_NAME.match(stem):
        raise RenderError(
            f"the unit's name {unit_name!r} cannot name its runtime folder (letters, digits and "
            "_ . : - only), which the engine's fit instead of the placement needs"
        )
    return stem


def _placement_context(shape: UnitShape) -> dict[str, str] | None:
    """The placement as a variable the check may override (None unless it may)."""
    if shape.prestart is None or not _swaps(shape):
        return None
    words = " ".join(shape.prestart.placement)
    if not words:
        raise RenderError("the engine's fit instead of the placement needs the placement itself")
    return {
        "folder": runtime_folder(shape.unit_name),
        "words": words,
        "variable": PLACEMENT_VAR,
        "file": PLACEMENT_FILE,
        "ref": PLACEMENT_REF,
    }


_ON_SHORT_WORDS = {
    "refuse": "refuses to start (the plan says refuse)",
    "warn": "starts all the same and says so (the plan says warn)",
    "fit": "starts the engine with its own fit and says so (the plan says fit)",
}


def _prestart_context(shape: UnitShape) -> dict[str, Any] | None:
    """The check before the start and the comparison after the load (None: no check)."""
    if shape.prestart is None:
        return None
    return {
        "argv": shape.prestart.argv(shape.argv[0]),
        "on_short": _ON_SHORT_WORDS[shape.prestart.on_short],
        "post_argv": shape.prestart.post_argv(),
    }


def unit_context(shape: UnitShape) -> dict[str, Any]:
    """What ``templates/units/{system,user}.service.j2`` are rendered with."""
    return {
        "unit_name": shape.unit_name,
        "description": shape.description,
        "notes": shape.notes,
        "warnings": shape.warnings,
        "user": shape.user,
        "env_path": shape.env_path,
        "argv": shape.argv,
        "arg_groups": shape.arg_groups,
        "placement": _placement_context(shape),
        "prestart": _prestart_context(shape),
        "mlock": shape.mlock,
        "loopback": shape.loopback,
        "session_variables": SESSION_VARIABLES,
    }


def render_unit(shape: UnitShape) -> str:
    """The unit's text (system or user), exactly as mtpstudio writes it: its template rendered
    from the shape, then read back and compared with the shape field by field."""
    if shape.system and shape.user is None:
        raise RenderError("a system unit needs the account it runs as")
    template = "units/system.service.j2" if shape.system else "units/user.service.j2"
    text = render_template(template, **unit_context(shape))
    check_rendered_unit(text, shape)
    return text


def render_env(unit_name: str, env: Sequence[tuple[str, str]]) -> str:
    """The unit's environment file (``EnvironmentFile=``), read back and compared with ``env``."""
    text = render_template("units/environment.env.j2", unit_name=unit_name, env=tuple(env))
    try:
        written = parse_env_file(text)
    except ValueError as exc:
        raise RenderError(f"the environment file does not read back ({exc})") from None
    if list(written.items()) != list(dict(env).items()):
        raise RenderError("the environment file does not read back as its variables")
    return text


def check_account(value: Any, what: str = "the unit's User=") -> str:
    """A plain account name: no specifier (%u, %U, %i …), no number (a uid), never root."""
    if not isinstance(value, str) or not value:
        raise Refused("a system unit must name its account with User=")
    if value in _ROOT_USERS:
        raise Refused("mtpstudio does not install units that run as root")
    if not _ACCOUNT.match(value):
        raise Refused(
            f"{what} must be a plain account name, not {value[:40]!r} "
            "(specifiers such as %u, %U or %i can name root)"
        )
    return value


def check_system_unit_name(name: Any, root: str = "/") -> str:
    """A system unit mtpstudio may install below ``root``: ``mtpstudio-….service``, no template
    or instance, and no unit of that name in the distribution's unit folders (it would be
    overridden: ``sshd.service`` in /etc/systemd/system replaces the distribution's sshd)."""
    check_file_name(name, ".service")
    if "@" in name:
        raise Refused(f"{name!r} is a template or instance unit, which mtpstudio does not install")
    if not name.startswith(UNIT_PREFIX) or name == f"{UNIT_PREFIX}.service":
        raise Refused(
            f"{name!r} does not start with {UNIT_PREFIX!r}: mtpstudio installs system units "
            f"only under its own names, so none can override another unit"
        )
    for folder in DISTRO_UNIT_DIRS:
        path = os.path.join(root, folder.lstrip("/"), name)
        if os.path.lexists(path):
            raise Refused(
                f"{folder}/{name} exists: a unit of that name in /etc/systemd/system would "
                "override it"
            )
    return str(name)


def _words(value: Any) -> tuple[str, ...]:
    argv = list_value(value, "the command", _MAX_WORDS)
    words = tuple(text_value(w, "a word of the command", MAX_WORD, empty=True) for w in argv)
    if not words or not words[0].startswith("/"):
        raise Refused("the unit's ExecStart= must start with an absolute path")
    return words


def _groups(value: Any, argv: Sequence[str]) -> tuple[int, ...] | None:
    if value is None:
        return None
    groups = list_value(value, "arg_groups", _MAX_WORDS)
    if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in groups):
        raise Refused("arg_groups must be positive whole numbers")
    if sum(groups) != len(argv) - 1:
        raise Refused("arg_groups must cover the command's arguments exactly")
    return tuple(groups)


def system_unit_from_params(name: str, payload: Mapping[str, Any], root: str = "/") -> UnitShape:
    """The system unit ``install-unit NAME`` asks for, every value checked; Refused otherwise."""
    check_system_unit_name(name, root)
    only_keys(payload, {"env_name", "user", "model_file", "argv", "arg_groups", "notes",
                         "warnings", "mlock", "loopback", "env", "prestart"},
              "a unit")  # fmt: skip
    env_name = check_file_name(payload.get("env_name"), ".env")
    model_file = text_value(payload.get("model_file"), "the model's file name", _MAX_FILE_NAME)
    if "/" in model_file:
        raise Refused("the model's file name must be a name, not a path")
    argv = _words(payload.get("argv"))
    notes = tuple(
        (text_value(f, "a flag's name", MAX_WORD), text_value(e, "a flag's explanation"))
        for f, e in pairs_value(payload.get("notes", []), "notes", _MAX_NOTES)
    )
    asked = list_value(payload.get("warnings", []), "warnings", _MAX_WARNINGS)
    warnings = tuple(text_value(w, "a warning") for w in asked)
    env = tuple(
        (check_variable(n, "the environment file"), text_value(v, f"the value of {n}", MAX_WORD,
                                                          empty=True))
        for n, v in pairs_value(payload.get("env", []), "env", _MAX_ENV)
    )  # fmt: skip
    shape = UnitShape(
        system=True,
        unit_name=name,
        env_path=f"{ENV_DIR}/{env_name}",
        user=check_account(payload.get("user")),
        model_file=model_file,
        argv=argv,
        arg_groups=_groups(payload.get("arg_groups"), argv),
        notes=notes,
        warnings=warnings,
        mlock=bool_value(payload.get("mlock", False), "mlock"),
        loopback=bool_value(payload.get("loopback", True), "loopback"),
        env=env,
        prestart=None
        if payload.get("prestart") is None
        else prestart_from_params(payload["prestart"], name),
    )
    try:  # every value must also be writable in its format
        render_unit(shape)
        render_env(name, env)
    except RenderError as exc:
        raise as_refusal(exc) from None
    return shape


def _entries(text: str, what: str) -> list[tuple[str, str, str]]:
    try:
        return parse_unit_file(text)
    except ValueError as exc:
        raise Refused(f"{what} does not parse ({exc})") from None


def _normal(entries: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The entries with ``ExecStart=`` as its words (continuation lines join with spaces)."""
    out = []
    for section, key, value in entries:
        if (section, key) in (("Service", "ExecStart"), ("Service", "ExecStartPre")):
            head, ref = without_placement_ref(value)
            with suppress(ValueError):
                value = "\0".join([*split_systemd_command_line(head), *ref])
        out.append((section, key, value))
    return out


def without_placement_ref(value: str) -> tuple[str, list[str]]:
    """``ExecStart=``'s value without a last word ``$MTPSTUDIO_PLACEMENT``, and that word
    (a list of it, or empty)."""
    words = value.rsplit(None, 1)
    if len(words) == 2 and words[1] == PLACEMENT_REF:
        return words[0], [PLACEMENT_REF]
    return value, []


def _placement_words(entries: list[tuple[str, str, str]]) -> tuple[str, ...]:
    """The words of the unit's ``Environment="MTPSTUDIO_PLACEMENT=…"`` (empty: none)."""
    for section, key, value in entries:
        if (section, key) != ("Service", "Environment"):
            continue
        try:
            pairs = split_environment_assignments(value)
        except ValueError:
            continue
        for name, words in pairs:
            if name == PLACEMENT_VAR:
                return tuple(words.split())
    return ()


def _unit_fields(entries: list[tuple[str, str, str]]) -> dict[str, tuple[Any, ...]]:
    """What a unit's text says, per field, read with systemd's rules (ValueError: it does not
    read back)."""
    got: dict[tuple[str, str], list[str]] = {}
    for section, key, value in entries:
        got.setdefault((section, key), []).append(value)

    def raw(section: str, key: str) -> tuple[str, ...]:
        return tuple(got.get((section, key), []))

    def command(value: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        head, ref = without_placement_ref(value)
        return tuple(split_systemd_command_line(head)), tuple(ref)

    return {
        "Description": tuple(v.replace("%%", "%") for v in raw("Unit", "Description")),
        "User": raw("Service", "User"),
        "EnvironmentFile": tuple(v.replace("%%", "%") for v in raw("Service", "EnvironmentFile")),
        "MTPSTUDIO_PLACEMENT": _placement_words(entries),
        "ExecStartPre": tuple(command(v) for v in raw("Service", "ExecStartPre")),
        "ExecStart": tuple(command(v) for v in raw("Service", "ExecStart")),
        "ExecStartPost": tuple(
            (v.startswith("-"), command(v.removeprefix("-")))
            for v in raw("Service", "ExecStartPost")
        ),
        "LimitMEMLOCK": raw("Service", "LimitMEMLOCK"),
        "IPAddressDeny": raw("Service", "IPAddressDeny"),
        "WantedBy": raw("Install", "WantedBy"),
    }


def _shape_fields(shape: UnitShape) -> dict[str, tuple[Any, ...]]:
    """What a unit built from ``shape`` must say, per field (as ``_unit_fields`` reads it)."""
    placement = _placement_context(shape)
    ref = (PLACEMENT_REF,) if placement else ()
    pre = _prestart_context(shape)
    return {
        "Description": (shape.description.strip(),),
        "User": (shape.user,) if shape.system else (),
        "EnvironmentFile": (shape.env_path,)
        + ((f"-%t/{placement['folder']}/{PLACEMENT_FILE}",) if placement else ()),
        "MTPSTUDIO_PLACEMENT": tuple(placement["words"].split()) if placement else (),
        "ExecStartPre": ((tuple(pre["argv"]), ()),) if pre else (),
        "ExecStart": ((tuple(shape.argv), ref),),
        "ExecStartPost": ((True, (tuple(pre["post_argv"]), ())),)
        if pre and pre["post_argv"]
        else (),
        "LimitMEMLOCK": ("infinity",) if shape.system and shape.mlock else (),
        "IPAddressDeny": ("any",) if shape.system and shape.loopback else (),
        "WantedBy": ("multi-user.target",) if shape.system else ("default.target",),
    }


def check_rendered_unit(text: str, shape: UnitShape) -> None:
    """A unit rendered from its template, read back with systemd's rules, says what ``shape``
    says in every field that varies (the command, the account, the files, the check, the
    limits); RenderError names the first field that does not."""
    try:
        fields = _unit_fields(parse_unit_file(text))
    except ValueError as exc:
        raise RenderError(f"the unit {shape.unit_name} does not read back ({exc})") from None
    for name, expected in _shape_fields(shape).items():
        if fields[name] != expected:
            raise RenderError(
                f"the unit {shape.unit_name} written from its template does not say what its "
                f"plan says ({name}=)"
            )


def check_installed_unit(text: str, name: str, env_name: str | None, *, system: bool) -> None:
    """An installed unit has exactly the fields mtpstudio's unit has (comments aside).

    The values that vary (account, model name, command, environment file, memory lock,
    loopback) are read from it, the unit is built again from them, and every (section, key,
    value) must match: no other key (``Group=``, ``ExecStartPre=``…), no other value.
    """
    entries = _entries(text, "the unit")
    values: dict[tuple[str, str], str] = {}
    for section, key, value in entries:
        values.setdefault((section, key), value)
    user = values.get(("Service", "User"))
    if system:
        check_account(user)
    env_file = values.get(("Service", "EnvironmentFile"), "")
    if system and env_file != f"{ENV_DIR}/{env_name}":
        raise Refused(f"the unit's EnvironmentFile= is not {ENV_DIR}/{env_name}")
    command, ref = without_placement_ref(values.get(("Service", "ExecStart"), ""))
    placement = _placement_words(entries) if ref else ()
    try:
        argv = tuple(split_systemd_command_line(command))
    except ValueError as exc:
        raise Refused(f"the unit's ExecStart= is not an absolute command ({exc})") from None
    description = values.get(("Unit", "Description"), "").replace("%%", "%")
    model_file = description.removeprefix("llama-server ").removesuffix(" (mtpstudio)")
    if not argv or not argv[0].startswith("/"):
        raise Refused("the unit's ExecStart= must start with an absolute path")
    prestart = None
    if ("Service", "ExecStartPre") in values:
        try:
            pre = split_systemd_command_line(values[("Service", "ExecStartPre")])
        except ValueError as exc:
            raise Refused(f"the unit's ExecStartPre= does not parse ({exc})") from None
        prestart = prestart_from_argv(pre, name, argv[0], placement)
        if ("Service", "ExecStartPost") in values:
            post_line = values[("Service", "ExecStartPost")]
            try:
                post = split_systemd_command_line(post_line.removeprefix("-"))
            except ValueError as exc:
                raise Refused(f"the unit's ExecStartPost= does not parse ({exc})") from None
            if not post_line.startswith("-"):
                raise Refused("the unit's ExecStartPost= must not stop the engine when it fails")
            prestart = poststart_from_argv(post, prestart)
    shape = UnitShape(
        system=system,
        unit_name=name,
        env_path=env_file.replace("%%", "%"),
        user=user,
        model_file=model_file,
        argv=argv,
        mlock=("Service", "LimitMEMLOCK") in values,
        loopback=("Service", "IPAddressDeny") in values,
        prestart=prestart,
    )
    try:
        expected = _normal(parse_unit_file(render_unit(shape)))
    except (RenderError, ValueError) as exc:
        raise Refused(f"the unit is not one mtpstudio writes ({exc})") from None
    entries = _normal(entries)
    if sorted(entries) != sorted(expected):
        extra = sorted(set(entries) - set(expected))
        missing = sorted(set(expected) - set(entries))
        odd = extra[0] if extra else missing[0] if missing else None
        why = f"{odd[1]}={odd[2][:40]} in [{odd[0]}]" if odd else "a repeated line"
        raise Refused(f"the unit is not one mtpstudio writes ({why})")


def check_installed_env(text: str) -> None:
    """An environment file of plain ``NAME=value`` assignments (no LD_* variables)."""
    for name in parse_env_file(text):
        check_variable(name, "the environment file")
