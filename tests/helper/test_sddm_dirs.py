"""Which folder the installed SDDM reads, from its package version and SessionDir settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helper_bench import make_root, run_helper, session_payload

from mtpstudio.helper.sddm import package_version, session_dirs, version_tuple

DPKG_STATUS = """Package: sddm-theme-debian-maui
Status: install ok installed
Version: 0.19.0-5

Package: sddm
Status: install ok installed
Priority: optional
Version: 0.19.0-5
Description: modern display manager for X11
 long description line: Version: 9.9

Package: zsh
Status: install ok installed
Version: 5.9-4
"""


def debian12(root: Path) -> Path:
    (root / "var/lib/dpkg").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text(DPKG_STATUS)
    return root


def arch(root: Path, version: str = "0.21.0-7") -> Path:
    (root / f"var/lib/pacman/local/sddm-{version}").mkdir(parents=True)
    (root / "var/lib/pacman/local/sddm-kcm-6.3.5-1").mkdir(parents=True)
    return root


def test_debian_12_reads_only_usr_share(tmp_path: Path) -> None:
    dirs = session_dirs(str(debian12(tmp_path)))
    assert (dirs.version, dirs.version_source) == ("0.19.0", "dpkg database")
    assert dirs.dirs["wayland-sessions"] == ("/usr/share/wayland-sessions",)
    assert dirs.target("wayland-sessions") == "/usr/share/wayland-sessions"
    assert dirs.target("xsessions") == "/usr/share/xsessions"
    assert "no /usr/local default" in dirs.explain("wayland-sessions")


def test_arch_reads_usr_local_first(tmp_path: Path) -> None:
    dirs = session_dirs(str(arch(tmp_path)))
    assert (dirs.version, dirs.version_source) == ("0.21.0", "pacman database")
    assert dirs.dirs["wayland-sessions"] == (
        "/usr/local/share/wayland-sessions",
        "/usr/share/wayland-sessions",
    )
    assert dirs.target("wayland-sessions") == "/usr/local/share/wayland-sessions"


def test_session_dir_settings_later_files_win(tmp_path: Path) -> None:
    root = arch(tmp_path)
    (root / "usr/lib/sddm/sddm.conf.d").mkdir(parents=True)
    (root / "usr/lib/sddm/sddm.conf.d/default.conf").write_text(
        "[Wayland]\nSessionDir=/opt/sessions\n"
    )
    (root / "etc/sddm.conf.d").mkdir(parents=True)
    (root / "etc/sddm.conf.d/10-local.conf").write_text(
        "# mine\n[Wayland]\nSessionDir=/usr/share/wayland-sessions\n[X11]\nSessionDir=/srv/x\n"
    )
    dirs = session_dirs(str(root))
    assert dirs.dirs["wayland-sessions"] == ("/usr/share/wayland-sessions",)
    assert dirs.target("wayland-sessions") == "/usr/share/wayland-sessions"
    assert "/etc/sddm.conf.d/10-local.conf" in dirs.explain("wayland-sessions")
    assert dirs.target("xsessions") is None
    (root / "etc/sddm.conf").write_text(
        "[Wayland]\nSessionDir=/usr/local/share/wayland-sessions/\n"
    )
    assert session_dirs(str(root)).target("wayland-sessions") == "/usr/local/share/wayland-sessions"


def test_old_sddm_reads_the_old_section_names(tmp_path: Path) -> None:
    root = debian12(tmp_path)
    (root / "etc").mkdir()
    (root / "etc/sddm.conf").write_text(
        "[Wayland]\nSessionDir=/ignored\n[WaylandDisplay]\n"
        "SessionDir=/usr/local/share/wayland-sessions,/usr/share/wayland-sessions\n"
    )
    dirs = session_dirs(str(root))
    assert dirs.target("wayland-sessions") == "/usr/local/share/wayland-sessions"


def test_no_sddm_and_an_unknown_version(tmp_path: Path) -> None:
    dirs = session_dirs(str(tmp_path))
    assert (
        not dirs.installed
        and dirs.target("wayland-sessions") == "/usr/local/share/wayland-sessions"
    )
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/sddm").write_text("")
    unknown = session_dirs(str(tmp_path))
    assert unknown.installed and unknown.version is None and unknown.notes
    assert session_dirs(str(tmp_path), "0.19.0").target("wayland-sessions") == (
        "/usr/share/wayland-sessions"
    )
    assert package_version(str(tmp_path)) == (None, None)


@pytest.mark.parametrize(("text", "parsed"), [("0.19.0-5", (0, 19, 0)), ("sddm 0.21.0", (0, 21, 0)),
                                              ("v0.20", (0, 20, 0)), ("none", None)])  # fmt: skip
def test_version_tuple(text: str, parsed: tuple[int, int, int] | None) -> None:
    assert version_tuple(text) == parsed


def test_helper_writes_usr_share_only_where_sddm_reads_nothing_else(tmp_path: Path) -> None:
    usr_share = {"sessions_dir": "/usr/share/wayland-sessions"}
    name = "plasmawayland-llvmpipe-mtpstudio.desktop"
    on_arch = make_root(arch(tmp_path / "arch"))
    result = run_helper(on_arch, "install-session", name, payload=session_payload(**usr_share))
    assert result.returncode == 2 and b"only where SDDM reads nothing else" in result.stderr
    on_debian = debian12(make_root(tmp_path / "debian"))
    result = run_helper(on_debian, "install-session", name, payload=session_payload(**usr_share))
    assert result.returncode == 0, result.stderr
    assert (on_debian / "usr/share/wayland-sessions" / name).is_file()
