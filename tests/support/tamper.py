"""Bench for the tamper-and-fault suite: a throwaway root and HOME per case, the real programs.

Every case gets a ``Sandbox``: ``root/`` (the helper's ``--root``, a system-like tree),
``home/`` (HOME and the XDG folders the CLI uses) and ``outside/`` (files nothing may touch).
Everything a case starts carries ``MTPSTUDIO_TAMPER_CASE=<id>`` in its environment, so what is
still running afterwards is found in ``/proc`` (and killed). After each case the suite checks
three things on top of the case's own expectation: no file changed outside the folders
mtpstudio may write, no process left behind, no traceback in any output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from support import waiting
from support.helper_bench import Entry, make_root, snapshot

MARKER_ENV = "MTPSTUDIO_TAMPER_CASE"
HELPER = [sys.executable, "-m", "mtpstudio.helper"]
CLI = [sys.executable, "-m", "mtpstudio"]
TRACEBACK = "Traceback (most recent call last)"

# What mtpstudio may write, relative to the sandbox (and the folders on the way to them).
ALLOWED = (
    "root/etc/systemd/system",
    "root/etc/mtpstudio",
    "root/etc/nvidia/nvidia-application-profiles-rc.d",
    "root/usr/local/share/wayland-sessions",
    "root/usr/local/share/xsessions",
    "root/usr/local/lib/mtpstudio",
    "root/var/lib/mtpstudio",
    "home/.config/mtpstudio",
    "home/.config/systemd/user",
    "home/.cache/mtpstudio",
    "home/.local/state/mtpstudio",
    "home/.local/share/mtpstudio",
    "work",  # files a case writes for itself (plans, keys, logs of its own)
)
SECRET = b"outside secret: never read, copied or changed\n"


@dataclass(frozen=True)
class Ran:
    """One finished run of a real program."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def traceback(self) -> bool:
        return TRACEBACK in self.stdout or TRACEBACK in self.stderr

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    def refused(self, *words: str) -> bool:
        """Ended non-zero with one line on stderr naming ``words``, no traceback."""
        lines = self.error_lines
        return (
            self.returncode not in (0, -9)
            and len(lines) == 1
            and not self.traceback
            and all(w in lines[0] for w in words)
        )

    def line(self) -> str:
        lines = self.error_lines
        text = lines[-1] if lines else (self.stdout.strip().splitlines() or [""])[-1]
        return f"exit {self.returncode}: {text}"


@dataclass
class Sandbox:
    """The throwaway tree of one case, and the programs run in it."""

    base: Path
    case: str
    engine_cache: str
    runs: list[Ran] = field(default_factory=list)
    before: dict[str, Entry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = make_root(self.base / "root", plasma=True)
        self.home = self.base / "home"
        for sub in (".config", ".cache", ".local/state", ".local/share"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.outside = self.base / "outside"
        self.outside.mkdir()
        self.secret = self.outside / "secret"
        self.secret.write_bytes(SECRET)
        self.secret.chmod(0o600)
        self.work = self.base / "work"
        self.work.mkdir()
        self.settle()

    # -- where things are ---------------------------------------------------------------------

    @property
    def state(self) -> Path:
        return self.home / ".local/state/mtpstudio"

    @property
    def config(self) -> Path:
        return self.home / ".config/mtpstudio"

    @property
    def cache(self) -> Path:
        return self.home / ".cache/mtpstudio"

    @property
    def data(self) -> Path:
        return self.home / ".local/share/mtpstudio"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local/state"),
            "XDG_DATA_HOME": str(self.home / ".local/share"),
            "MTPSTUDIO_ENGINE_CACHE": self.engine_cache,
            "QT_QPA_PLATFORM": "offscreen",
            "LANG": "C.UTF-8",
            MARKER_ENV: self.case,
        }
        if "PYTHONPATH" in os.environ:  # the code under test, when it is not the installed one
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(extra or {})
        return env

    # -- running ------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 120,
            env: Mapping[str, str] | None = None) -> Ran:  # fmt: skip
        """Run to the end (a hang is killed at ``timeout`` and reported as exit -9)."""
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env(env), cwd=self.work, start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(input or b"", timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            code = -9
            err += f"\n(hung: killed after {timeout:g} s)".encode()
        ran = Ran(tuple(argv), code, out.decode(errors="replace"), err.decode(errors="replace"))
        self.runs.append(ran)
        return ran

    def helper(self, *args: str, payload: bytes = b"", env: Mapping[str, str] | None = None) -> Ran:
        return self.run([*HELPER, "--root", str(self.root), *args], input=payload, env=env)

    def cli(self, *args: str, input: bytes | None = None, timeout: float = 120) -> Ran:
        return self.run([*CLI, *args], input=input, timeout=timeout)

    def spawn(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start and leave running (the case waits for it or kills it)."""
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=self.env(), cwd=self.work,
        )  # fmt: skip

    # -- the checks every case gets -----------------------------------------------------------

    def tree(self) -> dict[str, Entry]:
        return snapshot(self.base)

    def settle(self) -> None:
        """The case's own setup is done: changes are counted from here on."""
        self.before = self.tree()

    def leftovers(self) -> list[int]:
        """Processes still running with this case's marker (killed, then reported)."""
        found = marked_processes(self.case)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return found


def allowed(rel: str) -> bool:
    """Inside a folder mtpstudio may write, or a folder on the way to one."""
    return any(
        rel == folder or rel.startswith(folder + "/") or folder.startswith(rel + "/")
        for folder in ALLOWED
    )


def changed_outside(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    """Paths added, removed or changed that are not in an allowed folder."""
    paths = set(before) | set(after)
    return sorted(p for p in paths if before.get(p) != after.get(p) and not allowed(p))


def marked_processes(case: str) -> list[int]:
    """Live (not zombie) processes whose environment carries ``MARKER_ENV=case``."""
    wanted = f"{MARKER_ENV}={case}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if wanted in environ and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate()`` until true; AssertionError naming ``what`` after ``timeout`` (which
    stretches with the machine's load, see ``support.waiting``)."""
    if not waiting.wait_for(predicate, timeout):
        raise AssertionError(f"timed out waiting for {what}")


@dataclass(frozen=True)
class Row:
    """One line of the printed table."""

    case: str
    expected: str
    got: str
    clean: bool
    outside: int
    leftover: int
    tracebacks: int

    @property
    def passed(self) -> bool:
        return self.clean and not (self.outside or self.leftover or self.tracebacks)


def render_table(rows: Sequence[Row]) -> str:
    """The table (case, expected, got) and the summary line the issue asks for."""
    width = max([len(r.case) for r in rows] + [4])
    exp_w = max([len(r.expected) for r in rows] + [8])
    lines = [f"{'case':<{width}}  {'expected':<{exp_w}}  got", "-" * (width + exp_w + 40)]
    for r in rows:
        mark = "" if r.passed else "   <-- FAILED"
        lines.append(f"{r.case:<{width}}  {r.expected:<{exp_w}}  {r.got}{mark}")
    refusals = [r for r in rows if "refused" in r.expected]
    others = [r for r in rows if r not in refusals]
    lines.append(
        f"cases tried {len(rows)}: refused cleanly {sum(r.clean for r in refusals)} of "
        f"{len(refusals)}, the others as expected {sum(r.clean for r in others)} of {len(others)}; "
        f"files changed outside the allowed folders {sum(r.outside for r in rows)}, "
        f"processes left behind {sum(r.leftover for r in rows)}, "
        f"tracebacks {sum(r.tracebacks for r in rows)}"
    )
    return "\n".join(lines)
