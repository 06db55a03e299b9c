"""What goes where, previews with diffs, and installing or reverting through the helper.

System files (sessions, system units, the NVIDIA profile) are only ever written by
``mtpstudio-helper``: through ``pkexec`` on a real system, or - with ``--root DIR`` - the same
helper code in-process against DIR. User units go to ``$XDG_CONFIG_HOME/systemd/user`` with the
same atomic, manifest-backed steps (state in ``$XDG_STATE_HOME/mtpstudio``), followed by
``systemctl --user daemon-reload`` when a user manager is running.
"""

from __future__ import annotations

import difflib
import io
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from mtpstudio.core import paths
from mtpstudio.core.desktop.helper_setup import (
    HelperCall,
    PkexecSetup,
    SetupFirstTransport,
    helper_state,
    pkexec_failure,
)
from mtpstudio.core.desktop.helper_setup import (
    InstallError as InstallError,  # re-exported: callers catch it from here
)
from mtpstudio.core.desktop.reclaim import session_display_name
from mtpstudio.core.desktop.session_files import (
    SessionSettings,
    SessionVariant,
    render_session_files,
)
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.runner import Runner
from mtpstudio.helper import main as helper_main
from mtpstudio.helper.constants import (
    DISTRO_SESSION_DIRS,
    HELPER_INSTALL_PATH,
    USER_GROUP_FOLDERS,
    WAYLAND_SESSIONS,
    X11_SESSIONS,
)
from mtpstudio.helper.faults import Faults
from mtpstudio.helper.safefs import Refused, open_root, opened_dir, read_regular
from mtpstudio.helper.sddm import SECTIONS, SessionDirs, system_layout
from mtpstudio.helper.store import MANIFEST, FileSpec, Layout, RollbackIncomplete, Store
from mtpstudio.helper.unit_shape import UNIT_PREFIX, check_installed_unit, check_system_unit_name
from mtpstudio.helper.validate import check_env_file

PKEXEC_TIMEOUT_S = 300.0
SYSTEMCTL_TIMEOUT_S = 30.0
GROUP_KINDS = ("session", "unit", "nvidia-profile")


@dataclass(frozen=True)
class InstallPlan:
    """One helper call: the verb, the NAME, the stdin payload and the files it will write."""

    verb: str
    name: str
    payload: bytes
    files: tuple[RenderedFile, ...]
    notes: tuple[str, ...] = ()
    shown_name: str = ""  # a session: what the login screen's menu shows for it
    switch_back: str = ""  # a session: the usual session to pick to go back

    @property
    def group(self) -> str:
        return f"{self.verb.removeprefix('install-')}:{self.name}"


@dataclass(frozen=True)
class FilePreview:
    """A file as it would be written, against what is installed now."""

    path: Path
    state: str  # "new", "unchanged" or "changed"
    diff: str
    explanation: str


