"""Against Debian 12's real packages (scripts/test installs sddm, plasma-workspace-wayland,
kwin-wayland, qdbus-qt5, mesa-utils): ``apply session`` into a root holding this machine's package
database and SDDM config, and the session's environment on a real KWin, checked by
``verify-session``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.helper_bench import make_root

from mtpstudio.core.desktop.session_apply import desktop_facts
from mtpstudio.core.desktop.session_files import SessionVariant, render_session_files
from mtpstudio.helper.sddm import parse_config

PACKAGES = {
    "sddm": "sddm",
    "kwin_wayland": "kwin-wayland",
    "Xwayland": "xwayland",
    "dbus-run-session": "dbus",
    "qdbus": "qdbus-qt5",
    "glxinfo": "mesa-utils",
    "eglinfo": "mesa-utils",
}
SESSION = "plasmawayland-llvmpipe-mtpstudio"
NAME = "Plasma software rendering by mtpstudio (Wayland)"
# What the root copies from this machine: the package database, SDDM's config, the sessions.
MACHINE_PATHS = (
    "var/lib/dpkg/status",
    "var/lib/dpkg/updates",
    "usr/lib/sddm/sddm.conf.d",
    "etc/sddm.conf.d",
    "etc/sddm.conf",
    "usr/share/wayland-sessions",
    "usr/share/xsessions",
    "usr/local/share/wayland-sessions",
    "usr/local/share/xsessions",
)


def tool(name: str) -> str:
    """The installed program, or a failure naming the Debian package scripts/test installs."""
    if not Path("/var/lib/dpkg/status").is_file():
        pytest.skip("not a Debian system: Debian's desktop packages cannot be installed here")
    path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    assert path, f"{name} is missing: scripts/test installs Debian's {PACKAGES[name]}"
    return path


def sddm_processes() -> set[int]:
    """Processes running SDDM's daemon (``sddm --version`` of 0.19 starts it)."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/comm", "rb") as handle:
                    if handle.read().strip() == b"sddm":
                        found.add(int(entry.name))
            except OSError:
                continue
    return found


class ProcessWatch:
    """Scans /proc every 20 ms while a command runs; keeps the new sddm processes (a daemon
    started to learn a version runs for seconds)."""

    def __init__(self) -> None:
        self.before = sddm_processes()
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen |= sddm_processes() - self.before
            self._stop.wait(0.02)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.seen |= sddm_processes() - self.before


def mtpstudio(*args: str, env: dict[str, str] | None = None) -> tuple[float, str, str, int]:
    """(seconds, stdout, stderr, exit status) of ``python -m mtpstudio ARGS``."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mtpstudio", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)  # fmt: skip
    return time.monotonic() - start, done.stdout, done.stderr, done.returncode


def example_session_dir() -> str:
    """The Wayland session folder this machine's ``sddm --example-config`` names (one for
    0.19; the first of a 0.20+ list is where SDDM looks first)."""
    printed = subprocess.run([tool("sddm"), "--example-config"], capture_output=True,
                             text=True, check=True, timeout=30).stdout  # fmt: skip
    value = parse_config(printed)[("Wayland", "SessionDir")]
    facts = desktop_facts(None)
    if any("SessionDir in" in s for s in facts.sddm.sources.values()):
        pytest.skip("this machine's SDDM config sets SessionDir: not the printed defaults")
    return value.split(",")[0].strip() if facts.sddm.lists else value.strip()


def exec_words(desktop: Path) -> list[str]:
    lines = desktop.read_text().splitlines()
    return next(line for line in lines if line.startswith("Exec=")).removeprefix("Exec=").split()


def wrapper_command(wrapper: Path) -> list[str]:
    """The PLASMA_SESSION array of a rendered wrapper, as bash reads it."""
    script = f'eval "$(grep "^PLASMA_SESSION=" {wrapper})"; printf "%s\\n" "${{PLASMA_SESSION[@]}}"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          check=True).stdout.split("\n")[:-1]  # fmt: skip


@pytest.fixture
def machine_root(tmp_path: Path) -> Path:
    """A root holding this machine's package database, SDDM config and session files."""
    tool("sddm")
    root = make_root(tmp_path / "root")
    for rel in MACHINE_PATHS:
        source, target = Path("/") / rel, root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        elif source.is_file():
            shutil.copy2(source, target)
    return root


