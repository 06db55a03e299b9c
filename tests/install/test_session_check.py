"""Variant choice, the stored desktop VRAM figure and ``verify-session`` over recorded machines
(fake NVML from recordings, scripted tool answers: no GPU or KDE session exists here)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from fixtures.detect.fake_nvml import FakeNvml
from fixtures.detect.machines import MIB, PCI_IDS, build_machine
from support.runners import ScriptedRunner

from mtpstudio.core.desktop.install import (
    InProcessHelper,
    InstallError,
    PkexecHelper,
    call_helper,
    daemon_reload_user,
    user_manager_running,
)
from mtpstudio.core.desktop.reclaim import default_variant
from mtpstudio.core.desktop.session_check import check_session, desktop_vram, measurement_candidates
from mtpstudio.core.desktop.session_files import SessionVariant
from mtpstudio.core.detect.gather import DetectionReport, DetectionSources, detect_all
from mtpstudio.core.runner import RunResult

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "desktop"
KWIN_QPAINTER = """KWin Support Information:
Compositing
===========
Compositing is active
Compositing Type: QPainter
"""
KWIN_OPENGL_NVIDIA = """Compositing
===========
Compositing Type: OpenGL
OpenGL vendor string: NVIDIA Corporation
OpenGL renderer string: NVIDIA GeForce RTX 4070 SUPER/PCIe/SSE2
"""
GLXINFO_LLVMPIPE = """name of display: :0
display: :0  screen: 0
direct rendering: Yes
Extended renderer info (GLX_MESA_query_renderer):
    Vendor: Mesa (0xffffffff)
    Device: llvmpipe (LLVM 20.1.7, 256 bits) (0xffffffff)
