"""A login session of mtpstudio's: its ``.desktop`` file and the wrapper script it runs, built
from the variant, the session folder, the distribution's Plasma command (read by the helper from
Plasma's own root-owned session file), the iGPU's DRM node and llvmpipe's thread count.

``render_session_desktop``/``render_session_wrapper`` write them from ``templates/sessions/`` and
read each back against its shape (mtpstudio's renderer and the helper both call them);
``session_from_params`` checks what a caller hands the helper for ``install-session``;
``check_installed_*`` read installed files back before a revert.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.quoting.checks import check_one_line
from mtpstudio.core.quoting.desktop_entry import (
    desktop_exec_arg,
    desktop_unescape_string,
    split_desktop_exec,
)
from mtpstudio.helper.constants import (
    DISTRO_SESSION_DIRS,
    LOCAL_SESSION_DIRS,
    WAYLAND_SESSIONS,
    WRAPPER_DIR,
    X11_SESSIONS,
)
from mtpstudio.helper.safefs import Refused, components, open_root, opened_dir
from mtpstudio.helper.shape_common import (
    MAX_WORD,
    RenderError,
    as_refusal,
    only_keys,
    text_value,
)
from mtpstudio.helper.templating import render_template

MESA_EGL_VENDOR_FILE = "/usr/share/glvnd/egl_vendor.d/50_mesa.json"

# Variables the software-rendering sessions set (and take back out of the user manager).
_MESA_ONLY = ("__EGL_VENDOR_LIBRARY_FILENAMES", "__GLX_VENDOR_LIBRARY_NAME")
_SOFTWARE_GL = ("LIBGL_ALWAYS_SOFTWARE", "GALLIUM_DRIVER", "LP_NUM_THREADS")
SESSION_VARIABLES = ("KWIN_COMPOSE", "KWIN_DRM_DEVICES", *_SOFTWARE_GL, *_MESA_ONLY)
"""Every variable a mtpstudio session may set; a user unit unsets them for llama-server."""

_MAX_SESSION_FILE = 256 * 1024
_IGPU_CARD = re.compile(r"/dev/dri/(by-path/pci-[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
                        r"-card|card[0-9]{1,3})\Z")  # fmt: skip


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
    check_one_line(path, what)
    if not path.startswith("/") or desktop_exec_arg(path) != path:
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
        check_one_line(word, "the command that starts Plasma")
    return facts


def render_session_desktop(shape: SessionShape) -> str:
    """The session's ``.desktop`` file (what the login screen lists): its template rendered
    from the shape, then read back and compared with it."""
    facts = _checked_session(shape)
    text = render_template(
        "sessions/session.desktop.j2",
        session_name=facts.session_name,
        comment=facts.comment,
        wrapper=shape.wrapper_path,
    )
    entries = desktop_entry(text)
    try:
        command = split_desktop_exec(entries.get("Exec", ""))
    except ValueError:
        command = []
    expected = {"Name": facts.session_name, "TryExec": shape.wrapper_path, "Type": "Application"}
    read = {key: _desktop_value(entries.get(key, "")) for key in expected}
    if command != [shape.wrapper_path] or read != expected:
        raise RenderError(
            f"the session file {facts.file_name} written from its template does not say what "
            "its session is (Name=, Exec=, TryExec=)"
        )
    return text


def _desktop_value(value: str) -> str:
    try:
        return desktop_unescape_string(value)
    except ValueError:
        return "\0"  # never a name: the comparison fails


def render_session_wrapper(shape: SessionShape) -> str:
    """The script the ``.desktop`` file runs: sets the rendering variables, starts Plasma.
    Its template rendered from the shape, then its variable lines read back (the shell's
    word rules) and compared with it."""
    facts = _checked_session(shape)
    igpu = shape.variant == "wayland-igpu"
    exports = [] if igpu else _exports(shape)
    text = render_template(
        "sessions/wrapper.sh.j2",
        session_name=facts.session_name,
        comment=facts.comment,
        desktop_path=shape.desktop_path,
        plasma_source=shape.plasma_source,
        x11=facts.x11,
        plasma_command=shape.plasma_command,
        mesa_egl_vendor=shape.mesa_egl_vendor_file,
        session_variables=SESSION_VARIABLES,
        igpu_card=shape.igpu_card if igpu else None,
        exports=exports,
    )
    expected = [
        ("PLASMA_SESSION", list(shape.plasma_command)),
        ("MESA_EGL_VENDOR", [shape.mesa_egl_vendor_file]),
        ("SESSION_VARIABLES", list(SESSION_VARIABLES)),
        *((("IGPU_NODE", [shape.igpu_card or ""]),) if igpu else ()),
        *((f"export {name}", [value]) for name, value in exports),
        *(() if igpu else (("export __GLX_VENDOR_LIBRARY_NAME", ["mesa"]),)),  # Mesa's GLX only
    ]
    if _wrapper_assignments(text) != expected:
        raise RenderError(
            f"the session wrapper {facts.wrapper_name} written from its template does not "
            "set what its session sets"
        )
    return text


_ASSIGNMENT = re.compile(r"((?:export )?[A-Za-z_][A-Za-z0-9_]*)=(.*)\Z")


def _wrapper_assignments(text: str) -> list[tuple[str, list[str]]]:
    """The wrapper's top-level assignments of fixed values (``NAME=…``, ``NAME=(…)``,
    ``export NAME=…`` at the start of a line, no ``$``), each value split by the shell's word
    rules."""
    found: list[tuple[str, list[str]]] = []
    for line in text.split("\n"):
        match = _ASSIGNMENT.match(line)
        if match is None or "$" in match.group(2):
            continue
        value = match.group(2)
        if value.startswith("(") and value.endswith(")"):
            value = value[1:-1]
        try:
            found.append((match.group(1), shlex.split(value)))
        except ValueError:
            found.append((match.group(1), ["\0"]))
    return found


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
        command = tuple(split_desktop_exec(entries["Exec"]))
    except ValueError as exc:
        raise Refused(f"the Exec= line of {path} cannot be read ({exc})") from None
    for word in command:
        text_value(word, f"the Exec= of {path}", MAX_WORD)
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
    only_keys(payload, {"variant", "sessions_dir", "plasma_session", "igpu_card",
                         "llvmpipe_threads", "desktop_vram"}, "a session")  # fmt: skip
    variant = payload.get("variant")
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise Refused(f"the variant must be one of {', '.join(VARIANTS)}")
    facts = VARIANTS[variant]
    if name != facts.file_name:
        raise Refused(f"the {variant} session is called {facts.file_name}, not {name!r}")
    sessions_dir = text_value(payload.get("sessions_dir"), "sessions_dir", MAX_WORD)
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
    source = text_value(payload.get("plasma_session"), "plasma_session", MAX_WORD)
    command = read_plasma_command(root, source, facts.kind, configured)
    shape = SessionShape(variant, sessions_dir, command, source, card, threads)
    try:
        render_session_desktop(shape)
        render_session_wrapper(shape)
    except RenderError as exc:
        raise as_refusal(exc) from None
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
