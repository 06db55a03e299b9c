"""The files mtpstudio installs, built from a few values: units, environment files, login sessions
with their wrappers, the NVIDIA profile.

The one place their text is written: mtpstudio's renderer (``core.service.render``) calls these
functions for its previews and exports, and the helper calls them to build what it installs from
the parameters it was handed (``*_from_params`` check every one of them first), so the helper
never installs text it was given. A file already installed is read back field by field
(``check_installed_*``) before the helper replaces or removes it.

Writing functions raise ``RenderError`` (from ``core.quoting``) for a value a format cannot
hold; the ``*_from_params`` readers and the ``check_*`` functions raise ``Refused``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import textwrap
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from mtpstudio.core import quoting
from mtpstudio.core.quoting import RenderError
from mtpstudio.helper.constants import (
    DISTRO_SESSION_DIRS,
    ENV_DIR,
    LOCAL_SESSION_DIRS,
    NAME_PATTERN,
    WAYLAND_SESSIONS,
    WRAPPER_DIR,
    X11_SESSIONS,
)
from mtpstudio.helper.safefs import Refused, components, open_root, opened_dir

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

MESA_EGL_VENDOR_FILE = "/usr/share/glvnd/egl_vendor.d/50_mesa.json"

# Variables the software-rendering sessions set (and take back out of the user manager).
_MESA_ONLY = ("__EGL_VENDOR_LIBRARY_FILENAMES", "__GLX_VENDOR_LIBRARY_NAME")
_SOFTWARE_GL = ("LIBGL_ALWAYS_SOFTWARE", "GALLIUM_DRIVER", "LP_NUM_THREADS")
SESSION_VARIABLES = ("KWIN_COMPOSE", "KWIN_DRM_DEVICES", *_SOFTWARE_GL, *_MESA_ONLY)
"""Every variable a mtpstudio session may set; a user unit unsets them for llama-server."""

NVIDIA_PROFILE_NAME = "50-mtpstudio-desktop-vram.json"
NVIDIA_PROFILE_PROCESSES = ("kwin_wayland", "Xwayland", "plasmashell")
_PROFILE_TITLE = "mtpstudio: return freed video memory in the desktop"

# Limits on what a caller may hand over (far above anything mtpstudio renders).
_MAX_WORDS = 512
_MAX_WORD = 4096
_MAX_TEXT = 2000
_MAX_NOTES = 512
_MAX_WARNINGS = 64
_MAX_ENV = 64
_MAX_FILE_NAME = 255
_MAX_SESSION_FILE = 256 * 1024

_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
_ROOT_USERS = {"root", "0"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REFUSED_VARIABLES = {"GCONV_PATH", "GLIBC_TUNABLES"}  # besides LD_*: they load code
_IGPU_CARD = re.compile(r"/dev/dri/(by-path/pci-[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
                        r"-card|card[0-9]{1,3})\Z")  # fmt: skip
_PROCESS_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


# --------------------------------------------------------------------------------------------
# comments


def comment(text: str) -> str:
    """Text for a ``#`` comment line (one line, never ending in a backslash)."""
    quoting.check_one_line(text, "a comment")
    return text.rstrip("\\ ")


def comment_wrap(text: str, first: str = "# ", rest: str | None = None, width: int = 96) -> str:
    """``text`` as ``#`` comment lines of at most ``width`` columns (hanging indent ``rest``)."""
    quoting.check_one_line(text, "a comment")
    rest = first if rest is None else rest
    lines = textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(line.rstrip("\\ ") for line in lines) or first.rstrip()


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


# --------------------------------------------------------------------------------------------
# units and environment files


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
        }


def _exec_start(shape: UnitShape) -> str:
    return quoting.systemd_command_line(shape.argv, shape.arg_groups)


_SYSTEM_HARDENING = """\
# Hardening (systemd-analyze security scores it below 3.5) that leaves the engine what it
# needs: reading the model (everything is read-only but the cache folder), its port, and the
# GPU device nodes of the classes NVIDIA (/dev/nvidia*), DRM (/dev/dri) and AMD (/dev/kfd)
# cards use; every other device is closed. Left out on purpose: PrivateDevices= (a private
# /dev without the GPU), MemoryDenyWriteExecute= (breaks the CUDA JIT), ProcSubset=pid
# (libcuda reads /proc/driver/nvidia), RemoveIPC= (User= is often the desktop user, whose
# shared memory it would delete). With NoNewPrivileges= the setuid nvidia-modprobe cannot
# create /dev/nvidia-uvm: load nvidia-uvm at boot.
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome=read-only
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
DevicePolicy=closed
DeviceAllow=char-nvidia-frontend rw
DeviceAllow=char-nvidia-uvm rw
DeviceAllow=char-nvidia-caps r
DeviceAllow=char-drm rw
DeviceAllow=char-kfd rw
"""


