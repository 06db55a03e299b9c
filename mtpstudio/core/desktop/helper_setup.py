"""Is the privileged helper set up, and setting it up from a venv install with one password.

The README's install is a venv in the user's folder; the helper must be root's, at the path
the polkit policy names. When the first privileged action finds no helper (or one that an
earlier setup copied from another version of mtpstudio), it runs
``mtpstudio/helper/self_install.py`` through ``pkexec`` with the system's Python: that copies
the helper's modules (the import closure of ``mtpstudio.helper.main``) root-owned to
``/usr/lib/mtpstudio``, writes the launcher and the polkit policy, and then makes the helper
calls that were asked for, in the same root process: one authentication.

Where ``pkexec`` is missing, :func:`polkit_package` names the package that provides it on this
distribution (read from ``/etc/os-release``).
"""

from __future__ import annotations

import ast
import base64
import enum
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import mtpstudio
from mtpstudio.core.distro import polkit_package, read_os_release
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.helper import self_install
from mtpstudio.helper.constants import HELPER_INSTALL_PATH, POLICY_FILE_NAME, POLICY_INSTALL_DIR
from mtpstudio.helper.templating import HELPER_TEMPLATE_FOLDERS, TEMPLATE_PACKAGE

PKEXEC_TIMEOUT_S = 300.0
SYSTEM_PYTHONS = ("/usr/bin/python3",)
PKEXEC_PATHS = ("/usr/bin/pkexec",)  # where pkexec is when it is not on a user's PATH
PACKAGE_ROOT = Path(mtpstudio.__file__).resolve().parent


class InstallError(MtpStudioError):
    """Installing or reverting did not happen (refused, not authorised, or failed)."""


class HelperSetupError(InstallError):
    """The helper could not be set up or reached (refused, not authorised, pkexec missing)."""


class HelperStatus(enum.Enum):
    READY = "ready"  # a helper is installed and it is this version's (or a package's)
    MISSING = "missing"  # no helper at the policy's path
    OUTDATED = "outdated"  # set up from another mtpstudio version: set it up again


@dataclass(frozen=True)
class HelperState:
    """Whether the helper can be used, and whether pkexec (polkit) is there to run it."""

    status: HelperStatus
    helper: Path
    pkexec: str | None
    package: str  # what to install for pkexec on this distribution
    install_command: str  # e.g. "sudo apt install pkexec"
    packaged: bool = False  # the launcher came from a package (never replaced by a setup)

    @property
    def needs_setup(self) -> bool:
        return self.status is not HelperStatus.READY

    def pkexec_problem(self) -> MtpStudioError | None:
        """The error to show when pkexec is missing (None when it is there)."""
        if self.pkexec is not None:
            return None
        return HelperSetupError(
            "system files are written only through pkexec (polkit), which is not installed",
            hint=f"Install the package {self.package} ({self.install_command}), then try again.",
        )

    def describe(self) -> str:
        """One line for ``mtpstudio status`` and the pages."""
        if self.status is HelperStatus.READY:
            how = "from a package" if self.packaged else "set up by mtpstudio"
            text = f"the helper is installed at {self.helper} ({how})"
        elif self.status is HelperStatus.OUTDATED:
            text = (
                f"the helper at {self.helper} is from another version of mtpstudio: the next "
                "system change sets this version's up (one administrator password)"
            )
        else:
            text = (
                f"the helper is not set up yet: the first system change sets it up at "
                f"{self.helper} with its polkit policy (one administrator password)"
            )
        if self.pkexec is None:
            text += f"; pkexec is missing (install {self.package}: {self.install_command})"
        return text


# --------------------------------------------------------------------------------------------
# the helper's modules and their digest


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    if not parts:
        return PACKAGE_ROOT / "__init__.py"
    rel = Path(*parts)
    for candidate in (PACKAGE_ROOT / rel / "__init__.py", PACKAGE_ROOT / rel.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def helper_modules() -> dict[str, bytes]:
    """The helper's import closure inside mtpstudio (``mtpstudio/…/x.py`` -> source bytes),
    with the ``__init__.py`` of every package on the way."""
    todo, seen = ["mtpstudio.helper.main"], set()
    files: dict[str, bytes] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is None:
            continue
        source = path.read_bytes()
        files[path.relative_to(PACKAGE_ROOT.parent).as_posix()] = source
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("mtpstudio")]
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("mtpstudio")
            ):  # the names imported may be modules too
                todo += [str(node.module), *(f"{node.module}.{a.name}" for a in node.names)]
    return files


HELPER_LIBRARIES = ("jinja2", "markupsafe")
"""The libraries the helper renders its templates with (jinja2 and its one dependency): their
pure-Python sources go along (markupsafe's C speedups never: it falls back to its Python)."""