def test_apply_lands_where_this_sddm_reads_without_starting_it(
    machine_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = example_session_dir()
    with ProcessWatch() as watch:
        seconds, out, err, code = mtpstudio("apply", "session", "--root", str(machine_root))
    assert code == 0, err
    with capsys.disabled():
        print(f"\napply session --root (this machine's dpkg database): {seconds:.2f} s")
    # The time is printed (benchmarks/bench_apply_session.py measures it); what kept every apply
    # at 10.7 s was starting `sddm --version`, which the process watch catches.
    assert watch.seen == set(), "an sddm process was started"
    installed = machine_root / folder.lstrip("/") / f"{SESSION}.desktop"
    assert installed.is_file(), out
    assert f"pick '{NAME}'" in out and "pick 'Plasma (Wayland)'" in out
    # The wrapper runs exactly what Debian's own Plasma session runs.
    plasma = Path("/usr/share/wayland-sessions/plasmawayland.desktop")
    assert plasma.is_file(), (
        "Debian's plasma-workspace-wayland is missing: scripts/test installs it"
    )
    wrapper = machine_root / "usr/local/lib/mtpstudio/startplasma-wayland-llvmpipe-mtpstudio"
    assert wrapper_command(wrapper) == exec_words(plasma)
    # The X11 session likewise runs Debian's own X11 Plasma command.
    seconds, out, err, code = mtpstudio("apply", "session", "--variant", "x11", "--root",
                                        str(machine_root))  # fmt: skip
    assert code == 0, err
    x11 = machine_root / "usr/local/lib/mtpstudio/startplasmax11-llvmpipe-mtpstudio"
    assert wrapper_command(x11) == exec_words(Path("/usr/share/xsessions/plasma.desktop"))
    assert "pick 'Plasma software rendering by mtpstudio (X11)'" in out


def test_dry_run_on_this_machine_reads_the_installed_sddm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = example_session_dir()
    run_sddm = Path("/run/sddm").exists()  # the daemon, started as root, writes there
    with ProcessWatch() as watch:
        seconds, out, err, code = mtpstudio("apply", "session", "--dry-run")
    assert code == 0, err
    with capsys.disabled():
        print(f"\napply session --dry-run on /: {seconds:.2f} s")
    assert watch.seen == set(), "an sddm process was started"
    assert Path("/run/sddm").exists() == run_sddm
    assert f"{folder}/{SESSION}.desktop (" in out


# --------------------------------------------------------------------------------------------
# the session's environment on a real KWin


INSIDE = """#!/bin/bash
# Started by KWin once Wayland and Xwayland are up: KWin's own environment, its answer, the check.
tr '\\0' '\\n' < /proc/$PPID/environ > "$OUT/kwin-environ.txt"
qdbus org.kde.KWin /KWin org.kde.KWin.supportInformation > "$OUT/support.txt" 2>&1
"$PYTHON" -m mtpstudio verify-session --json --root "$CHECK_ROOT" > "$OUT/verify.json" \\
    2> "$OUT/verify.err"
echo $? > "$OUT/verify.rc"
"""


@pytest.fixture
def kwin_copy(tmp_path: Path) -> Iterator[Path]:
    """kwin_wayland copied without its cap_sys_resource file capability (which containers
    refuse to exec); a plain copy drops it."""
    for name in ("dbus-run-session", "qdbus", "glxinfo", "eglinfo", "Xwayland"):
        tool(name)
    copy = tmp_path / "bin" / "kwin_wayland"
    copy.parent.mkdir()
    shutil.copy(tool("kwin_wayland"), copy)
    sockets = Path("/tmp/.X11-unix")  # Xwayland's socket folder (Xvfb makes it too)
    if not sockets.is_dir():
        sockets.mkdir(exist_ok=True)
        sockets.chmod(0o1777)
    yield copy


def run_session(tmp_path: Path, command: list[str], name: str) -> tuple[int, Path]:
    """Run ``command`` under dbus-run-session the way SDDM starts a session; returns the
    exit status and the folder the script inside KWin wrote into."""
    out = tmp_path / name
    out.mkdir()
    runtime = tmp_path / f"{name}-runtime"
    runtime.mkdir(mode=0o700)
    check_root = make_root(tmp_path / f"{name}-root")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_SESSION_TYPE": "wayland",
        "XDG_CURRENT_DESKTOP": "KDE",
        "DESKTOP_SESSION": SESSION,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "CHECK_ROOT": str(check_root),
        **{k: v for k, v in os.environ.items() if k.startswith("XDG_") and k.endswith("_HOME")},
    }
    done = subprocess.run([tool("dbus-run-session"), "--", *command], env=env, timeout=120,
                          capture_output=True, text=True, check=False)  # fmt: skip
    (out / "session.log").write_text(done.stdout + done.stderr)
    return done.returncode, out