def render_unit(shape: UnitShape) -> str:
    """The unit's text (system or user), exactly as mtpstudio writes it."""
    header = comment_header(shape.unit_name, shape.description, shape.notes, shape.warnings)
    description = quoting.systemd_text(shape.description)
    env_path = quoting.systemd_path(shape.env_path)
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
            f"ExecStart={exec_start}\n"
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
        f"ExecStart={exec_start}\n"
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
        *(quoting.env_file_assignment(name, value) for name, value in env),
    ]
    return "\n".join(lines) + "\n"


# -- checking what a caller hands over -------------------------------------------------------


def _text(value: Any, what: str, limit: int = _MAX_TEXT, *, empty: bool = False) -> str:
    """One line of printable text (no control characters at all), at most ``limit`` long."""
    if not isinstance(value, str):
        raise Refused(f"{what} must be text")
    if not value and not empty:
        raise Refused(f"{what} is empty")
    if len(value) > limit:
        raise Refused(f"{what} is longer than {limit} characters")
    bad = _CONTROL.search(value)
    if bad is not None:
        raise Refused(f"{what} contains the control character {bad.group()!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise Refused(f"{what} must be true or false")
    return value


def _list(value: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise Refused(f"{what} must be a list")
    if len(value) > limit:
        raise Refused(f"{what} has more than {limit} entries")
    return value


def _only_keys(payload: Mapping[str, Any], allowed: set[str], what: str) -> None:
    extra = sorted(set(payload) - allowed)
    if extra:
        raise Refused(
            f"the input for {what} has {extra[0][:40]!r}, which the helper does not take "
            f"(it builds the files itself from: {', '.join(sorted(allowed))})"
        )


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


def check_variable(name: Any, where: str) -> str:
    """A variable name a file of mtpstudio's may set: no LD_* and no other loader knobs."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise Refused(f"{where} sets {str(name)[:60]!r}, which is not a variable name")
    if name.startswith("LD_") or name in _REFUSED_VARIABLES:
        raise Refused(f"{where} sets {name}, which mtpstudio does not write")
    return name


def check_file_name(name: Any, suffix: str) -> str:
    """A plain file name ending in ``suffix`` (no ``/``, no ``..``, no newline)."""
    if (
        not isinstance(name, str)
        or not NAME_PATTERN.match(name)
        or ".." in name
        or not name.endswith(suffix)
        or name == suffix
    ):
        shown = name if isinstance(name, str) else str(name)
        raise Refused(f"{shown!r} is not an accepted name (letters, digits, _ @ + . - ; {suffix})")
    return name


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
    argv = _list(value, "the command", _MAX_WORDS)
    words = tuple(_text(w, "a word of the command", _MAX_WORD, empty=True) for w in argv)
    if not words or not words[0].startswith("/"):
        raise Refused("the unit's ExecStart= must start with an absolute path")
    return words


def _groups(value: Any, argv: Sequence[str]) -> tuple[int, ...] | None:
    if value is None:
        return None
    groups = _list(value, "arg_groups", _MAX_WORDS)
    if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in groups):
        raise Refused("arg_groups must be positive whole numbers")
    if sum(groups) != len(argv) - 1:
        raise Refused("arg_groups must cover the command's arguments exactly")
    return tuple(groups)


def _pairs(value: Any, what: str, limit: int) -> list[tuple[Any, Any]]:
    out = []
    for item in _list(value, what, limit):
        if not isinstance(item, list) or len(item) != 2:
            raise Refused(f"each entry of {what} must be a pair")
        out.append((item[0], item[1]))
    return out


def _as_refusal(exc: RenderError) -> Refused:
    return Refused(str(exc).rstrip("."))


def system_unit_from_params(name: str, payload: Mapping[str, Any], root: str = "/") -> UnitShape:
    """The system unit ``install-unit NAME`` asks for, every value checked; Refused otherwise."""
    check_system_unit_name(name, root)
    _only_keys(payload, {"env_name", "user", "model_file", "argv", "arg_groups", "notes",
                         "warnings", "mlock", "loopback", "env"}, "a unit")  # fmt: skip
    env_name = check_file_name(payload.get("env_name"), ".env")
    model_file = _text(payload.get("model_file"), "the model's file name", _MAX_FILE_NAME)
    if "/" in model_file:
        raise Refused("the model's file name must be a name, not a path")
    argv = _words(payload.get("argv"))
    notes = tuple(
        (_text(f, "a flag's name", _MAX_WORD), _text(e, "a flag's explanation"))
        for f, e in _pairs(payload.get("notes", []), "notes", _MAX_NOTES)
    )
    warnings = tuple(
        _text(w, "a warning") for w in _list(payload.get("warnings", []), "warnings", _MAX_WARNINGS)
    )
    env = tuple(
        (check_variable(n, "the environment file"), _text(v, f"the value of {n}", _MAX_WORD,
                                                          empty=True))
        for n, v in _pairs(payload.get("env", []), "env", _MAX_ENV)
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
        mlock=_bool(payload.get("mlock", False), "mlock"),
        loopback=_bool(payload.get("loopback", True), "loopback"),
        env=env,
    )
    try:  # every value must also be writable in its format
        render_unit(shape)
        render_env(name, env)
    except RenderError as exc:
        raise _as_refusal(exc) from None
    return shape


# -- reading an installed unit back ----------------------------------------------------------


def _entries(text: str, what: str) -> list[tuple[str, str, str]]:
    try:
        return quoting.parse_unit_file(text)
    except ValueError as exc:
        raise Refused(f"{what} does not parse ({exc})") from None


def _normal(entries: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The entries with ``ExecStart=`` as its words (continuation lines join with spaces)."""
    out = []
    for section, key, value in entries:
        if (section, key) == ("Service", "ExecStart"):
            with suppress(ValueError):
                value = "\0".join(quoting.split_systemd_command_line(value))
        out.append((section, key, value))
    return out


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
    try:
        argv = tuple(quoting.split_systemd_command_line(values.get(("Service", "ExecStart"), "")))
    except ValueError as exc:
        raise Refused(f"the unit's ExecStart= is not an absolute command ({exc})") from None
    description = values.get(("Unit", "Description"), "").replace("%%", "%")
    model_file = description.removeprefix("llama-server ").removesuffix(" (mtpstudio)")
    if not argv or not argv[0].startswith("/"):
        raise Refused("the unit's ExecStart= must start with an absolute path")
    shape = UnitShape(
        system=system,
        unit_name=name,
        env_path=env_file.replace("%%", "%"),
        user=user,
        model_file=model_file,
        argv=argv,
        mlock=("Service", "LimitMEMLOCK") in values,
        loopback=("Service", "IPAddressDeny") in values,
    )
    try:
        expected = _normal(quoting.parse_unit_file(render_unit(shape)))
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
    for name in quoting.parse_env_file(text):
        check_variable(name, "the environment file")


# --------------------------------------------------------------------------------------------
# login sessions


@dataclass(frozen=True)
class VariantFacts:
    """What one session variant is called and does."""

    kind: str  # WAYLAND_SESSIONS or X11_SESSIONS
    file_stem: str
    wrapper_name: str
    session_name: str
    comment: str

    @property
    def x11(self) -> bool:
        return self.kind == X11_SESSIONS

    @property
    def file_name(self) -> str:
        return f"{self.file_stem}.desktop"


VARIANTS: Mapping[str, VariantFacts] = {
    "wayland-igpu": VariantFacts(
        WAYLAND_SESSIONS,
        "plasmawayland-igpu-mtpstudio",
        "startplasma-wayland-igpu-mtpstudio",
        "Plasma on the iGPU by mtpstudio (Wayland)",
        "Plasma drawn by the integrated GPU, leaving the NVIDIA card's memory to llama-server",
    ),
    "wayland-llvmpipe": VariantFacts(
        WAYLAND_SESSIONS,
        "plasmawayland-llvmpipe-mtpstudio",
        "startplasma-wayland-llvmpipe-mtpstudio",
        "Plasma software rendering by mtpstudio (Wayland)",
        "Plasma drawn by the CPU (llvmpipe), leaving the NVIDIA card's memory to llama-server",
    ),
    "x11-llvmpipe": VariantFacts(
        X11_SESSIONS,
        "plasmax11-llvmpipe-mtpstudio",
        "startplasmax11-llvmpipe-mtpstudio",
        "Plasma software rendering by mtpstudio (X11)",
        "Plasma on X11 with OpenGL drawn by the CPU (llvmpipe); Xorg keeps its framebuffers",
    ),
}
"""The session variants by their ``SessionVariant`` value."""

STARTPLASMA = {WAYLAND_SESSIONS: "startplasma-wayland", X11_SESSIONS: "startplasma-x11"}


@dataclass(frozen=True)
class SessionShape:
    """The values a login session of mtpstudio's is made of.

    Attributes:
        variant: a key of ``VARIANTS``.
        sessions_dir: the folder the ``.desktop`` file goes to.
        plasma_command: what the distribution runs to start Plasma (its session's ``Exec=``).
        plasma_source: the distribution's Plasma session file that command comes from.
        igpu_card: the iGPU's DRM node (the iGPU variant only).
        llvmpipe_threads: ``LP_NUM_THREADS`` for the software renderer (None: its default).
        wrapper_dir: where the wrapper goes.
        mesa_egl_vendor_file: Mesa's EGL vendor file.
    """

    variant: str
    sessions_dir: str
    plasma_command: tuple[str, ...]
    plasma_source: str | None = None
    igpu_card: str | None = None
    llvmpipe_threads: int | None = None
    wrapper_dir: str = WRAPPER_DIR
    mesa_egl_vendor_file: str = MESA_EGL_VENDOR_FILE

    @property
    def facts(self) -> VariantFacts:
        return VARIANTS[self.variant]

    @property
    def wrapper_path(self) -> str:
        return f"{self.wrapper_dir.rstrip('/')}/{self.facts.wrapper_name}"

    @property
    def desktop_path(self) -> str:
        return f"{self.sessions_dir.rstrip('/')}/{self.facts.file_name}"

    def params(self) -> dict[str, Any]:
        """What a caller hands the helper for ``install-session NAME``.

        Raises:
            RenderError: a value the helper does not take (its wrapper folder and Mesa file are
                fixed), or no Plasma session file to take the command from.
        """
        if self.wrapper_dir != WRAPPER_DIR or self.mesa_egl_vendor_file != MESA_EGL_VENDOR_FILE:
            raise RenderError(
                f"the helper installs session wrappers only in {WRAPPER_DIR}, with Mesa's "
                f"EGL file {MESA_EGL_VENDOR_FILE}"
            )
        if self.plasma_source is None:
            raise RenderError("the session needs Plasma's own session file to take its command")
        return {
            "variant": self.variant,
            "sessions_dir": self.sessions_dir,
            "plasma_session": self.plasma_source,
            "igpu_card": self.igpu_card if self.variant == "wayland-igpu" else None,
            "llvmpipe_threads": self.llvmpipe_threads,
        }


def _exports(shape: SessionShape) -> list[tuple[str, str]]:
    exports: list[tuple[str, str]] = []
    if shape.variant == "wayland-llvmpipe":
        exports.append(("KWIN_COMPOSE", "Q"))
    if shape.variant != "wayland-igpu":
        exports += [("LIBGL_ALWAYS_SOFTWARE", "1"), ("GALLIUM_DRIVER", "llvmpipe")]
        if shape.llvmpipe_threads is not None:
            exports.append(("LP_NUM_THREADS", str(shape.llvmpipe_threads)))
    return exports


def _plain_exec_path(path: str, what: str) -> str:
    """SDDM runs a Wayland session's Exec through ``exec $@`` unquoted: only plain paths work."""
    quoting.check_one_line(path, what)
    if not path.startswith("/") or quoting.desktop_exec_arg(path) != path:
        raise RenderError(
            f"{what} {path!r} must be an absolute path without spaces, quotes or shell "
            "characters: the login manager does not honour quoting",
        )
    return path


def _checked_session(shape: SessionShape) -> VariantFacts:
    facts = shape.facts
    _plain_exec_path(shape.wrapper_path, "the session wrapper path")
    if shape.variant == "wayland-igpu" and not shape.igpu_card:
        raise RenderError(
            "the iGPU session needs the iGPU's DRM device (e.g. /dev/dri/by-path/…-card)"
        )
    if shape.llvmpipe_threads is not None and shape.llvmpipe_threads < 1:
        raise RenderError("llvmpipe threads must be at least 1")
    if not shape.plasma_command or not shape.plasma_command[0]:
        raise RenderError("the command that starts Plasma is empty")
    for word in shape.plasma_command:
        quoting.check_one_line(word, "the command that starts Plasma")
    return facts


def render_session_desktop(shape: SessionShape) -> str:
    """The session's ``.desktop`` file (what the login screen lists)."""
    facts = _checked_session(shape)
    wrapper = shape.wrapper_path
    return (
        f'# Login session "{comment(facts.session_name)}", written by mtpstudio.\n'
        "# The login screen remembers the last session: to go back, pick the usual Plasma "
        "session.\n"
        "# To remove it, delete this file and the script in Exec= (or let mtpstudio do it).\n"
        "[Desktop Entry]\n"
        "Type=Application\n"
        f"Name={quoting.desktop_string(facts.session_name)}\n"
        f"Comment={quoting.desktop_string(facts.comment)}\n"
        f"Exec={quoting.desktop_exec_line([wrapper])}\n"
        f"TryExec={quoting.desktop_string(wrapper)}\n"
        "DesktopNames=KDE\n"
    )


_WRAPPER_TAIL = """\
if ! command -v "${PLASMA_SESSION[0]}" >/dev/null 2>&1; then
    echo "mtpstudio: ${PLASMA_SESSION[0]} is missing (was Plasma removed?); pick another" \\
        "session at the login screen, or remove this one with: mtpstudio revert session" >&2
    exit 1
fi

cleanup() {
    # Plasma copies the session environment into the systemd user manager; take these back
    # out so user services and the next session (after a crash) do not inherit them.
    systemctl --user unset-environment "${SESSION_VARIABLES[@]}" >/dev/null 2>&1 || true
}
trap cleanup EXIT

"${PLASMA_SESSION[@]}" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
wait "$child"
status=$?
while kill -0 "$child" 2>/dev/null; do
    wait "$child"
    status=$?
done
exit "$status"
"""

_IGPU_BLOCK = """\
# Open only the iGPU (its by-path link survives reboots; cardN numbers do not).
IGPU_NODE={card}
card=$(readlink -f -- "$IGPU_NODE" 2>/dev/null || true)
if [ -n "$card" ] && [ -c "$card" ]; then
    export KWIN_DRM_DEVICES="$card"
    # Keep NVIDIA's EGL/GLX out of the compositor and its clients: Mesa only.
    if [ -e "$MESA_EGL_VENDOR" ]; then
        export __EGL_VENDOR_LIBRARY_FILENAMES="$MESA_EGL_VENDOR"
    fi
    export __GLX_VENDOR_LIBRARY_NAME=mesa
else
    echo "mtpstudio: iGPU device $IGPU_NODE not found; starting Plasma unchanged" >&2
fi
"""

_SOFTWARE_BLOCK = """\
# Keep NVIDIA's EGL/GLX out of the desktop: Mesa only (its file must exist, or EGL breaks).
if [ -e "$MESA_EGL_VENDOR" ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES="$MESA_EGL_VENDOR"
fi
export __GLX_VENDOR_LIBRARY_NAME=mesa
"""


def render_session_wrapper(shape: SessionShape) -> str:
    """The script the ``.desktop`` file runs: sets the rendering variables, starts Plasma."""
    facts = _checked_session(shape)
    source = f" (Exec= of {comment(shape.plasma_source)})" if shape.plasma_source else ""
    x11 = (
        "# On X11 the Xorg server keeps its framebuffers on the card that drives the display.\n"
        if facts.x11
        else ""
    )
    if shape.variant == "wayland-igpu":
        assert shape.igpu_card is not None
        body = _IGPU_BLOCK.format(card=quoting.shell_quote(shape.igpu_card))
    else:
        body = "".join(f"export {n}={quoting.shell_quote(v)}\n" for n, v in _exports(shape))
        body += _SOFTWARE_BLOCK
    return (
        "#!/bin/bash\n"
        f'# Starts the login session "{comment(facts.session_name)}".\n'
        "# Written by mtpstudio; the login screen runs it through\n"
        f"# {comment(shape.desktop_path)}.\n"
        f"# {comment(facts.comment)}.\n"
        "# To go back, pick the usual Plasma session at the login screen (it remembers the last "
        "one).\n"
        f"{x11}"
        "\n"
        f"# What the distribution runs to start Plasma{source}.\n"
        f"PLASMA_SESSION=({quoting.shell_join(shape.plasma_command)})\n"
        f"MESA_EGL_VENDOR={quoting.shell_quote(shape.mesa_egl_vendor_file)}\n"
        f"SESSION_VARIABLES=({' '.join(SESSION_VARIABLES)})\n"
        "\n"
        f"{body}"
        "\n"
        f"{_WRAPPER_TAIL}"
    )


def desktop_entry(text: str) -> dict[str, str]:
    """The unlocalised keys of a ``.desktop`` file's ``[Desktop Entry]`` group (later wins)."""
    entries: dict[str, str] = {}
    group = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if group == "Desktop Entry" and sep and "[" not in key:
            entries[key.strip()] = value.strip()
    return entries


def runs_plasma(entries: Mapping[str, str], kind: str) -> bool:
    """Whether a session's ``Exec=`` runs Plasma's own start program for ``kind``."""
    words = entries.get("Exec", "").split()
    return any(os.path.basename(w) == STARTPLASMA[kind] for w in words)


def hidden(entries: Mapping[str, str]) -> bool:
    return any(entries.get(k, "").lower() == "true" for k in ("Hidden", "NoDisplay"))


def _session_folders(kind: str, configured: Sequence[str]) -> set[str]:
    return {LOCAL_SESSION_DIRS[kind], DISTRO_SESSION_DIRS[kind], *configured}


def read_plasma_command(root: str, path: str, kind: str, configured: Sequence[str] = ()) -> (
    tuple[str, ...]
):  # fmt: skip
    """The command in the ``Exec=`` of Plasma's own session file ``path`` below ``root``.

    The file must be in a session folder of ``kind``, not one of mtpstudio's, a regular file
    (no link anywhere on its path) owned by root (or by the user running the helper with
    ``--root``), and its ``Exec=`` must run Plasma's start program.
    """
    folder, _, name = path.rpartition("/")
    if folder not in _session_folders(kind, configured):
        raise Refused(f"{path!r} is not in a {kind} folder the login screen reads")
    if not name.endswith(".desktop") or name.endswith("-mtpstudio.desktop"):
        raise Refused(f"{path!r} is not a session file of the distribution's")
    components(path)
    root_fd = open_root(root)
    try:
        with opened_dir(root_fd, folder) as fd:
            if fd is None:
                raise Refused(f"{folder} does not exist")
            data = _read_owned(fd, name, path)
    finally:
        os.close(root_fd)
    entries = desktop_entry(data.decode("utf-8", errors="replace"))
    if not runs_plasma(entries, kind) or hidden(entries):
        raise Refused(f"{path} does not start Plasma ({STARTPLASMA[kind]})")
    try:
        command = tuple(quoting.split_desktop_exec(entries["Exec"]))
    except ValueError as exc:
        raise Refused(f"the Exec= line of {path} cannot be read ({exc})") from None
    for word in command:
        _text(word, f"the Exec= of {path}", _MAX_WORD)
    return command


def _read_owned(dir_fd: int, name: str, shown: str) -> bytes:
    """A regular file owned by root or by the helper's own user (not followed if a link)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)  # fmt: skip
    except FileNotFoundError:
        raise Refused(f"{shown} does not exist") from None
    except OSError as exc:
        raise Refused(f"{shown} cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{shown} is not a regular file")
        if st.st_uid not in (0, os.geteuid()):
            raise Refused(f"{shown} is owned by another user (uid {st.st_uid})")
        if st.st_size > _MAX_SESSION_FILE:
            raise Refused(f"{shown} is larger than {_MAX_SESSION_FILE} bytes")
        return os.read(fd, _MAX_SESSION_FILE)
    finally:
        os.close(fd)


def session_from_params(
    name: str, payload: Mapping[str, Any], root: str, configured: Sequence[str] = ()
) -> SessionShape:
    """The session ``install-session NAME`` asks for, every value checked; Refused otherwise.

    ``configured`` are the session folders the installed SDDM's own configuration names (the
    folder itself is checked by the caller against them).
    """
    _only_keys(payload, {"variant", "sessions_dir", "plasma_session", "igpu_card",
                         "llvmpipe_threads", "desktop_vram"}, "a session")  # fmt: skip
    variant = payload.get("variant")
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise Refused(f"the variant must be one of {', '.join(VARIANTS)}")
    facts = VARIANTS[variant]
    if name != facts.file_name:
        raise Refused(f"the {variant} session is called {facts.file_name}, not {name!r}")
    sessions_dir = _text(payload.get("sessions_dir"), "sessions_dir", _MAX_WORD)
    card = payload.get("igpu_card")
    if variant == "wayland-igpu":
        if not isinstance(card, str) or not _IGPU_CARD.match(card):
            raise Refused(
                "the iGPU session needs the iGPU's DRM node (/dev/dri/by-path/pci-…-card)"
            )
    elif card is not None:
        raise Refused(f"the {variant} session takes no iGPU node")
    threads = payload.get("llvmpipe_threads")
    if threads is not None and (
        not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 1024
    ):
        raise Refused("llvmpipe_threads must be a whole number from 1 to 1024")
    source = _text(payload.get("plasma_session"), "plasma_session", _MAX_WORD)
    command = read_plasma_command(root, source, facts.kind, configured)
    shape = SessionShape(variant, sessions_dir, command, source, card, threads)
    try:
        render_session_desktop(shape)
        render_session_wrapper(shape)
    except RenderError as exc:
        raise _as_refusal(exc) from None
    return shape


def wrapper_variant(name: str) -> VariantFacts | None:
    return next((f for f in VARIANTS.values() if f.wrapper_name == name), None)


def check_installed_desktop(text: str, name: str) -> None:
    """An installed session file is exactly mtpstudio's for that variant (comments aside)."""
    facts = next((f for f in VARIANTS.values() if f.file_name == name), None)
    if facts is None:
        raise Refused(f"{name} is not the name of a session mtpstudio installs")
    shape = SessionShape(next(k for k, f in VARIANTS.items() if f is facts), "/", ("/x",),
                         igpu_card="/dev/dri/card0")  # fmt: skip
    expected = render_session_desktop(shape)

    def fields(t: str) -> list[str]:
        return [ln for ln in t.split("\n") if ln.strip() and not ln.startswith("#")]

    if fields(text) != fields(expected):
        raise Refused("the session file is not one mtpstudio writes")


def check_installed_wrapper(text: str, name: str) -> None:
    """An installed wrapper is one of mtpstudio's (its name, its first lines)."""
    facts = wrapper_variant(name)
    start = f'#!/bin/bash\n# Starts the login session "{facts.session_name}".\n' if facts else ""
    if facts is None or not text.startswith(start):
        raise Refused("the session wrapper is not one mtpstudio writes")


# --------------------------------------------------------------------------------------------
# the NVIDIA driver profile


def render_nvidia_profile(processes: Sequence[str] = NVIDIA_PROFILE_PROCESSES) -> str:
    """The profile ``GLVidHeapReuseRatio=0`` for ``processes`` (procname rules)."""
    if not processes:
        raise RenderError("the NVIDIA profile needs at least one process")
    rules = []
    for proc in processes:
        quoting.check_one_line(proc, "a process name")
        rules.append(
            "    {\n"
            f'      "pattern": {{ "feature": "procname", "matches": {_json_string(proc)} }},\n'
            f'      "profile": "{_PROFILE_TITLE}"\n'
            "    }"
        )
    return (
        "{\n"
        '  "rules": [\n' + ",\n".join(rules) + "\n  ],\n"
        '  "profiles": [\n'
        "    {\n"
        f'      "name": "{_PROFILE_TITLE}",\n'
        '      "settings": [ { "key": "GLVidHeapReuseRatio", "value": 0 } ]\n'
        "    }\n"
        "  ]\n"
        "}\n"
    )


def _json_string(text: str) -> str:
    return json.dumps(text)


def nvidia_profile_from_params(name: str, payload: Mapping[str, Any]) -> tuple[str, ...]:
    """The processes ``install-nvidia-profile NAME`` asks for; Refused otherwise."""
    if name != NVIDIA_PROFILE_NAME:
        raise Refused(f"the NVIDIA profile is called {NVIDIA_PROFILE_NAME}, not {name!r}")
    _only_keys(payload, {"processes"}, "the NVIDIA profile")
    processes = _list(payload.get("processes"), "processes", 32)
    if not processes:
        raise Refused("the NVIDIA profile needs at least one process")
    for proc in processes:
        if not isinstance(proc, str) or not _PROCESS_NAME.match(proc):
            raise Refused(f"{str(proc)[:40]!r} is not a process name")
    return tuple(processes)
