"""The xcb preflight: recorded ldd outputs of PySide6's libqxcb.so -> the packages to install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.runners import FixedRunner

from mtpstudio.core.qt_platform import (
    SONAME_PACKAGES,
    QtPlatformError,
    check_xcb_platform,
    missing_sonames,
    will_use_xcb,
    xcb_plugin_path,
    xcb_report,
)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "qt_platform"
NO_ICCCM = (FIXTURES / "ldd-libqxcb-debian12-no-icccm-keysyms.txt").read_text()
HIDDEN = (FIXTURES / "ldd-libqxcb-debian12-overlay-hidden-libs.txt").read_text()
COMPLETE = (FIXTURES / "ldd-libqxcb-debian12-complete.txt").read_text()


def test_missing_sonames_of_the_debian12_machine_as_found() -> None:
    assert missing_sonames(NO_ICCCM) == ("libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    assert missing_sonames(COMPLETE) == ()


def test_report_names_debian_and_arch_packages() -> None:
    report = xcb_report(NO_ICCCM, xcb_cursor_loads=True)
    assert report.debian == ("libxcb-icccm4", "libxcb-keysyms1")
    assert report.arch == ("xcb-util-wm", "xcb-util-keysyms")
    assert report.unknown == ()


def test_report_for_many_hidden_libraries_dedupes_packages() -> None:
    report = xcb_report(HIDDEN, xcb_cursor_loads=False)
    assert report.missing == (
        "libxkbcommon-x11.so.0",
        "libxcb-cursor.so.0",
        "libxcb-icccm.so.4",
        "libxcb-image.so.0",
        "libxcb-keysyms.so.1",
        "libxcb-render-util.so.0",
        "libEGL.so.1",
        "libfontconfig.so.1",
    )
    assert report.debian == (
        "libxkbcommon-x11-0",
        "libxcb-cursor0",
        "libxcb-icccm4",
        "libxcb-image0",
        "libxcb-keysyms1",
        "libxcb-render-util0",
        "libegl1",
        "libfontconfig1",
    )
    assert "xcb-util-cursor" in report.arch and "libglvnd" in report.arch


def test_qt_own_xcb_cursor_check_is_added_when_ldd_is_silent() -> None:
    report = xcb_report(COMPLETE, xcb_cursor_loads=False)
    assert report.missing == ("libxcb-cursor.so.0",)
    assert report.debian == ("libxcb-cursor0",) and report.arch == ("xcb-util-cursor",)


def test_unknown_soname_is_named_not_dropped() -> None:
    ldd = NO_ICCCM + "\tlibxcb-frobnicate.so.7 => not found\n"
    error = _raised(ldd)
    assert "libxcb-frobnicate.so.7" in str(error)
    assert "apt-file search" in (error.hint or "")


def _raised(ldd: str) -> QtPlatformError:
    with pytest.raises(QtPlatformError) as caught:
        check_xcb_platform(
            {"DISPLAY": ":0"}, FixedRunner(ldd), Path("/x/libqxcb.so"), lambda _: True
        )
    return caught.value


def test_error_is_one_sentence_with_both_install_commands() -> None:
    error = _raised(NO_ICCCM)
    assert str(error) == (
        "the GUI cannot start: this system lacks libxcb-icccm.so.4 and libxcb-keysyms.so.1, "
        "which Qt's X11 (xcb) platform plugin needs"
    )
    assert "`sudo apt install libxcb-icccm4 libxcb-keysyms1` (Debian/Ubuntu)" in (error.hint or "")
    assert "`sudo pacman -S xcb-util-wm xcb-util-keysyms` (Arch)" in (error.hint or "")


@pytest.mark.parametrize(
    ("environ", "xcb"),
    [
        ({"DISPLAY": ":0"}, True),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland;xcb"}, False),
        ({"WAYLAND_DISPLAY": "w", "QT_QPA_PLATFORM": "xcb"}, True),
        ({"QT_QPA_PLATFORM": "xcb:nograb"}, True),
        ({}, False),
    ],
)
def test_only_an_xcb_platform_is_checked(environ: dict[str, str], xcb: bool) -> None:
    assert will_use_xcb(environ) is xcb
    runner = FixedRunner(NO_ICCCM)
    if xcb:
        with pytest.raises(QtPlatformError):
            check_xcb_platform(environ, runner, Path("/x/libqxcb.so"), lambda _: True)
    else:
        assert check_xcb_platform(environ, runner, Path("/x/libqxcb.so")) is None
        assert runner.calls == []


def test_ldd_that_cannot_run_leaves_the_decision_to_qt() -> None:
    broken = FixedRunner("", returncode=1)
    assert check_xcb_platform({"DISPLAY": ":0"}, broken, Path("/x/libqxcb.so")) is None
    assert broken.calls == [("ldd", "/x/libqxcb.so")]


def test_the_real_plugin_is_found_without_importing_pyside6() -> None:
    code = (
        "import sys\n"
        "from mtpstudio.core.qt_platform import xcb_plugin_path\n"
        "print(xcb_plugin_path()); print('PySide6' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0].endswith("PySide6/Qt/plugins/platforms/libqxcb.so") and Path(out[0]).is_file()
    assert out[1] == "False"
    assert xcb_plugin_path(lambda _: None) is None


def test_the_real_plugin_on_this_machine_has_what_it_needs() -> None:
    """scripts/test installs the libraries; this machine must pass the real check."""
    report = check_xcb_platform({"DISPLAY": ":0"})
    assert report is not None and report.ok, report


def test_gui_command_exits_2_in_one_line_before_qt_loads(tmp_path: Path) -> None:
    fixture = FIXTURES / "ldd-libqxcb-debian12-no-icccm-keysyms.txt"
    code = (
        "import sys\n"
        "import mtpstudio.core.qt_platform as qp\n"
        "from mtpstudio.core.runner import RunResult\n"
        f"text = open({str(fixture)!r}).read()\n"
        "qp.SubprocessRunner = lambda: (lambda argv, timeout: RunResult(tuple(argv), 0, text))\n"
        "from mtpstudio.cli.main import main\n"
        "code = main(['gui', '--demo'])\n"
        "print('exit', code, 'qt-loaded', any(m.startswith('PySide6') for m in sys.modules))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DISPLAY": ":0"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.stdout.strip() == "exit 2 qt-loaded False", out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "sudo apt install libxcb-icccm4 libxcb-keysyms1" in lines[0]


def _readme_gui_packages() -> tuple[set[str], set[str]]:
    readme = (REPO / "README.md").read_text()
    apt = re.search(r"sudo apt install ([\w.+\- ]+?)\s*# GUI", readme)
    pacman = re.search(r"sudo pacman -S --needed ([\w.+\- ]+?)\s*# GUI", readme)
    assert apt and pacman, "README lists the GUI's Debian and Arch packages"
    return set(apt.group(1).split()), set(pacman.group(1).split())


def test_readme_and_scripts_test_list_the_packages_the_plugin_needs() -> None:
    debian, arch = _readme_gui_packages()
    script = (REPO / "scripts" / "test").read_text()
    block = script[script.index("qt_libs=(") : script.index(")\n", script.index("qt_libs=("))]
    pairs = dict(p.split(":") for p in block.split()[1:])
    assert set(pairs.values()) == debian
    for soname, package in pairs.items():
        assert SONAME_PACKAGES[soname][0] == package
        assert SONAME_PACKAGES[soname][1] in arch
    for ldd in (NO_ICCCM, HIDDEN):
        report = xcb_report(ldd, xcb_cursor_loads=False)
        assert set(report.debian) <= debian and set(report.arch) <= arch