def kwin_command(kwin: Path, inside: Path, socket: str) -> list[str]:
    return [str(kwin), "--virtual", "--xwayland", "--socket", socket,
            "--exit-with-session", str(inside)]  # fmt: skip


def test_real_kwin_composites_with_qpainter_under_the_wrappers_environment(
    kwin_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inside = tmp_path / "inside.sh"
    inside.write_text(INSIDE)
    inside.chmod(0o755)
    socket = f"mtpstudio-test-{os.getpid()}"
    # The wrapper exactly as `apply session` renders it for this machine, with KWin (virtual
    # output, Xwayland) standing in for the distribution's Plasma command.
    settings = desktop_facts(None).settings(None)
    settings = type(settings)(
        wayland_command=tuple(kwin_command(kwin_copy, inside, socket)),
        plasma_source=settings.plasma_source,
    )
    wrapper = tmp_path / "startplasma-wrapper"
    wrapper.write_text(
        render_session_files(SessionVariant.WAYLAND_LLVMPIPE, settings)["wrapper"].text
    )
    wrapper.chmod(0o755)

    code, out = run_session(tmp_path, [str(wrapper)], "wrapper")
    assert code == 0, (out / "session.log").read_text()[-2000:]
    environ = dict(
        line.split("=", 1)
        for line in (out / "kwin-environ.txt").read_text().splitlines()
        if "=" in line
    )
    expected = {"KWIN_COMPOSE": "Q", "LIBGL_ALWAYS_SOFTWARE": "1", "GALLIUM_DRIVER": "llvmpipe",
                "__GLX_VENDOR_LIBRARY_NAME": "mesa"}  # fmt: skip
    assert {name: environ.get(name) for name in expected} == expected
    assert environ["__EGL_VENDOR_LIBRARY_FILENAMES"].endswith("/50_mesa.json")
    support = (out / "support.txt").read_text()
    compositing = [ln for ln in support.splitlines() if "ompositing" in ln]
    with capsys.disabled():
        print("\nKWin supportInformation:", *compositing, sep="\n  ")
    assert "Compositing Type: QPainter" in compositing

    report = json.loads((out / "verify.json").read_text())
    assert (out / "verify.rc").read_text().strip() == "0", (out / "verify.err").read_text()
    assert report["software_rendering"] == "yes" and report["compositing"] == "QPainter"
    gl = {g["tool"]: g["renderers"] for g in report["gl"]}
    assert any("llvmpipe" in r for r in gl["glxinfo"]), gl  # Xwayland's GL clients
    assert any("swrast" in r and "Wayland platform" in r for r in gl["eglinfo"]), gl
    assert report["session"] == SESSION

    # Control: the same KWin without the wrapper's variables composites with OpenGL, so the
    # QPainter answer above is the wrapper's doing.
    code, plain = run_session(tmp_path, kwin_command(kwin_copy, inside, socket + "-plain"), "plain")
    assert code == 0, (plain / "session.log").read_text()[-2000:]
    assert json.loads((plain / "verify.json").read_text())["compositing"] == "OpenGL"


def test_the_process_watch_sees_a_short_lived_sddm(tmp_path: Path) -> None:
    stand_in = tmp_path / "sddm"  # any program named sddm: here sleep
    shutil.copy("/bin/sleep", stand_in)
    with ProcessWatch() as watch:
        subprocess.run([str(stand_in), "0.2"], check=True, timeout=30)
    assert len(watch.seen) == 1