@dataclass(frozen=True)
class HelperAnswer:
    """What the helper did (its JSON answer)."""

    group: str
    changes: tuple[tuple[str, str], ...]  # (path, action)
    extra: Mapping[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# what goes where (pure)


def session_kind(variant: SessionVariant) -> str:
    return X11_SESSIONS if variant is SessionVariant.X11_LLVMPIPE else WAYLAND_SESSIONS


def session_plan(
    variant: SessionVariant,
    settings: SessionSettings,
    sddm: SessionDirs,
    desktop_vram: Mapping[str, Any] | None = None,
    *,
    listed: Sequence[str] = (),
    switch_back: str = "",
) -> InstallPlan:
    """The session file + wrapper for ``variant`` in the folder the installed SDDM reads;
    ``listed`` are the names of the other sessions the login screen lists."""
    kind = session_kind(variant)
    target = sddm.target(kind)
    if target is None:
        raise InstallError(
            sddm.explain(kind).rstrip("."),
            hint=f"Set one folder, e.g. SessionDir={DISTRO_SESSION_DIRS[kind]}, in the "
            f"[{SECTIONS[kind]}] section of /etc/sddm.conf.d/, then run this again.",
        )
    if kind == WAYLAND_SESSIONS:
        settings = replace(settings, wayland_sessions_dir=target)
    else:
        settings = replace(settings, x11_sessions_dir=target)
    files = render_session_files(variant, settings)
    desktop, wrapper = files["desktop"], files["wrapper"]
    if desktop.params is None:
        raise InstallError(
            "Plasma's own session file is not known, so the session's command cannot be taken "
            "from it",
            hint="Install Plasma, then run this again.",
        )
    payload: dict[str, Any] = dict(desktop.params)
    if desktop_vram is not None:
        payload["desktop_vram"] = dict(desktop_vram)
    notes = (sddm.explain(kind), *sddm.notes)
    shown = sddm.shown_name(session_display_name(desktop.text), kind, listed)
    return InstallPlan("install-session", desktop.name, json.dumps(payload).encode(),
                       (wrapper, desktop), notes, shown, switch_back)  # fmt: skip


def system_unit_plan(files: Mapping[str, RenderedFile], root: Path | None = None) -> InstallPlan:
    """The system unit and its environment file (``render_service_files`` with SYSTEM scope).

    Raises:
        InstallError: the unit's name is not one the helper installs (``mtpstudio-…``), or a
            unit of that name comes with the system below ``root`` (it would be overridden).
    """
    unit, env = files["unit"], files["env"]
    if unit.params is None:
        raise InstallError(f"{unit.name} is a user unit; the helper installs system units")
    try:
        check_system_unit_name(unit.name, str(root or "/"))
    except Refused as exc:
        raise InstallError(
            f"{exc}",
            hint=f"Name the service {UNIT_PREFIX}… (plan: outputs.service_name, e.g. "
            f"{UNIT_PREFIX}llama; the Service page's name box), then install it again.",
        ) from None
    payload = json.dumps(unit.params).encode()
    return InstallPlan("install-unit", unit.name, payload, (env, unit))


def nvidia_profile_plan(profile: RenderedFile) -> InstallPlan:
    payload = json.dumps(dict(profile.params or {})).encode()
    return InstallPlan("install-nvidia-profile", profile.name, payload, (profile,))


PREVIEW_LIMIT_BYTES = 1024 * 1024


def _installed_text(path: Path, root: Path | None) -> tuple[str | None, str | None]:
    """(text, problem) of what is at ``path`` now, read the way the helper reads it: no link
    followed anywhere on the path, nothing but a regular file, at most 1 MiB (a FIFO or a device
    at the target is named, never opened for a blocking read)."""
    try:
        root_fd = open_root(str(root or "/"))
    except Refused as exc:
        return None, str(exc)
    try:
        with opened_dir(root_fd, str(path.parent)) as fd:
            if fd is None:
                return None, None
            data = read_regular(fd, path.name, str(path), PREVIEW_LIMIT_BYTES)
    except Refused as exc:
        return None, f"{exc}: the helper will refuse to replace it"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(root_fd)
    return (None if data is None else data.decode("utf-8", errors="replace")), None


def preview(files: Sequence[RenderedFile], root: Path | None = None) -> list[FilePreview]:
    """Each file against what is installed now (a unified diff; reading needs no root)."""
    out: list[FilePreview] = []
    for f in files:
        current, problem = _installed_text(f.install_path, root)
        if problem is not None:
            line = f"{f.install_path}: {problem}\n"
            out.append(FilePreview(f.install_path, problem, line, f.explanation))
            continue
        if current is None:
            state, old_lines = "new", []
        else:
            state = "unchanged" if current == f.text else "changed"
            old_lines = current.splitlines(keepends=True)
        diff = "".join(
            difflib.unified_diff(
                old_lines,
                f.text.splitlines(keepends=True),
                fromfile=f"{f.install_path} (installed)" if current is not None else "/dev/null",
                tofile=f"{f.install_path} (mtpstudio)",
            )
        )
        out.append(FilePreview(f.install_path, state, diff, f.explanation))
    return out


# --------------------------------------------------------------------------------------------
# talking to the helper


class HelperTransport(Protocol):
    """Runs ``mtpstudio-helper ARGS`` with ``payload`` on stdin: (exit code, stdout, stderr)."""

    def __call__(self, args: Sequence[str], payload: bytes) -> tuple[int, str, str]: ...


@dataclass(frozen=True)
class InProcessHelper:
    """The helper's own code against ``root`` (``--root``): no privileges, same checks."""

    root: Path
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def __call__(self, args: Sequence[str], payload: bytes) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        env = {k: v for k, v in self.environ.items() if k != "PKEXEC_UID"}
        if args and args[0].startswith("install-"):
            # A tree given with --root may be empty: give it the /var/lib the state lives in.
            (self.root / "var" / "lib").mkdir(parents=True, exist_ok=True)
        code = helper_main.run(
            ["--root", str(self.root), *args], io.BytesIO(payload), out, err, env
        )
        return code, out.getvalue(), err.getvalue()


class HelperNotSetUp(InstallError):
    """The helper is not installed (or is another version's) and setting it up was not asked."""


@dataclass(frozen=True)
class PkexecHelper:
    """The installed helper through pkexec (polkit asks for the administrator password)."""

    helper: str = HELPER_INSTALL_PATH
    pkexec: str = "pkexec"
    timeout: float = PKEXEC_TIMEOUT_S

    def __call__(self, args: Sequence[str], payload: bytes) -> tuple[int, str, str]:
        if not Path(self.helper).is_file():
            raise HelperNotSetUp(
                f"mtpstudio's helper is not set up at {self.helper}, so nothing was changed",
                hint="Run it again and let mtpstudio set the helper up (one administrator "
                "password), or run `mtpstudio setup-helper` first.",
            )
        try:
            result = subprocess.run(
                [self.pkexec, self.helper, *args],
                input=payload,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError:
            problem = helper_state().pkexec_problem()
            raise problem or InstallError("pkexec could not be run") from None
        except subprocess.TimeoutExpired:
            raise InstallError("the helper did not answer in time") from None
        stderr = result.stderr.decode(errors="replace")
        problem = pkexec_failure(result.returncode, stderr)
        if problem is not None:
            raise problem
        return result.returncode, result.stdout.decode(errors="replace"), stderr


def helper_for(root: Path | None, *, setup: bool = False) -> HelperTransport:
    """In-process against ``root``; else the installed helper through pkexec, set up first
    (in the same authentication) when ``setup``."""
    if root is not None:
        return InProcessHelper(root)
    if setup:
        return SetupFirstTransport(PkexecSetup(), PkexecHelper())
    return PkexecHelper()


def call_helper(transport: HelperTransport, args: Sequence[str], payload: bytes = b"") -> Any:
    """One helper call; its JSON answer, or InstallError with the helper's one line."""
    code, out, err = transport(args, payload)
    return _helper_json(code, out, err)


def _helper_json(code: int, out: str, err: str) -> Any:
    line = err.strip().splitlines()[-1] if err.strip() else f"exit status {code}"
    line = line.removeprefix("mtpstudio-helper: ")
    if code == 2:
        raise InstallError(f"the helper refused: {line.removeprefix('refused: ')}")
    if code != 0:
        undone = line.endswith("nothing was changed")
        raise InstallError(
            f"the helper failed: {line.removeprefix('failed: ')}",
            hint="Fix the cause (e.g. free some disk space) and run it again."
            if undone
            else "Some files may not be as before: see `mtpstudio status`, then "
            "`mtpstudio revert …` once the cause is fixed.",
        )
    try:
        return json.loads(out)
    except ValueError:
        raise InstallError("the helper's answer was not understood") from None


def _answer(data: Any) -> HelperAnswer:
    changes = tuple((str(c["path"]), str(c["action"])) for c in data.get("changes", []))
    extra = {k: v for k, v in data.items() if k not in {"group", "changes"}}
    return HelperAnswer(str(data.get("group", "")), changes, extra)


def apply_plan(plan: InstallPlan, transport: HelperTransport) -> HelperAnswer:
    """Install the plan's files through the helper."""
    return _answer(call_helper(transport, [plan.verb, plan.name], plan.payload))


def revert_group(group: str, transport: HelperTransport) -> HelperAnswer:
    """Undo one group (``session:NAME`` …) through the helper."""
    kind, _, name = group.partition(":")
    return _answer(call_helper(transport, [f"remove-{kind}", name]))


def revert_groups(groups: Sequence[str], transport: HelperTransport) -> list[HelperAnswer]:
    """Undo several groups; a transport that sets the helper up makes every call in its one
    root process (one authentication)."""
    calls = [HelperCall((f"remove-{g.partition(':')[0]}", g.partition(":")[2])) for g in groups]
    if isinstance(transport, SetupFirstTransport) and not transport.done:
        results = transport.batch(calls)
        return [_answer(_helper_json(code, out, err)) for code, out, err in results]
    return [revert_group(group, transport) for group in groups]


def system_status(root: Path | None = None) -> dict[str, Any]:
    """What the helper installed (read directly: the manifest is world-readable)."""
    try:
        with Store.open(system_layout(str(root or "/")), Faults(), write=False) as store:
            return store.status()
    except Refused as exc:
        raise InstallError(f"cannot read what mtpstudio installed: {exc}") from None


def read_measurement(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A stored file of the helper's state folder (e.g. ``desktop-vram-….json``)."""
    try:
        with Store.open(system_layout(str(root or "/")), Faults(), write=False) as store:
            raw = store.read_state_file(name)
    except (Refused, OSError):
        return None
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------
# user units (no root)


@dataclass(frozen=True)
class UserInstallResult:
    """Files written for a user unit and what ``systemctl --user daemon-reload`` said."""

    changes: tuple[tuple[str, str], ...]
    reload: str


def user_layout() -> Layout:
    """The user-level tree: units and env files below $XDG_CONFIG_HOME, state in XDG state."""
    state = paths.state_dir()
    return Layout(root=str(paths.config_home()), state_root=str(state.parent),
                  state_rel=state.name, folders=USER_GROUP_FOLDERS, system=False)  # fmt: skip


def _user_rel(path: Path) -> str:
    home = paths.config_home()
    try:
        return "/" + str(path.relative_to(home))
    except ValueError:
        raise InstallError(f"{path} is not below {home}") from None


def user_manager_running(runner: Runner) -> bool:
    """True when ``systemctl --user`` reaches a running user manager."""
    result = runner(["systemctl", "--user", "is-system-running"], SYSTEMCTL_TIMEOUT_S)
    state = result.stdout.strip()
    return result.error is None and state in {
        "running", "degraded", "starting", "initializing", "maintenance"
    }  # fmt: skip


def daemon_reload_user(runner: Runner) -> str:
    """Reload the user manager when one runs; says what happened."""
    if not user_manager_running(runner):
        return "no user manager is running; systemd reads the unit when you next log in"
    result = runner(["systemctl", "--user", "daemon-reload"], SYSTEMCTL_TIMEOUT_S)
    if result.ok:
        return "systemctl --user daemon-reload: done"
    return f"systemctl --user daemon-reload {result.reason(SYSTEMCTL_TIMEOUT_S)}"


def install_user_unit(files: Mapping[str, RenderedFile], runner: Runner) -> UserInstallResult:
    """Write a user unit and its env file (atomically, revertible), then daemon-reload."""
    unit, env = files["unit"], files["env"]
    try:
        check_installed_unit(unit.text, unit.name, env.name, system=False)
        check_env_file(env.text)
        specs = [
            FileSpec(_user_rel(env.install_path), env.text.encode(), env.mode),
            FileSpec(_user_rel(unit.install_path), unit.text.encode(), unit.mode),
        ]
        layout = user_layout()
        Path(layout.root).mkdir(parents=True, exist_ok=True)
        Path(str(layout.state_root)).mkdir(parents=True, exist_ok=True)
        with Store.open(layout, Faults(), write=True) as store:
            changes = store.install(f"unit:{unit.name}", specs)
    except Refused as exc:
        raise InstallError(f"the user unit was not installed: {exc}") from None
    except OSError as exc:
        raise InstallError(
            f"the user unit was not installed: {exc.strerror or exc}; nothing was changed"
        ) from None
    except RollbackIncomplete as exc:
        raise InstallError(
            f"the user unit was not installed: {exc}",
            hint="See `mtpstudio status`, then `mtpstudio revert unit` once the cause is fixed.",
        ) from None
    shown = tuple((layout.shown(c.path), c.action) for c in changes)
    return UserInstallResult(shown, daemon_reload_user(runner))


def user_status() -> dict[str, Any]:
    """What mtpstudio installed for this account (nothing yet on a fresh account)."""
    layout = user_layout()
    if not (paths.state_dir() / MANIFEST).is_file():
        return {"root": layout.root, "groups": {}}
    try:
        with Store.open(layout, Faults(), write=False) as store:
            return store.status()
    except Refused as exc:
        raise InstallError(f"cannot read the user-level installs: {exc}") from None


def revert_user_group(group: str, runner: Runner) -> UserInstallResult:
    layout = user_layout()
    try:
        with Store.open(layout, Faults(), write=True) as store:
            changes = store.revert(group)
    except Refused as exc:
        raise InstallError(f"cannot revert {group}: {exc}") from None
    except OSError as exc:
        raise InstallError(f"cannot revert {group}: {exc.strerror or exc}") from None
    shown = tuple((layout.shown(c.path), c.action) for c in changes)
    return UserInstallResult(shown, daemon_reload_user(runner))