OpenGL vendor string: Mesa
OpenGL renderer string: llvmpipe (LLVM 20.1.7, 256 bits)
OpenGL core profile version string: 4.5 (Core Profile) Mesa 25.1.5-arch1.1
"""
SHOW_ENVIRONMENT = """HOME=/home/alice
LANG=en_US.UTF-8
LIBGL_ALWAYS_SOFTWARE=1
KWIN_COMPOSE=Q
PATH=/usr/local/bin:/usr/bin
"""


def ok(argv0: str, stdout: str) -> RunResult:
    return RunResult((argv0,), 0, stdout)


def detect(name: str, tmp_path: Path) -> DetectionReport:
    roots = build_machine(name, tmp_path / name)
    nvml = (
        FakeNvml(roots.nvml)
        if roots.nvml is not None
        else FakeNvml({"devices": []}, init_error="NVMLError_LibraryNotFound")
    )
    sources = DetectionSources(
        nvml=nvml, sys_root=roots.sys_root, proc_root=roots.proc_root, etc_root=roots.etc_root,
        environ=roots.environ, runner=ScriptedRunner({}), home=Path("/nonexistent-home"),
        system_dirs=(), opt_root=None, pci_ids=PCI_IDS,
    )  # fmt: skip
    return detect_all(sources, include_engines=False)


@pytest.mark.parametrize(
    ("machine", "variant", "why"),
    [
        ("laptop_intel_nvidia", SessionVariant.WAYLAND_IGPU, "display is on the iGPU"),
        ("desktop_amd_igpu_nvidia", SessionVariant.WAYLAND_LLVMPIPE, "--variant igpu"),
        ("single_nvidia", SessionVariant.WAYLAND_LLVMPIPE, "display is on CUDA0"),
    ],
)
def test_variant_from_detection(
    machine: str, variant: SessionVariant, why: str, tmp_path: Path
) -> None:
    chosen, reason = default_variant(detect(machine, tmp_path))
    assert chosen is variant and why in reason


def test_desktop_vram_counts_the_desktop_processes(tmp_path: Path) -> None:
    report = detect("desktop_amd_igpu_nvidia", tmp_path)
    figure = desktop_vram(report, session="plasmawayland-llvmpipe-mtpstudio")
    held = [(p["name"], p["gpu_id"]) for p in figure["desktop_processes"]]
    # kwin, plasmashell and Xwayland on the NVIDIA card; not firefox, not the iGPU's share
    assert held == [("kwin_wayland", "CUDA0"), ("plasmashell", "CUDA0"), ("Xwayland", "CUDA0")]
    assert figure["desktop_bytes"] == 432013312 + 310378496 + 39845888
    json.dumps(figure)  # stored as JSON next to the manifest


def test_verify_session_in_a_software_session(tmp_path: Path) -> None:
    report = detect("single_nvidia", tmp_path)
    runner = ScriptedRunner({
        "qdbus6": ok("qdbus6", KWIN_QPAINTER),
        "glxinfo": ok("glxinfo", GLXINFO_LLVMPIPE),
        "systemctl": ok("systemctl", SHOW_ENVIRONMENT),
    })  # fmt: skip
    before = {"desktop_bytes": 1024 * MIB, "measured_at": "2026-11-23T10:00:00+00:00"}
    result = check_session(
        report, runner, {"DESKTOP_SESSION": "plasmawayland-llvmpipe-mtpstudio"}, before
    )
    assert result.compositing == "QPainter" and result.software_rendering == "yes"
    assert result.exit_code == 0
    assert [g.tool for g in result.gl] == ["glxinfo", "eglinfo"]
    assert result.gl[0].renderers == ("llvmpipe (LLVM 20.1.7, 256 bits)",)
    assert result.gl[1].missing
    assert result.leaked == {"LIBGL_ALWAYS_SOFTWARE": "1", "KWIN_COMPOSE": "Q"}
    lines = result.lines()
    assert lines[0] == (
        "Software rendering: yes - KWin composites with QPainter (on the CPU); GL clients "
        "render with llvmpipe (LLVM 20.1.7, 256 bits) (glxinfo)"
    )
    assert "Not installed: eglinfo (mesa-utils)" in lines
    text = "\n".join(lines)
    assert "before: 1024 MiB" in text and "given back" in text
    assert "Leaked into the systemd user manager: LIBGL_ALWAYS_SOFTWARE=1, KWIN_COMPOSE=Q" in text
    assert json.loads(json.dumps(result.to_json()))["software_rendering"] == "yes"
    assert ("systemctl", "--user", "show-environment") in runner.calls


def test_verify_session_with_nothing_installed(tmp_path: Path) -> None:
    report = detect("single_nvidia", tmp_path)
    result = check_session(report, ScriptedRunner({}), {}, None)
    assert result.compositing is None and result.software_rendering == "unknown"
    assert result.exit_code == 3
    assert all(g.missing for g in result.gl)
    assert result.user_manager == "environment unknown (systemctl is not installed)"
    lines = result.lines()
    assert lines[0].startswith("Software rendering: unknown - no D-Bus tool (qdbus6, qdbus")
    missing = [line for line in lines if line.startswith("Not installed:")]
    assert missing == [
        "Not installed: glxinfo and eglinfo (mesa-utils); a D-Bus tool to ask KWin "
        "(qdbus6, qdbus, gdbus or busctl)"
    ]
    assert not any(line.startswith(("glxinfo:", "eglinfo:", "KWin compositing:")) for line in lines)
    text = "\n".join(lines)
    assert "no figure stored" in text and "unknown (DESKTOP_SESSION is not set)" in text


def test_verify_session_in_the_normal_session(tmp_path: Path) -> None:
    report = detect("single_nvidia", tmp_path)
    runner = ScriptedRunner(
        {"qdbus6": ok("qdbus6", KWIN_OPENGL_NVIDIA), "systemctl": ok("s", "A=b\n")}
    )
    result = check_session(report, runner, {"DESKTOP_SESSION": "plasma"}, None)
    assert result.compositing == "OpenGL" and result.software_rendering == "no"
    assert result.exit_code == 1
    assert result.lines()[0] == (
        "Software rendering: no - KWin composites with OpenGL on NVIDIA GeForce RTX 4070 "
        "SUPER/PCIe/SSE2; no GL tool reached a session display"
    )
    assert result.leaked == {} and "No software-rendering variable leaked" in "\n".join(
        result.lines()
    )


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_debian_12_tools_recorded_in_a_real_software_session(tmp_path: Path) -> None:
    """Debian's eglinfo 8.5 ignores -B and exits 2 (its GBM and X11 platforms fail): its
    Wayland platform is still read; a GPU renderer from a GL client makes the verdict 'no'."""
    report = detect("single_nvidia", tmp_path)
    environ = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    runner = ScriptedRunner({
        "qdbus": ok("qdbus", recorded("kwin-5.27.5-support-information-qpainter.txt")),
        "glxinfo": ok("glxinfo", recorded("glxinfo-8.5.0-debian12-xwayland.txt")),
        "eglinfo": RunResult(("eglinfo",), 2, recorded("eglinfo-8.5.0-debian12-wayland.txt")),
    })  # fmt: skip
    result = check_session(report, runner, environ, None)
    assert (result.compositing, result.software_rendering) == ("QPainter", "yes")
    assert result.gl[0].renderers == ("llvmpipe (LLVM 15.0.6, 256 bits)",)
    assert result.gl[1].renderers == ("EGL driver swrast (Mesa Project), Wayland platform",)
    nvidia_gl = GLXINFO_LLVMPIPE.replace("llvmpipe (LLVM 20.1.7, 256 bits)", "NVIDIA GeForce")
    runner.answers["glxinfo"] = ok("glxinfo", nvidia_gl)
    mixed = check_session(report, runner, environ, None)
    assert mixed.software_rendering == "no" and mixed.exit_code == 1
    assert mixed.verdict_reason.startswith("GL clients render on NVIDIA GeForce (glxinfo)")


def test_a_kwin_that_does_not_answer_is_unknown_not_hardware(tmp_path: Path) -> None:
    report = detect("single_nvidia", tmp_path)
    no_kwin = RunResult(("qdbus",), 2, "", "Service 'org.kde.KWin' does not exist.\n")
    runner = ScriptedRunner({"qdbus": no_kwin, "glxinfo": ok("glxinfo", GLXINFO_LLVMPIPE)})
    result = check_session(report, runner, {"DISPLAY": ":0"}, None)
    assert result.software_rendering == "unknown" and result.exit_code == 3
    assert result.lines()[0] == (
        "Software rendering: unknown - KWin is not running on this session bus (not a Plasma "
        "session?); GL clients render with llvmpipe (LLVM 20.1.7, 256 bits) (glxinfo)"
    )
    assert "does not exist" not in "\n".join(result.lines())


def test_measurement_lookup_prefers_this_session() -> None:
    names = ["desktop-vram-a.json", "desktop-vram-b.json"]
    assert measurement_candidates("b", names) == ["desktop-vram-b.json", "desktop-vram-a.json"]
    assert measurement_candidates(None, names) == names
    assert measurement_candidates("c", []) == []


def test_user_manager_detection() -> None:
    running = ScriptedRunner({"systemctl": ok("systemctl", "running\n")})
    assert user_manager_running(running)
    assert daemon_reload_user(running) == "systemctl --user daemon-reload: done"
    offline = ScriptedRunner({"systemctl": RunResult(("systemctl",), 1, "offline\n")})
    assert not user_manager_running(offline)
    assert "no user manager is running" in daemon_reload_user(offline)
    assert not user_manager_running(ScriptedRunner({}))


def fake_program(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_pkexec_refusal_and_a_missing_helper(tmp_path: Path) -> None:
    helper = fake_program(tmp_path / "helper", "exit 0\n")
    cancelled = fake_program(
        tmp_path / "pkexec",
        "echo 'Error executing command as another user: Not authorized' >&2\nexit 127\n",
    )
    with pytest.raises(InstallError, match="authorisation was refused or cancelled"):
        call_helper(PkexecHelper(str(helper), str(cancelled)), ["status"])
    with pytest.raises(InstallError, match=r"helper is not set up at .*nothing was changed"):
        call_helper(PkexecHelper(str(tmp_path / "nope"), str(cancelled)), ["status"])
    with pytest.raises(InstallError, match=r"through pkexec \(polkit\), which is not installed"):
        call_helper(PkexecHelper(str(helper), str(tmp_path / "no-pkexec")), ["status"])
    no_agent = fake_program(
        tmp_path / "pkexec-no-agent",
        "echo 'Error executing command as another user: No authentication agent found.' >&2\n"
        "exit 127\n",
    )
    with pytest.raises(InstallError, match="no polkit authentication agent is running"):
        call_helper(PkexecHelper(str(helper), str(no_agent)), ["status"])
    # what pkexec passes through: argv, stdin, stdout, the helper's exit code and message
    echo = fake_program(
        tmp_path / "pkexec-echo", 'shift\necho "mtpstudio-helper: refused: $*" >&2\nexit 2\n'
    )
    with pytest.raises(InstallError, match=r"the helper refused: remove-unit x\.service"):
        call_helper(PkexecHelper(str(helper), str(echo)), ["remove-unit", "x.service"])


def test_in_process_helper_ignores_pkexec_uid(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var/lib").mkdir(parents=True)
    transport = InProcessHelper(root, {"PKEXEC_UID": "1000", "PATH": os.environ["PATH"]})
    assert call_helper(transport, ["status"])["groups"] == {}
    code, _out, err = transport(["bogus"], b"")
    assert code == 2 and "usage" in err