def _library_sources(name: str) -> dict[str, bytes]:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise HelperSetupError(
            f"the helper renders with {name}, which this installation lacks",
            hint="Reinstall mtpstudio (its install brings jinja2), then try again.",
        )
    folder = Path(spec.origin).parent
    return {
        f"{name}/{path.relative_to(folder).as_posix()}": path.read_bytes()
        for path in sorted(folder.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _template_sources() -> dict[str, bytes]:
    root = resources.files(TEMPLATE_PACKAGE)
    files = {"mtpstudio/templates/__init__.py": root.joinpath("__init__.py").read_bytes()}
    for folder in HELPER_TEMPLATE_FOLDERS:
        for entry in sorted(root.joinpath(folder).iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".j2") and entry.is_file():
                files[f"mtpstudio/templates/{folder}/{entry.name}"] = entry.read_bytes()
    return files


def helper_files() -> dict[str, bytes]:
    """Everything the helper's set-up copies: its modules, the libraries it renders with and
    its templates (path below the copy's folder -> bytes)."""
    files = helper_modules()
    for name in HELPER_LIBRARIES:
        files |= _library_sources(name)
    return files | _template_sources()


def modules_digest() -> str:
    return self_install.modules_digest(helper_files())


# --------------------------------------------------------------------------------------------
# state


def helper_state(
    root: Path = Path("/"),
    *,
    which: Callable[[str], str | None] | None = None,
    os_release: str | None = None,
    digest: Callable[[], str] = modules_digest,
) -> HelperState:
    """Whether the helper below ``root`` is usable by this version, and whether pkexec is."""
    helper = root / HELPER_INSTALL_PATH.lstrip("/")
    pkexec = (which or shutil.which)("pkexec")
    if pkexec is None and root == Path("/"):
        pkexec = next((p for p in PKEXEC_PATHS if os.access(p, os.X_OK)), None)
    package, command = polkit_package(read_os_release(root) if os_release is None else os_release)
    packaged = False
    try:
        head = helper.read_text(errors="replace")[:4096] if helper.is_file() else None
    except OSError:
        head = None
    if head is None:
        status = HelperStatus.MISSING
    else:
        named = self_install.setup_digest(head)
        packaged = named is None
        current = packaged or named == digest()
        status = HelperStatus.READY if current else HelperStatus.OUTDATED
        policy = root / POLICY_INSTALL_DIR.lstrip("/") / POLICY_FILE_NAME
        if not packaged and not policy.is_file():
            status = HelperStatus.MISSING
    return HelperState(status, Path(HELPER_INSTALL_PATH), pkexec, package, command, packaged)


def system_python() -> str:
    """The root-owned interpreter the helper runs on: the distribution's python3 (3.11+),
    else the one this venv was made from."""
    for candidate in SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK):
            return candidate
    base = getattr(sys, "_base_executable", sys.executable)
    return os.path.realpath(base)


# --------------------------------------------------------------------------------------------
# running the setup


@dataclass(frozen=True)
class HelperCall:
    """One call of the helper: its arguments and what goes on its stdin."""

    args: tuple[str, ...]
    payload: bytes = b""


@dataclass(frozen=True)
class SetupResult:
    """What the setup wrote, and each helper call's (exit status, stdout, stderr)."""

    written: tuple[str, ...]
    results: tuple[tuple[int, str, str], ...]


def setup_request(calls: Sequence[HelperCall]) -> bytes:
    """The JSON the root side reads: the modules and the calls."""
    modules = {k: base64.b64encode(v).decode() for k, v in helper_files().items()}
    runs = [{"args": list(c.args), "stdin": base64.b64encode(c.payload).decode()} for c in calls]
    return json.dumps({"modules": modules, "runs": runs}).encode()


def _parse_answer(code: int, out: str, err: str) -> SetupResult:
    line = err.strip().splitlines()[-1] if err.strip() else f"exit status {code}"
    line = line.removeprefix("mtpstudio-helper-setup: ")
    if code == 2:
        raise HelperSetupError(f"the helper's setup was refused: {line.removeprefix('refused: ')}")
    if code != 0:
        raise HelperSetupError(
            f"the helper's setup failed: {line.removeprefix('failed: ')}",
            hint="Fix the cause and try again; nothing else was changed.",
        )
    try:
        data = json.loads(out)
        results = tuple((int(r["code"]), str(r["stdout"]), str(r["stderr"])) for r in data["runs"])
        return SetupResult(tuple(str(w) for w in data["written"]), results)
    except (ValueError, KeyError, TypeError):
        raise HelperSetupError("the helper's setup answered something unexpected") from None


def pkexec_failure(code: int, stderr: str) -> MtpStudioError | None:
    """pkexec's own refusals (exit 126/127 with pkexec's words), in one sentence each."""
    if code not in (126, 127):
        return None
    text = stderr.strip()
    if text.startswith("mtpstudio-helper"):
        return None
    if "No authentication agent" in text:
        return HelperSetupError(
            "no polkit authentication agent is running to ask for the password",
            hint="Run mtpstudio inside your desktop session (Plasma starts an agent), or from a "
            "terminal, where pkexec asks for the password itself.",
        )
    if "authority" in text.lower() and "connect" in text.lower():
        return HelperSetupError(
            "polkit's daemon (polkitd) is not reachable on the system bus",
            hint="Start it (`systemctl start polkit`), or install polkitd, then try again.",
        )
    return HelperSetupError(
        "authorisation was refused or cancelled",
        hint="Try again and enter an administrator's password.",
    )


@dataclass(frozen=True)
class PkexecSetup:
    """Runs ``self_install.py`` through pkexec with the system's Python (real systems)."""

    pkexec: str = "pkexec"
    python: str = field(default_factory=system_python)
    timeout: float = PKEXEC_TIMEOUT_S

    def __call__(self, request: bytes) -> tuple[int, str, str]:
        script = str(Path(self_install.__file__).resolve())
        try:
            result = subprocess.run([self.pkexec, self.python, "-I", script], input=request,
                                    capture_output=True, timeout=self.timeout,
                                    check=False)  # fmt: skip
        except FileNotFoundError:
            raise HelperSetupError(
                "pkexec (polkit) is not installed",
                hint="Install the package that provides it, then try again.",
            ) from None
        except subprocess.TimeoutExpired:
            raise HelperSetupError("the helper's setup did not answer in time") from None
        stderr = result.stderr.decode(errors="replace")
        problem = pkexec_failure(result.returncode, stderr)
        if problem is not None and not stderr.startswith("mtpstudio-helper-setup"):
            raise problem
        return result.returncode, result.stdout.decode(errors="replace"), stderr


@dataclass(frozen=True)
class InProcessSetup:
    """The same setup against a folder treated as ``/`` (tests), no privileges."""

    root: Path
    python: str = sys.executable

    def __call__(self, request: bytes) -> tuple[int, str, str]:
        import io

        out, err = io.StringIO(), io.StringIO()
        env = {k: v for k, v in os.environ.items() if k != "PKEXEC_UID"}
        code = self_install.run(["--root", str(self.root)], io.BytesIO(request), out, err, env,
                                self.python, os.geteuid())  # fmt: skip
        return code, out.getvalue(), err.getvalue()


def set_up_helper(
    calls: Sequence[HelperCall],
    runner: Callable[[bytes], tuple[int, str, str]],
) -> SetupResult:
    """Set the helper up and make ``calls`` through it, in one privileged run."""
    code, out, err = runner(setup_request(calls))
    return _parse_answer(code, out, err)


@dataclass
class SetupFirstTransport:
    """A helper transport whose first call sets the helper up (one authentication); later
    calls go through ``then`` (the installed helper through pkexec).

    ``batch`` makes several calls in the setup's one root process (Revert of several groups).
    """

    runner: Callable[[bytes], tuple[int, str, str]]
    then: Callable[[Sequence[str], bytes], tuple[int, str, str]]
    done: bool = False
    written: tuple[str, ...] = ()

    def __call__(self, args: Sequence[str], payload: bytes) -> tuple[int, str, str]:
        return self.batch([HelperCall(tuple(args), payload)])[0]

    def batch(self, calls: Sequence[HelperCall]) -> list[tuple[int, str, str]]:
        if self.done:
            return [self.then(c.args, c.payload) for c in calls]
        result = set_up_helper(calls, self.runner)
        self.done, self.written = True, result.written
        return list(result.results)


def describe_written(written: Sequence[str]) -> str:
    """``the helper (…), its code (…) and its polkit policy (…)`` for the messages."""
    shown = [w for w in written if not w.endswith("/")]
    return ", ".join(shown)


def setup_note(state: HelperState) -> str:
    """What the install button will do first, for the previews (one sentence)."""
    first = (
        "updates the helper to this version"
        if state.status is HelperStatus.OUTDATED
        else ("sets up mtpstudio's helper")
    )
    return (
        f"This {first} first: its code to /usr/lib/mtpstudio, the launcher {HELPER_INSTALL_PATH} "
        f"and its polkit policy {POLICY_INSTALL_DIR}/{POLICY_FILE_NAME}, all root-owned; one "
        "administrator password covers the setup and this change."
    )


def as_json(state: HelperState) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "helper": str(state.helper),
        "pkexec": state.pkexec,
        "package": state.package,
        "install_command": state.install_command,
        "packaged": state.packaged,
    }


__all__ = [
    "HelperCall",
    "HelperSetupError",
    "HelperState",
    "HelperStatus",
    "InProcessSetup",
    "PkexecSetup",
    "SetupFirstTransport",
    "as_json",
    "helper_state",
    "polkit_package",
    "set_up_helper",
    "setup_note",
]
