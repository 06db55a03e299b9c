"""Set up the helper from a venv install: its code, launcher and polkit policy, then run it.

Run as root through pkexec with the interpreter the helper will use, once, when the first
privileged action finds no helper (or one from another mtpstudio version)::

    pkexec /usr/bin/python3 -I .../mtpstudio/helper/self_install.py  < request.json

The request (at most 8 MiB of JSON) carries the helper's modules (``mtpstudio/…/*.py``, the
import closure of ``mtpstudio.helper.main``, with the pure-Python sources of the two libraries it
renders with, ``jinja2/*.py`` and ``markupsafe/*.py``), its templates
(``mtpstudio/templates/{units,sessions}/*.j2``) and the helper calls to make once it is set up
(``runs``: argv and base64 stdin each), so one authentication both sets the helper up and does
what was asked. This program builds the launcher and the policy itself from fixed text; only
the module sources come from the request, checked by name and size. It writes, root-owned and
atomically:

* ``/usr/lib/mtpstudio/python-<sha12>/mtpstudio/…`` the modules (0644, folders 0755);
* ``/usr/lib/mtpstudio/mtpstudio-helper`` the launcher (0755) naming that folder and this
  interpreter (``-I``), with a ``# mtpstudio-helper-setup sha256=…`` line saying what it runs;
* ``/usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy`` (0644), whose
  ``exec.path`` is the launcher (the same bytes as ``packaging/``'s file).

A launcher that packaging installed (no setup line) is never replaced. The answer on stdout is
JSON: what was written and each run's exit status, stdout and stderr. Exit 0 when set up (the
runs' own statuses are in the answer), 2 refused, 1 failed. ``--root DIR`` (tests) treats DIR
as ``/``, skips the ownership checks and is refused under pkexec. Standard library only: this
file runs before anything of mtpstudio is trusted.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, Any

HELPER_PATH = "/usr/lib/mtpstudio/mtpstudio-helper"
LIB_PARENT = "/usr/lib/mtpstudio"
LIB_PREFIX = "python-"
POLICY_PATH = "/usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy"
SETUP_MARK = "# mtpstudio-helper-setup sha256="
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_MODULE_BYTES = 512 * 1024
MAX_RUNS = 16
MODULE_PATH = re.compile(
    r"(mtpstudio|jinja2|markupsafe)(/[a-z_][a-z0-9_]*)*/[a-z_][a-z0-9_]*\.py\Z"
)
TEMPLATE_PATH = re.compile(
    r"mtpstudio/templates/(units|sessions)/[a-z][a-z0-9_-]*(\.[a-z]+)?\.j2\Z"
)
NEEDED = (
    "mtpstudio/__init__.py",
    "mtpstudio/helper/__init__.py",
    "mtpstudio/helper/main.py",
    "mtpstudio/templates/__init__.py",
    "jinja2/__init__.py",
    "markupsafe/__init__.py",
)
"""What every request carries: the helper, the templates' package and the two libraries."""
RUN_TIMEOUT_S = 240
EXIT_DONE, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2

_DESCRIPTION = "Install or remove mtpstudio's login sessions, service units and NVIDIA profile"
_EXEC_PATH = f'<annotate key="org.freedesktop.policykit.exec.path">{HELPER_PATH}</annotate>'
POLICY_TEXT = f"""\
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE policyconfig PUBLIC "-//freedesktop//DTD PolicyKit Policy Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/PolicyKit/1.0/policyconfig.dtd">
<!-- Installed as /usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy.
     exec.path must equal mtpstudio.helper.constants.HELPER_INSTALL_PATH (a test checks it). -->
<policyconfig>
  <vendor>mtpstudio</vendor>
  <vendor_url>https://github.com/mtpstudio/mtpstudio</vendor_url>
  <action id="io.github.mtpstudio.helper">
    <description>{_DESCRIPTION}</description>
    <message>Authentication is required to change login sessions or system services</message>
    <defaults>
      <allow_any>auth_admin</allow_any>
      <allow_inactive>auth_admin</allow_inactive>
      <allow_active>auth_admin_keep</allow_active>
    </defaults>
    {_EXEC_PATH}
  </action>
</policyconfig>
"""
"""The polkit action, byte for byte ``packaging/io.github.mtpstudio.helper.policy``."""


class Refused(Exception):
    """The request cannot be carried out as given; nothing was changed."""


