"""packaging/install.sh into a DESTDIR: the expected tree, a working app, a clean --uninstall."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import stat
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.packaged_env import clean_env

from mtpstudio.helper import constants

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SH = ROOT / "packaging" / "install.sh"
APP_ID = "io.github.mtpstudio"
PREFIX = "/usr/local"
VENV = f"{PREFIX}/lib/mtpstudio/venv"
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
EXPECTED = {
    f"{PREFIX}/bin/mtpstudio",
    constants.HELPER_INSTALL_PATH,
    f"{constants.POLICY_INSTALL_DIR}/{constants.POLICY_FILE_NAME}",
    f"{PREFIX}/share/applications/{APP_ID}.desktop",
    f"{PREFIX}/share/metainfo/{APP_ID}.metainfo.xml",
    f"{PREFIX}/share/icons/hicolor/scalable/apps/{APP_ID}.svg",
    *(f"{PREFIX}/share/icons/hicolor/{s}x{s}/apps/{APP_ID}.png" for s in ICON_SIZES),
}


def run_install(destdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(INSTALL_SH), *args],
        env=clean_env(DESTDIR=str(destdir)),
        capture_output=True,
        text=True,
    )


def tree(destdir: Path) -> set[str]:
    """Files and links below ``destdir`` (outside the venv), as absolute installed paths."""
    return {
        "/" + str(path.relative_to(destdir))
        for path in destdir.rglob("*")
        if (path.is_file() or path.is_symlink()) and not str(path).startswith(f"{destdir}{VENV}/")
    }


def inside(destdir: Path, path: str) -> Path:
    return destdir / path.lstrip("/")


def resolve_in(destdir: Path, path: str) -> Path:
    """``path`` as it resolves once installed: links followed within ``destdir``."""
    for _ in range(10):
        staged = inside(destdir, path)
        if not staged.is_symlink():
            return staged
        target = os.readlink(staged)
        path = target if target.startswith("/") else str(Path(path).parent / target)
    raise AssertionError(f"link loop at {path}")


@pytest.fixture(scope="module")
def staged(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    destdir = tmp_path_factory.mktemp("destdir")
    result = run_install(destdir, "--wheel", str(built_wheel))
    assert result.returncode == 0, result.stderr[-3000:]
    yield destdir


pytestmark = pytest.mark.slow


def test_install_writes_exactly_the_expected_tree(staged: Path) -> None:
    assert tree(staged) == EXPECTED
    assert inside(staged, VENV).joinpath("pyvenv.cfg").is_file()


def test_the_helper_sits_at_the_policys_exec_path_and_runs_the_venvs_python(staged: Path) -> None:
    policy = ET.parse(
        inside(staged, f"{constants.POLICY_INSTALL_DIR}/{constants.POLICY_FILE_NAME}")
    )
    (exec_path,) = [
        a.text or "" for a in policy.iter("annotate") if a.get("key", "").endswith("exec.path")
    ]
    helper = inside(staged, exec_path)
    assert stat.S_IMODE(helper.stat().st_mode) == 0o755
    first, *body = helper.read_text().splitlines()
    assert first == f"#!{VENV}/bin/python3 -I"
    # The interpreter the shebang names: the venv's link to this machine's Python.
    assert Path(os.path.realpath(inside(staged, f"{VENV}/bin/python3"))).is_file()
    assert body == (ROOT / "packaging" / "mtpstudio-helper").read_text().splitlines()[1:]


def test_the_staged_helper_answers_status(staged: Path, tmp_path: Path) -> None:
    venv_python = inside(staged, VENV) / "bin" / "python3"
    helper = inside(staged, constants.HELPER_INSTALL_PATH)
    probe = subprocess.run(
        [str(venv_python), "-I", "-c", "import mtpstudio.helper.main"], capture_output=True
    )
    assert probe.returncode == 0, probe.stderr.decode()  # the staged venv holds the helper
    result = subprocess.run(
        [str(venv_python), "-I", str(helper), "--root", str(tmp_path), "status"],
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), dict)


def test_the_launchers_exec_resolves_to_the_installed_entry_point(staged: Path) -> None:
    desktop = inside(staged, f"{PREFIX}/share/applications/{APP_ID}.desktop")
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(desktop.read_text())
    entry = parser["Desktop Entry"]
    program, *args = entry["Exec"].split()
    assert program == entry["TryExec"] == f"{PREFIX}/bin/mtpstudio"
    assert args == ["gui"]
    script = resolve_in(staged, program)
    assert script == inside(staged, f"{VENV}/bin/mtpstudio")
    assert os.access(script, os.X_OK)
    shebang, *rest = script.read_text().splitlines()
    assert shebang == f"#!{VENV}/bin/python"
    assert "from mtpstudio.cli.main import main" in "\n".join(rest)
    result = subprocess.run(
        [shutil.which("desktop-file-validate") or "desktop-file-validate", str(desktop)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_staged_venv_names_only_final_paths_and_runs(staged: Path, tmp_path: Path) -> None:
    venv = inside(staged, VENV)
    leaks = [
        str(path)
        for path in [*venv.joinpath("bin").iterdir(), venv / "pyvenv.cfg"]
        if path.is_file() and not path.is_symlink() and str(staged).encode() in path.read_bytes()
    ]
    assert leaks == []
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-m", "mtpstudio", "--version"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("mtpstudio ")


def test_uninstall_removes_everything_it_installed_and_nothing_else(
    staged: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "destdir"  # a hard-linked copy: the module's install stays for the others
    shutil.copytree(staged, copy, symlinks=True, copy_function=os.link)
    wrapper = inside(copy, f"{constants.WRAPPER_DIR}/mtpstudio-session-llvmpipe")
    wrapper.write_text("#!/bin/sh\n")  # what `mtpstudio apply` put there stays
    result = run_install(copy, "--uninstall")
    assert result.returncode == 0, result.stderr
    assert tree(copy) == {f"{constants.WRAPPER_DIR}/mtpstudio-session-llvmpipe"}
    assert not inside(copy, VENV).exists()
    assert not inside(copy, str(Path(constants.HELPER_INSTALL_PATH).parent)).exists()
    for path in EXPECTED:
        assert f"removed {path}" in result.stdout

    wrapper.unlink()
    again = run_install(copy, "--uninstall")
    assert again.returncode == 0
    assert tree(copy) == set()
    assert not inside(copy, f"{PREFIX}/lib/mtpstudio").exists()


def test_a_relative_prefix_is_refused_in_one_sentence(tmp_path: Path) -> None:
    result = run_install(tmp_path, "--prefix", "usr/local")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "install.sh: --prefix must be an absolute folder, not 'usr/local'"
    ]
    assert list(tmp_path.iterdir()) == []


OS_RELEASES = {
    "debian-12": 'ID=debian\nVERSION_ID="12"\n',
    "debian-11": 'ID=debian\nVERSION_ID="11"\n',
    "ubuntu-22.04": 'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n',
    "ubuntu-24.04": 'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n',
    "mint-21.3": 'ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_ID="21.3"\n'
    'UBUNTU_VERSION_ID="22.04"\n',
    "cachyos": "ID=cachyos\nID_LIKE=arch\n",
    "fedora": "ID=fedora\nVERSION_ID=40\n",
    "tumbleweed": 'ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"\n',
}


@pytest.mark.parametrize("name", sorted(OS_RELEASES))
def test_a_missing_pkexec_is_named_with_the_package_the_app_names(
    name: str, tmp_path: Path
) -> None:
    """install.sh warns when polkit's pkexec is missing, naming the same package and command
    as the app does (mtpstudio.core.distro), and says nothing when it is there."""
    from mtpstudio.core.distro import polkit_package

    release = tmp_path / "os-release"
    release.write_text(OS_RELEASES[name])
    env = clean_env(OS_RELEASE=str(release), PKEXEC=str(tmp_path / "no-pkexec"))
    run = subprocess.run(["bash", str(INSTALL_SH), "--check-polkit"], env=env,
                         capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert run.returncode == 0
    package, command = polkit_package(OS_RELEASES[name])
    assert "warning: pkexec (polkit) is not installed" in run.stderr
    assert f"Install the package {package}: {command}\n" in run.stderr
    env["PKEXEC"] = "/bin/sh"  # any program on the PATH stands for an installed pkexec
    quiet = subprocess.run(["bash", str(INSTALL_SH), "--check-polkit"], env=env,
                           capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert quiet.returncode == 0 and quiet.stderr == ""
