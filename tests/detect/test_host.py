"""Host facts from /proc and /etc, the desktop session, KWin over D-Bus, process categories."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.detect.machines import GIB, Roots
from support.runners import ScriptedRunner

from mtpstudio.core.detect.host import (
    detect_host,
    detect_session,
    display_manager,
    kwin_compositing,
    parse_cpuinfo,
    parse_meminfo,
)
from mtpstudio.core.detect.processes import ProcessCategory, categorize, read_process
from mtpstudio.core.runner import RunResult, SubprocessRunner

Machines = Callable[[str], Roots]

# What `qdbus6 org.kde.KWin /KWin org.kde.KWin.supportInformation` prints (excerpt).
KWIN_SUPPORT_INFO = """KWin Support Information:
The following information should be used when requesting support on e.g. https://discuss.kde.org.
==========================

Version
=======
KWin version: 6.4.2
Qt Version: 6.9.1
Operation Mode: Xwayland

Compositing
===========
Compositing is active
Compositing Type: OpenGL
OpenGL vendor string: Mesa
OpenGL renderer string: llvmpipe (LLVM 20.1.7, 256 bits)
OpenGL version string: 4.5 (Core Profile) Mesa 25.1.5-arch1.1
"""


def test_host_desktop(machine_roots: Machines) -> None:
    roots = machine_roots("desktop_amd_igpu_nvidia")
    host = detect_host(roots.proc_root, roots.etc_root)
    assert host.cpu_model == "AMD Ryzen 7 7800X3D 8-Core Processor"
    assert (host.physical_cores, host.logical_cpus) == (8, 16)
    assert host.ram_total_bytes == 65_074_580 * 1024
    assert host.ram_available_bytes == 52_661_492 * 1024
    assert host.swap_total_bytes == 8_388_604 * 1024
    assert host.os_name == "CachyOS"
    assert host.kernel == "6.15.4-2-cachyos"


def test_host_laptop_hybrid_cores(machine_roots: Machines) -> None:
    roots = machine_roots("laptop_intel_nvidia")
    host = detect_host(roots.proc_root, roots.etc_root)
    assert host.cpu_model == "13th Gen Intel(R) Core(TM) i9-13900H"
    assert (host.physical_cores, host.logical_cpus) == (14, 20)
    assert host.ram_total_bytes is not None and host.ram_total_bytes > 30 * GIB


def test_host_of_this_machine() -> None:
    host = detect_host()
    assert host.logical_cpus and host.logical_cpus >= 1
    assert host.ram_total_bytes and host.ram_total_bytes > 0


def test_empty_roots_give_unknowns(tmp_path: Path) -> None:
    host = detect_host(tmp_path / "proc", tmp_path / "etc")
    assert host.cpu_model is None and host.ram_total_bytes is None and host.os_name is None


def test_parsers() -> None:
    assert parse_meminfo("MemTotal:       1024 kB\nHugePages_Total:       0\n") == {
        "MemTotal": 1024 * 1024,
        "HugePages_Total": 0,
    }
    # an ARM board: no 'model name', no core ids
    model, phys, logical = parse_cpuinfo(
        "processor\t: 0\nBogoMIPS\t: 108.00\n\nprocessor\t: 1\nBogoMIPS\t: 108.00\n\n"
        "Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
    )
    assert (phys, logical) == (2, 2)
    assert model == "BCM2835"


def test_display_managers(machine_roots: Machines, tmp_path: Path) -> None:
    assert display_manager(machine_roots("laptop_intel_nvidia").etc_root) == "sddm"
    assert display_manager(machine_roots("single_nvidia").etc_root) == "gdm"
    debian = tmp_path / "etc"
    (debian / "X11").mkdir(parents=True)
    (debian / "X11" / "default-display-manager").write_text("/usr/sbin/gdm3\n")
    assert display_manager(debian) == "gdm3"
    assert display_manager(tmp_path / "none") is None


def test_kwin_compositing_over_dbus(machine_roots: Machines) -> None:
    roots = machine_roots("desktop_amd_igpu_nvidia")
    runner = ScriptedRunner(
        {"qdbus": RunResult(("qdbus",), 0, stdout=KWIN_SUPPORT_INFO)}  # no qdbus6 installed
    )
    session = detect_session(roots.environ, roots.etc_root, runner)
    assert session.session_type == "wayland" and session.desktop == "KDE"
    assert session.display_manager == "sddm"
    assert session.kwin_compositing == "OpenGL"
    assert session.kwin_renderer == "llvmpipe (LLVM 20.1.7, 256 bits)"
    assert [c[0] for c in runner.calls] == ["qdbus6", "qdbus"]
    assert session.problem is None


def test_kwin_via_gdbus_escaped_text(machine_roots: Machines) -> None:
    roots = machine_roots("desktop_amd_igpu_nvidia")
    escaped = "('" + KWIN_SUPPORT_INFO.replace("\n", "\\n") + "',)\n"
    runner = ScriptedRunner({"gdbus": RunResult(("gdbus",), 0, stdout=escaped)})
    session = detect_session(roots.environ, roots.etc_root, runner)
    assert session.kwin_compositing == "OpenGL"
    assert session.kwin_renderer == "llvmpipe (LLVM 20.1.7, 256 bits)"


def test_kwin_absent_is_none_and_hangs_are_problems(machine_roots: Machines) -> None:
    roots = machine_roots("desktop_amd_igpu_nvidia")
    nothing = detect_session(roots.environ, roots.etc_root, ScriptedRunner())
    assert nothing.kwin_compositing is None and nothing.problem is None
    hung = ScriptedRunner({"qdbus6": RunResult(("qdbus6",), None, timed_out=True)})
    session = detect_session(roots.environ, roots.etc_root, hung, timeout=0.2)
    assert session.kwin_compositing is None
    assert session.problem == "KWin did not answer within 0.2 s"


def test_kwin_not_asked_outside_kde(machine_roots: Machines) -> None:
    roots = machine_roots("single_nvidia")
    runner = ScriptedRunner()
    session = detect_session(roots.environ, roots.etc_root, runner)
    assert session.desktop == "GNOME" and session.display_manager == "gdm"
    assert runner.calls == []


def test_real_runner_times_out_a_dbus_tool_that_hangs(tmp_path: Path) -> None:
    tool = tmp_path / "qdbus6"
    hang_s = 30
    tool.write_text(f"#!/bin/sh\nsleep {hang_s}\n")
    tool.chmod(0o755)
    runner = SubprocessRunner(env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    start = time.monotonic()
    session = detect_session({"XDG_CURRENT_DESKTOP": "KDE"}, tmp_path, runner, timeout=0.3)
    assert time.monotonic() - start < hang_s / 2  # it did not wait for the tool
    assert session.problem == "KWin did not answer within 0.3 s"


# What Debian 12's tools print (qdbus-qt5 5.15.8, gdbus of glib 2.74, busctl of systemd 252),
# recorded with no session bus and with a bus that has no KWin on it.
NO_BUS = {
    "qdbus": (
        1,
        "Could not connect to D-Bus server: org.freedesktop.DBus.Error.NotSupported: "
        "Unable to autolaunch a dbus-daemon without a $DISPLAY for X11",
    ),
    "gdbus": (1, "Error connecting: Cannot autolaunch D-Bus without X11 $DISPLAY"),
    "busctl": (
        1,
        "Failed to set bus address: $DBUS_SESSION_BUS_ADDRESS and $XDG_RUNTIME_DIR "
        "not defined (consider using --machine=<user>@.host --user to connect to bus "
        "of other user)",
    ),
}
NO_KWIN = {
    "qdbus": (2, "Service 'org.kde.KWin' does not exist."),
    "gdbus": (1, "Error: GDBus.Error:org.freedesktop.DBus.Error.ServiceUnknown: The name "
                 "org.kde.KWin was not provided by any .service files"),
    "busctl": (1, "Call failed: The name org.kde.KWin was not provided by any .service files"),
}  # fmt: skip


@pytest.mark.parametrize("tool", ["qdbus", "gdbus", "busctl"])
@pytest.mark.parametrize(("answers", "phrase"), [
    (NO_BUS, "no session bus is reachable (DBUS_SESSION_BUS_ADDRESS is not set)"),
    (NO_KWIN, "KWin is not running on this session bus (not a Plasma session?)")])  # fmt: skip
def test_bus_failures_are_one_phrase(
    tool: str, answers: dict[str, tuple[int, str]], phrase: str
) -> None:
    code, stderr = answers[tool]
    runner = ScriptedRunner({tool: RunResult((tool,), code, "", stderr + "\n")})
    assert kwin_compositing(runner, 1.0) == (None, None, phrase)


@pytest.mark.parametrize(
    ("name", "command", "category"),
    [
        ("kwin_wayland", None, ProcessCategory.COMPOSITOR),
        ("kwin_x11", None, ProcessCategory.COMPOSITOR),
        ("Xorg", "/usr/lib/Xorg :0 vt1", ProcessCategory.COMPOSITOR),
        ("Xwayland", None, ProcessCategory.COMPOSITOR),
        ("gnome-shell", None, ProcessCategory.COMPOSITOR),
        ("sway", None, ProcessCategory.COMPOSITOR),
        ("Hyprland", None, ProcessCategory.COMPOSITOR),
        ("plasmashell", None, ProcessCategory.DESKTOP_SHELL),
        ("xdg-desktop-por", "/usr/lib/xdg-desktop-portal-kde", ProcessCategory.DESKTOP_SHELL),
        ("firefox", None, ProcessCategory.BROWSER),
        ("Isolated Web Co", None, ProcessCategory.BROWSER),
        ("chrome", "/opt/google/chrome/chrome --type=gpu-process", ProcessCategory.BROWSER),
        ("llama-server", None, ProcessCategory.INFERENCE_ENGINE),
        ("ollama", "/usr/bin/ollama serve", ProcessCategory.INFERENCE_ENGINE),
        ("ollama_llama_se", None, ProcessCategory.INFERENCE_ENGINE),
        (
            "python3",
            "python3 -m vllm.entrypoints.openai.api_server",
            ProcessCategory.INFERENCE_ENGINE,
        ),
        ("steam", "/home/a/.steam/ubuntu12_32/steam", ProcessCategory.OTHER),
        (None, None, ProcessCategory.OTHER),
    ],
)
def test_categories(name: str | None, command: str | None, category: ProcessCategory) -> None:
    assert categorize(name, command) is category


def test_read_process(machine_roots: Machines) -> None:
    roots = machine_roots("desktop_amd_igpu_nvidia")
    kwin = read_process(roots.proc_root, 1187)
    assert kwin.name == "kwin_wayland" and kwin.exe_name == "kwin_wayland"
    assert kwin.command is not None and kwin.command.startswith(
        "/usr/bin/kwin_wayland --wayland-fd"
    )
    gone = read_process(roots.proc_root, 999_999)
    assert (gone.name, gone.command, gone.label) == (None, None, "pid 999999")
