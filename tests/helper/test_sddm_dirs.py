"""Which folder the installed SDDM reads: its package version (dpkg-query / pacman database),
its config files in SDDM's order, each version's defaults checked against that version's own
``sddm --example-config``, and the names its session menu shows."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.helper_bench import make_root, run_helper, session_payload

from mtpstudio.helper import sddm as sddm_module
from mtpstudio.helper.sddm import (
    package_version,
    parse_config,
    session_dirs,
    version_tuple,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "desktop"
ARCH = FIXTURES / "arch-plasma6"
WAYLAND, X11 = "wayland-sessions", "xsessions"
STANZA = "Package: {name}\nStatus: install ok installed\nPriority: optional\nVersion: {version}\n"


def dpkg_tree(root: Path, packages: list[tuple[str, str]]) -> Path:
    """A root whose dpkg database lists ``packages`` (name, version) in that order."""
    (root / "var/lib/dpkg/updates").mkdir(parents=True, exist_ok=True)
    text = "\n".join(STANZA.format(name=n, version=v) for n, v in packages)
    (root / "var/lib/dpkg/status").write_text(text + "\n")
    return root


def example_dirs(config: str, kind: str, lists: bool) -> tuple[str, ...]:
    """The SessionDir an ``sddm --example-config`` output names, read as that version does."""
    value = parse_config(config)[("Wayland" if kind == WAYLAND else "X11", "SessionDir")]
    return tuple(p.strip() for p in value.split(",")) if lists else (value,)


# --------------------------------------------------------------------------------------------
# the version, from the package database


def test_a_kde_desktop_sized_dpkg_database_is_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ~2.4 MB, sorted by name: sddm sits far past the first MiB (the reader that stopped there
    # never found it). Read with dpkg-query, and by the file reader where dpkg-query is absent.
    filler = [(f"aaa-lib{i:05d}", "1.0-1") for i in range(30000)]
    root = dpkg_tree(tmp_path, [*filler, ("sddm", "0.19.0-5"), ("zsh", "5.9-4")])
    assert (root / "var/lib/dpkg/status").stat().st_size > 2 * 1024 * 1024
    assert shutil.which("dpkg-query"), "Debian's dpkg-query is missing"
    assert package_version(str(root)) == ("0.19.0-5", "dpkg-query")
    monkeypatch.setattr(sddm_module, "_run", lambda argv: None)
    assert package_version(str(root)) == ("0.19.0-5", "dpkg database")


def test_a_removed_sddm_is_not_installed(tmp_path: Path) -> None:
    root = dpkg_tree(tmp_path, [("sddm", "0.19.0-5")])
    status = root / "var/lib/dpkg/status"
    status.write_text(
        status.read_text().replace("install ok installed", "deinstall ok config-files")
    )
    assert package_version(str(root)) == (None, "dpkg-query")
    assert package_version(str(tmp_path / "nothing")) == (None, None)


def test_arch_version_from_the_pacman_database() -> None:
    version, source = package_version(str(ARCH))
    assert version == "0.21.0-7" and source in {"pacman database", "pacman -Q"}


@pytest.mark.parametrize(("text", "parsed"), [
    ("0.19.0-5", (0, 19, 0)), ("4:0.19.0-5", (0, 19, 0)), ("sddm 0.21.0", (0, 21, 0)),
    ("0.21.0.r14.gae072f9-1", (0, 21, 0)), ("v0.20", (0, 20, 0)), ("none", None)])  # fmt: skip
def test_version_tuple(text: str, parsed: tuple[int, int, int] | None) -> None:
    assert version_tuple(text) == parsed


# --------------------------------------------------------------------------------------------
# each version's defaults are the ones its own program prints


@pytest.mark.parametrize(
    ("version", "fixture", "lists"),
    [
        ("0.19.0-5", "sddm-0.19.0-5-example-config.conf", False),
        ("0.20.0", "sddm-0.20.0-example-config.conf", True),
        ("0.21.0", "sddm-0.21.0-example-config.conf", True),
    ],
)
def test_defaults_are_what_that_version_prints(
    version: str, fixture: str, lists: bool, tmp_path: Path
) -> None:
    config = (FIXTURES / "sddm" / fixture).read_text()
    dirs = session_dirs(str(tmp_path), version)
    for kind in (WAYLAND, X11):
        assert dirs.dirs[kind] == example_dirs(config, kind, lists)
    assert dirs.lists is lists


def test_arch_tree_reads_usr_local_first() -> None:
    dirs = session_dirs(str(ARCH))
    assert dirs.version == "0.21.0-7"
    assert dirs.dirs[WAYLAND] == (
        "/usr/local/share/wayland-sessions",
        "/usr/share/wayland-sessions",
    )
    assert "/usr/lib/sddm/sddm.conf.d/default.conf" in dirs.sources[WAYLAND]
    assert dirs.target(WAYLAND) == "/usr/local/share/wayland-sessions"
    assert dirs.target(X11) == "/usr/local/share/xsessions"


# --------------------------------------------------------------------------------------------
# the config files, read the way SDDM reads them


def conf(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_later_files_win_in_sddms_order(tmp_path: Path) -> None:
    root = dpkg_tree(tmp_path, [("sddm", "0.21.0-1")])
    conf(root, "usr/lib/sddm/sddm.conf.d/default.conf", "[Wayland]\nSessionDir=/opt/a\n")
    local = "[Wayland]\nSessionDir=/usr/share/wayland-sessions  # mine\n[X11]\nSessionDir=/srv/x\n"
    conf(root, "etc/sddm.conf.d/10-local.conf", local)
    dirs = session_dirs(str(root))
    assert dirs.dirs[WAYLAND] == ("/usr/share/wayland-sessions",)
    assert "/etc/sddm.conf.d/10-local.conf, section [Wayland]" in dirs.explain(WAYLAND)
    assert dirs.target(X11) == "/srv/x"  # the administrator's own folder
    conf(root, "etc/sddm.conf", "[Wayland]\nSessionDir=/usr/local/share/wayland-sessions/\n")
    assert session_dirs(str(root)).target(WAYLAND) == "/usr/local/share/wayland-sessions"


def test_old_section_names_are_aliases_in_every_version(tmp_path: Path) -> None:
    root = dpkg_tree(tmp_path, [("sddm", "0.19.0-5")])
    conf(
        root,
        "etc/sddm.conf",
        "[WaylandDisplay]\nSessionDir=/opt/w\n[XDisplay]\nSessionDir=/opt/x\n",
    )
    dirs = session_dirs(str(root))
    assert (dirs.target(WAYLAND), dirs.target(X11)) == ("/opt/w", "/opt/x")


def test_a_comma_list_in_0_19_lists_no_session(tmp_path: Path) -> None:
    root = dpkg_tree(tmp_path, [("sddm", "0.19.0-5")])
    both = "/usr/local/share/wayland-sessions,/usr/share/wayland-sessions"
    conf(root, "etc/sddm.conf.d/x.conf", f"[Wayland]\nSessionDir={both}\n")
    dirs = session_dirs(str(root))
    assert dirs.target(WAYLAND) is None
    said = dirs.explain(WAYLAND)
    assert "as one folder" in said and "/etc/sddm.conf.d/x.conf" in said
    assert dirs.target(X11) == "/usr/share/xsessions"  # the other kind is unaffected


def test_unknown_version_uses_what_every_version_reads(tmp_path: Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/sddm").write_text("")
    dirs = session_dirs(str(tmp_path))
    assert dirs.installed and dirs.version is None and dirs.notes
    assert dirs.target(WAYLAND) == "/usr/share/wayland-sessions"


def test_no_sddm_goes_where_gdm_looks(tmp_path: Path) -> None:
    dirs = session_dirs(str(tmp_path))
    assert not dirs.installed and dirs.target(WAYLAND) == "/usr/local/share/wayland-sessions"


# --------------------------------------------------------------------------------------------
# what the session menu shows


@pytest.mark.parametrize(
    ("version", "name", "kind", "others", "shown"),
    [
        ("0.19.0-5", "Plasma (Wayland, mine)", WAYLAND, [], "Plasma (Wayland, mine) (Wayland)"),
        ("0.19.0-5", "Plasma mine (Wayland)", WAYLAND, [], "Plasma mine (Wayland)"),
        ("0.19.0-5", "Plasma mine (X11)", X11, [], "Plasma mine (X11)"),
        ("0.21.0-7", "Plasma mine", WAYLAND, ["Plasma (X11)"], "Plasma mine"),
        ("0.21.0-7", "Plasma", WAYLAND, ["Plasma"], "Plasma (Wayland)"),
        ("0.21.0-7", "Plasma", X11, ["Plasma"], "Plasma"),
    ],
)
def test_shown_names(
    version: str, name: str, kind: str, others: list[str], shown: str, tmp_path: Path
) -> None:
    assert session_dirs(str(tmp_path), version).shown_name(name, kind, others) == shown


# --------------------------------------------------------------------------------------------
# the helper writes only where this SDDM reads


def test_helper_writes_usr_share_only_where_sddm_reads_nothing_else(tmp_path: Path) -> None:
    usr_share = {"sessions_dir": "/usr/share/wayland-sessions"}
    name = "plasmawayland-llvmpipe-mtpstudio.desktop"
    on_arch = make_root(tmp_path / "arch", plasma=True)
    shutil.copytree(ARCH, on_arch, dirs_exist_ok=True)
    result = run_helper(on_arch, "install-session", name, payload=session_payload(**usr_share))
    assert result.returncode == 2 and b"only where SDDM reads nothing else" in result.stderr
    on_debian = dpkg_tree(make_root(tmp_path / "debian", plasma=True), [("sddm", "0.19.0-5")])
    result = run_helper(on_debian, "install-session", name, payload=session_payload(**usr_share))
    assert result.returncode == 0, result.stderr
    assert (on_debian / "usr/share/wayland-sessions" / name).is_file()


def test_helper_writes_the_administrators_folder_and_nowhere_else(tmp_path: Path) -> None:
    name = "plasmawayland-llvmpipe-mtpstudio.desktop"
    root = dpkg_tree(make_root(tmp_path / "root", plasma=True), [("sddm", "0.21.0-1")])
    conf(root, "etc/sddm.conf.d/sessions.conf", "[Wayland]\nSessionDir=/opt/sessions\n")
    result = run_helper(root, "install-session", name,
                        payload=session_payload(sessions_dir="/opt/sessions"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (root / "opt/sessions" / name).is_file()
    result = run_helper(root, "install-session", name,
                        payload=session_payload(sessions_dir="/opt/elsewhere"))  # fmt: skip
    assert result.returncode == 2 and b"not a session folder the helper writes" in result.stderr
    # the manifest, read back as hostile input, may name the administrator's folder: status
    # shows the session and revert removes it (and only it)
    status = run_helper(root, "status")
    assert status.returncode == 0, status.stderr
    assert f"/opt/sessions/{name}".encode() in status.stdout
    (root / "opt/sessions/plasma.desktop").write_text("[Desktop Entry]\nName=Plasma\n")
    removed = run_helper(root, "remove-session", name)
    assert removed.returncode == 0, removed.stderr
    assert sorted(p.name for p in (root / "opt/sessions").iterdir()) == ["plasma.desktop"]


# --------------------------------------------------------------------------------------------
# this machine's own SDDM (Debian 12's package, installed by scripts/test)


def installed_sddm() -> str:
    if not Path("/var/lib/dpkg/status").is_file():
        pytest.skip("not a Debian system: Debian's sddm package cannot be installed here")
    tool = shutil.which("sddm")
    assert tool, "Debian's sddm package is missing: scripts/test installs it"
    return tool


def test_this_machines_sddm_reads_what_it_prints() -> None:
    tool = installed_sddm()
    dpkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "sddm"], capture_output=True,
                          text=True, check=True, timeout=30).stdout  # fmt: skip
    dirs = session_dirs("/")
    assert (dirs.version, dirs.version_source) == (dpkg, "dpkg-query")
    if any("SessionDir" in s for s in dirs.sources.values()):
        pytest.skip("this machine's SDDM config sets SessionDir: not the printed defaults")
    printed = subprocess.run([tool, "--example-config"], capture_output=True, text=True,
                             check=True, timeout=30).stdout  # fmt: skip
    for kind in (WAYLAND, X11):
        assert dirs.dirs[kind] == example_dirs(printed, kind, dirs.lists)
