"""A systemd unit of mtpstudio's and its environment file, built from the few values that vary
(account, model name, command, flag notes, memory lock, loopback, variables).

``render_unit``/``render_env`` write them (mtpstudio's renderer and the helper both call them);
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

from mtpstudio.core.quoting.env_file import env_file_assignment, parse_env_file
from mtpstudio.core.quoting.systemd import (
    parse_unit_file,
    split_environment_assignments,
    split_systemd_command_line,
    systemd_command_line,
    systemd_path,
    systemd_text,
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
    comment,
    comment_wrap,
    list_value,
    only_keys,
    pairs_value,
    text_value,
)

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


def comment_header(
    unit_name: str,
    description: str,
    notes: Sequence[tuple[str, str]],
    warnings: Sequence[str],
) -> str:
    """The comment block at the top of a unit: what each flag means, then the warnings."""
    lines = [
        f"# {unit_name}: {comment(description)}",
        "# Written by mtpstudio from a plan; change the plan and render again rather than "
        "editing here.",
        "#",
        "# What the flags mean:",
    ]
    lines += [comment_wrap(f"{flag}: {why}", "#   ", "#       ") for flag, why in notes]
    for warning in warnings:
        lines += ["#", comment_wrap(f"Warning: {warning}", "# ", "#   ")]
    return "\n".join(lines) + "\n"


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


def _exec_start(shape: UnitShape) -> str:
    line = systemd_command_line(shape.argv, shape.arg_groups)
    if not _swaps(shape):
        return line
    return line + (" \\\n    " if shape.arg_groups else " ") + PLACEMENT_REF


def _placement_lines(shape: UnitShape) -> str:
    """The placement as a variable the check may override (none unless it may)."""
    if shape.prestart is None or not _swaps(shape):
        return ""
    folder = runtime_folder(shape.unit_name)
    words = " ".join(shape.prestart.placement)
    if not words:
        raise RenderError("the engine's fit instead of the placement needs the placement itself")
    return (
        "# The placement is the variable below, the last word of ExecStart=. When the VRAM is\n"
        "# short at the start, the check writes the engine's own fit into the runtime folder's\n"
        f"# {PLACEMENT_FILE}, which overrides it for that start (the plan says --short-vram fit).\n"
        f"RuntimeDirectory={folder}\n"
        f'Environment="{PLACEMENT_VAR}={words}"\n'
        f"EnvironmentFile=-%t/{folder}/{PLACEMENT_FILE}\n"
    )


def _exec_start_pre(shape: UnitShape) -> str:
    """The check's lines before ``ExecStart=`` (none without a check)."""
    if shape.prestart is None:
        return ""
    return (
        "# Before the engine starts: is the VRAM this placement needs free, and is the engine\n"
        "# the build the unit was made for? One line in the journal either way (mtpstudio\n"
        f"# prestart); when short it {_ON_SHORT_WORDS[shape.prestart.on_short]}.\n"
        f"ExecStartPre={systemd_command_line(shape.prestart.argv(shape.argv[0]))}\n"
    )


_ON_SHORT_WORDS = {
    "refuse": "refuses to start (the plan says refuse)",
    "warn": "starts all the same and says so (the plan says warn)",
    "fit": "starts the engine with its own fit and says so (the plan says fit)",
}


def _exec_start_post(shape: UnitShape) -> str:
    """The comparison after the load, after ``ExecStart=`` (none without one)."""
    if shape.prestart is None or not shape.prestart.compares_load:
        return ""
    return (
        "# After the load: the engine's buffers in this start's journal against the plan, one\n"
        "# line per device (mtpstudio poststart). It waits in the background for /health, so\n"
        "# the start does not wait for the load; its failure never stops the engine (-).\n"
        f"ExecStartPost=-{systemd_command_line(shape.prestart.post_argv())}\n"
    )


def sandbox_lines(*, protect_home: str) -> str:
    """The sandbox every unit mtpstudio writes shares (systemd-analyze security scores it):
    no privileges, a read-only system, the kernel and other processes out of reach, the
    system calls of a service, the address families of a network server. ``protect_home``:
    ``read-only`` (the engine reads a model there) or ``yes``."""
    return _SANDBOX.format(protect_home=protect_home)


def gpu_device_lines(*, amd: bool) -> str:
    """Every device closed but the GPU nodes: NVIDIA's (/dev/nvidia*) and DRM's (/dev/dri),
    and with ``amd`` AMD's compute node (/dev/kfd)."""
    return _GPU_DEVICES + ("DeviceAllow=char-kfd rw\n" if amd else "")


_SANDBOX = """\
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome={protect_home}
PrivateTmp=yes
PrivateMounts=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
"""
_GPU_DEVICES = """\
DevicePolicy=closed
DeviceAllow=char-nvidia-frontend rw
DeviceAllow=char-nvidia-uvm rw
DeviceAllow=char-nvidia-caps r
DeviceAllow=char-drm rw
"""