def modules_digest(modules: Mapping[str, bytes]) -> str:
    """The sha256 over the modules' paths and bytes (sorted): what a launcher says it runs."""
    h = hashlib.sha256()
    for path in sorted(modules):
        data = modules[path]
        h.update(f"{path}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def launcher_text(python: str, lib: str, digest: str) -> str:
    """The helper's launcher: this interpreter in isolated mode, the copied modules only."""
    return (
        f"#!{python} -I\n"
        f"{SETUP_MARK}{digest}\n"
        "# Written by mtpstudio's helper setup (mtpstudio/helper/self_install.py): the helper's\n"
        "# code is the root-owned copy below; nothing from a user's folder is imported.\n"
        "import sys\n"
        f"sys.path[:0] = [{lib!r}]\n"
        "from mtpstudio.helper.main import main\n"
        "sys.exit(main())\n"
    )


def setup_digest(launcher: str) -> str | None:
    """The digest a launcher written by this setup names, or None (a packaged launcher)."""
    for line in launcher.splitlines()[:3]:
        if line.startswith(SETUP_MARK):
            value = line.removeprefix(SETUP_MARK).strip()
            return value if re.fullmatch(r"[0-9a-f]{64}", value) else None
    return None


# --------------------------------------------------------------------------------------------
# the request


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise Refused(f"{what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise Refused(f"{what} is not base64 text") from None


def _checked_source(path: str, body: bytes) -> bytes:
    try:
        compile(body, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        raise Refused(f"{path} is not Python source") from None
    return body


def _checked_template(path: str, body: bytes) -> bytes:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"{path} is not UTF-8 text") from None
    if "\0" in text:
        raise Refused(f"{path} is not a template (it holds a NUL)")
    return body


def parse_request(data: bytes) -> tuple[dict[str, bytes], list[tuple[list[str], bytes]]]:
    """(modules, runs) from the request; refuses anything else."""
    try:
        request = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Refused("the request is not JSON") from None
    if not isinstance(request, dict) or set(request) - {"modules", "runs"}:
        raise Refused("the request must be an object with 'modules' and 'runs'")
    raw = request.get("modules")
    if not isinstance(raw, dict) or not raw:
        raise Refused("the request names no modules")
    modules: dict[str, bytes] = {}
    for path, value in raw.items():
        template = isinstance(path, str) and TEMPLATE_PATH.fullmatch(path) is not None
        if not template and (not isinstance(path, str) or not MODULE_PATH.fullmatch(path)):
            raise Refused(f"{path!r} is not a module or template path of the helper")
        body = _b64(value, path)
        if len(body) > MAX_MODULE_BYTES:
            raise Refused(f"{path} is larger than {MAX_MODULE_BYTES // 1024} KiB")
        modules[path] = _checked_template(path, body) if template else _checked_source(path, body)
    for needed in NEEDED:
        if needed not in modules:
            raise Refused(f"the request lacks {needed}")
    for path in modules:  # every package on the way has its __init__.py (templates: theirs)
        parts = path.split("/")[: -2 if TEMPLATE_PATH.fullmatch(path) else -1]
        for i in range(1, len(parts) + 1):
            if "/".join(parts[:i]) + "/__init__.py" not in modules:
                raise Refused(f"the request lacks {'/'.join(parts[:i])}/__init__.py")
    runs_raw = request.get("runs", [])
    if not isinstance(runs_raw, list) or len(runs_raw) > MAX_RUNS:
        raise Refused(f"'runs' must be a list of at most {MAX_RUNS} calls")
    runs: list[tuple[list[str], bytes]] = []
    for run in runs_raw:
        if not isinstance(run, dict) or set(run) - {"args", "stdin"}:
            raise Refused("each run is an object with 'args' and 'stdin'")
        args = run.get("args")
        if (not isinstance(args, list) or not args or len(args) > 4
                or not all(isinstance(a, str) and a and "\0" not in a for a in args)):  # fmt: skip
            raise Refused("each run's 'args' is a short list of words")
        if any(a.startswith("--root") for a in args):
            raise Refused("a run may not name --root")
        runs.append((list(args), _b64(run.get("stdin", ""), "a run's stdin")))
    return modules, runs


# --------------------------------------------------------------------------------------------
# writing


def _check_root_owned(path: str, what: str) -> None:
    """``path`` (and every folder above it) belongs to root and only root may change it."""
    current = path
    while True:
        st = os.lstat(current)
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(current)
            _check_root_owned(target, what)
            return
        if st.st_uid != 0 or st.st_mode & 0o022:
            raise Refused(f"{what} {path} is not root's alone ({current} can be changed by others)")
        if current == "/":
            return
        current = os.path.dirname(current)


def _real_dir(root: str, rel: str, trusted: bool) -> str:
    """Create ``root + rel`` as a folder (0755) if missing; refuses a link or a non-folder."""
    path = root.rstrip("/") + rel
    parent = os.path.dirname(path)
    if parent != path and not os.path.isdir(parent):
        _real_dir(root, os.path.dirname(rel), trusted)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{rel} is not a folder")
    if trusted and (st.st_uid != 0 or st.st_mode & 0o022):
        raise Refused(f"{rel} is not root's alone")
    return path


def _write_atomic(path: str, data: bytes, mode: int) -> None:
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".mtpstudio-setup-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _remove_tree(path: str) -> None:
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.rmdir(full)
    os.rmdir(path)


def install(root: str, modules: Mapping[str, bytes], python: str, trusted: bool) -> list[str]:
    """Write the modules, the launcher and the policy below ``root``; returns what was written.

    ``trusted``: running as root on the real system (ownership is checked and enforced).
    """
    base = root.rstrip("/")
    helper = base + HELPER_PATH
    if os.path.lexists(helper):
        if not os.path.isfile(helper) or os.path.islink(helper):
            raise Refused(f"{HELPER_PATH} is not a regular file: remove it first")
        with open(helper, encoding="utf-8", errors="replace") as f:
            if setup_digest(f.read(4096)) is None:
                raise Refused(f"{HELPER_PATH} was installed by a package: update that package "
                              "instead")  # fmt: skip
    if trusted:
        _check_root_owned(python, "the interpreter")
    digest = modules_digest(modules)
    parent = _real_dir(root, LIB_PARENT, trusted)
    lib_rel = f"{LIB_PARENT}/{LIB_PREFIX}{digest[:12]}"
    lib = base + lib_rel
    written: list[str] = []
    if not os.path.isdir(lib):
        work = tempfile.mkdtemp(dir=parent, prefix=".mtpstudio-setup-")
        os.chmod(work, 0o755)
        try:
            for rel, body in sorted(modules.items()):
                target = os.path.join(work, rel)
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                with open(target, "xb") as f:
                    f.write(body)
                os.chmod(target, 0o644)
            for dirpath, _, _ in os.walk(work):
                os.chmod(dirpath, 0o755)
            # bytecode now, by root: nobody writes __pycache__ below a root-owned folder later
            import compileall

            compileall.compile_dir(work, quiet=2, ddir=lib, workers=1)
            for dirpath, _, filenames in os.walk(work):
                for name in filenames:
                    os.chmod(os.path.join(dirpath, name), 0o644)
                os.chmod(dirpath, 0o755)
            os.rename(work, lib)
        except BaseException:
            if os.path.isdir(work):
                _remove_tree(work)
            raise
    written.append(lib_rel + "/")
    _real_dir(root, os.path.dirname(HELPER_PATH), trusted)
    _write_atomic(helper, launcher_text(python, lib, digest).encode(), 0o755)
    written.append(HELPER_PATH)
    _real_dir(root, os.path.dirname(POLICY_PATH), trusted)
    _write_atomic(base + POLICY_PATH, POLICY_TEXT.encode(), 0o644)
    written.append(POLICY_PATH)
    for name in os.listdir(parent):  # earlier copies the launcher no longer names
        old = os.path.join(parent, name)
        if name.startswith(LIB_PREFIX) and old != lib and not os.path.islink(old):
            _remove_tree(old)
    return written


def run_helper(
    root: str, python: str, runs: Sequence[tuple[list[str], bytes]], environ: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Each call through the launcher just written (a new process, as pkexec would start it)."""
    base = root.rstrip("/")
    helper = base + HELPER_PATH
    prefix = [] if root == "/" else ["--root", root]
    out = []
    env = {k: v for k, v in environ.items() if k in {"PATH", "LANG", "PKEXEC_UID"}}
    env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    for args, stdin in runs:
        try:
            result = subprocess.run([python, "-I", helper, *prefix, *args], input=stdin,
                                    capture_output=True, timeout=RUN_TIMEOUT_S, env=env,
                                    check=False)  # fmt: skip
            out.append({"args": args, "code": result.returncode,
                        "stdout": result.stdout.decode(errors="replace"),
                        "stderr": result.stderr.decode(errors="replace")})  # fmt: skip
        except subprocess.TimeoutExpired:
            late = "mtpstudio-helper: failed: it did not answer in time\n"
            out.append({"args": args, "code": EXIT_FAILED, "stdout": "", "stderr": late})
    return out


def run(
    argv: Sequence[str],
    stdin: IO[bytes],
    stdout: IO[str],
    stderr: IO[str],
    environ: Mapping[str, str],
    python: str,
    euid: int,
) -> int:
    """The whole setup with its streams passed in."""
    root, args = "/", list(argv)
    try:
        if args[:1] == ["--root"] and len(args) == 2:
            if environ.get("PKEXEC_UID") is not None:
                raise Refused("--root is not accepted when run through pkexec")
            root = args[1]
            if not root.startswith("/") or not os.path.isdir(root):
                raise Refused("--root needs an existing absolute folder")
        elif args:
            raise Refused("usage: self_install.py [--root DIR] < request.json")
        trusted = root == "/"
        if trusted and euid != 0:
            raise Refused("the helper's setup runs as root (through pkexec)")
        data = stdin.read(MAX_REQUEST_BYTES + 1)
        if len(data) > MAX_REQUEST_BYTES:
            raise Refused(f"the request is larger than {MAX_REQUEST_BYTES // (1024 * 1024)} MiB")
        modules, runs = parse_request(data)
        written = install(root, modules, python, trusted)
        results = run_helper(root, python, runs, environ)
    except Refused as exc:
        stderr.write(f"mtpstudio-helper-setup: refused: {' '.join(str(exc).split())}\n")
        return EXIT_REFUSED
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        stderr.write(f"mtpstudio-helper-setup: failed: {exc.strerror or exc}{where}\n")
        return EXIT_FAILED
    stdout.write(json.dumps({"written": written, "runs": results}) + "\n")
    return EXIT_DONE


def main() -> int:
    os.umask(0o022)
    return run(sys.argv[1:], sys.stdin.buffer, sys.stdout, sys.stderr, os.environ,
               sys.executable, os.geteuid())  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