_SYSTEM_HARDENING = (
    """\
# Hardening (systemd-analyze security scores it below 3.5) that leaves the engine what it
# needs: reading the model (everything is read-only but the cache folder), its port, and the
# GPU device nodes of the classes NVIDIA (/dev/nvidia*), DRM (/dev/dri) and AMD (/dev/kfd)
# cards use; every other device is closed. Left out on purpose: PrivateDevices= (a private
# /dev without the GPU), MemoryDenyWriteExecute= (breaks the CUDA JIT), ProcSubset=pid
# (libcuda reads /proc/driver/nvidia), RemoveIPC= (User= is often the desktop user, whose
# shared memory it would delete). With NoNewPrivileges= the setuid nvidia-modprobe cannot
# create /dev/nvidia-uvm: load nvidia-uvm at boot.
"""
    + sandbox_lines(protect_home="read-only")
    + gpu_device_lines(amd=True)
)


def render_unit(shape: UnitShape) -> str:
    """The unit's text (system or user), exactly as mtpstudio writes it."""
    header = comment_header(shape.unit_name, shape.description, shape.notes, shape.warnings)
    description = systemd_text(shape.description)
    env_path = systemd_path(shape.env_path)
    exec_start = _exec_start(shape)
    if not shape.system:
        return (
            f"{header}\n"
            "[Unit]\n"
            f"Description={description}\n"
            "# Give up after 3 failed starts in 10 minutes (e.g. out of memory at every load).\n"
            "StartLimitIntervalSec=600\n"
            "StartLimitBurst=3\n"
            "\n"
            "[Service]\n"
            "Type=exec\n"
            f"EnvironmentFile={env_path}\n"
            "# A software-rendering login session copies these into the user manager; "
            "llama-server\n"
            "# does not need them (and a Vulkan build would otherwise pick the software driver).\n"
            f"UnsetEnvironment={' '.join(SESSION_VARIABLES)}\n"
            f"{_placement_lines(shape)}"
            f"{_exec_start_pre(shape)}"
            f"ExecStart={exec_start}\n"
            f"{_exec_start_post(shape)}"
            "Restart=on-failure\n"
            "RestartSec=15s\n"
            "TimeoutStopSec=30s\n"
            "# Light hardening only: in a user manager the file-system options would switch on\n"
            "# PrivateUsers= and hide other users' files.\n"
            "NoNewPrivileges=yes\n"
            "RestrictRealtime=yes\n"
            "LockPersonality=yes\n"
            "SystemCallArchitectures=native\n"
            "\n"
            "[Install]\n"
            "WantedBy=default.target\n"
        )
    if shape.user is None:
        raise RenderError("a system unit needs the account it runs as")
    mlock = (
        "# The weights are locked in RAM (mlock); without this limit locking fails.\n"
        "LimitMEMLOCK=infinity\n"
        if shape.mlock
        else ""
    )
    loopback = (
        "# It listens on loopback only: no other address may reach it.\n"
        "IPAddressDeny=any\n"
        "IPAddressAllow=localhost\n"
        if shape.loopback
        else ""
    )
    return (
        f"{header}\n"
        "[Unit]\n"
        f"Description={description}\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "# Give up after 3 failed starts in 10 minutes (e.g. out of memory at every load).\n"
        "StartLimitIntervalSec=600\n"
        "StartLimitBurst=3\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"User={shape.user}\n"
        "# Access to the GPU device nodes on distributions that give them to these groups.\n"
        "SupplementaryGroups=video render\n"
        f"EnvironmentFile={env_path}\n"
        f"{_placement_lines(shape)}"
        f"{_exec_start_pre(shape)}"
        f"ExecStart={exec_start}\n"
        f"{_exec_start_post(shape)}"
        "Restart=on-failure\n"
        "RestartSec=15s\n"
        "TimeoutStopSec=30s\n"
        f"{mlock}"
        "# The CUDA JIT cache needs a writable place: the home folder is read-only here.\n"
        "CacheDirectory=mtpstudio\n"
        "Environment=CUDA_CACHE_PATH=%C/mtpstudio\n"
        "\n"
        f"{_SYSTEM_HARDENING}"
        f"{loopback}"
        "UMask=0077\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def render_env(unit_name: str, env: Sequence[tuple[str, str]]) -> str:
    """The unit's environment file (``EnvironmentFile=``)."""
    lines = [
        f"# Environment for {unit_name} (EnvironmentFile=), written by mtpstudio.",
        '# One NAME=value per line; double-quote values and write \\\\ \\" \\` \\$ inside the '
        "quotes.",
        "# llama-server reads LLAMA_ARG_* variables too, but the unit's command line wins over "
        "them.",
        *(env_file_assignment(name, value) for name, value in env),
    ]
    return "\n".join(lines) + "\n"


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
