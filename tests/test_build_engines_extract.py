"""scripts/build_engines.py extracts sdists safely on every Python 3.11, hostile tarballs too."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.servers import BUILD_SCRIPT, _load_build_script

build_engines = _load_build_script()

Member = Callable[[tarfile.TarFile], None]


def _file(name: str, data: bytes = b"x\n", mode: int = 0o644) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    return add


def _dir(name: str, mode: int = 0o755) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)

    return add


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        tar.addfile(info)

    return add


def _special(name: str, kind: bytes) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.devmajor, info.devminor = kind, 1, 3
        tar.addfile(info)

    return add


def _tarball(path: Path, *members: Member) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for add in members:
            add(tar)
    return path


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, Path]:
    """An extraction folder and a sibling folder that nothing may ever reach."""
    dest, outside = tmp_path / "work" / "src", tmp_path / "work" / "outside"
    outside.mkdir(parents=True)
    return dest, outside


def _benign(path: Path) -> Path:
    return _tarball(
        path,
        _dir("pkg-1.0"),
        _file("pkg-1.0/README", b"hello\n"),
        _file("pkg-1.0/tools/run.sh", b"#!/bin/sh\necho ok\n", mode=0o755),
        _link("pkg-1.0/docs", "tools"),
        _link("pkg-1.0/README.copy", "pkg-1.0/README", kind=tarfile.LNKTYPE),
        _file("pkg-1.0/setuid", b"s\n", mode=0o4777),
    )


def test_benign_sdist_extracts_with_modes_and_internal_links(
    tmp_path: Path, place: tuple[Path, Path]
) -> None:
    dest, _ = place
    top = build_engines.extract(_benign(tmp_path / "ok.tar.gz"), dest)
    assert top == dest / "pkg-1.0"
    assert (top / "README").read_text() == "hello\n"
    assert os.access(top / "tools" / "run.sh", os.X_OK)
    assert (top / "docs").is_symlink() and (top / "docs" / "run.sh").exists()
    assert (top / "README.copy").stat().st_ino == (top / "README").stat().st_ino
    mode = (top / "setuid").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID) and not mode & 0o022
    assert (top / "README").stat().st_uid == os.getuid()


HOSTILE: dict[str, tuple[tuple[Member, ...], str]] = {
    "absolute path": ((_file("/tmp/mtpstudio-evil"),), "absolute path"),
    "dot-dot": ((_file("../outside/evil"),), "'..'"),
    "dot-dot inside": ((_file("pkg/sub/../../../outside/evil"),), "'..'"),
    "symlink absolute": ((_link("pkg/etc", "/etc"),), "absolute path"),
    "symlink up": ((_link("pkg/up", "../../outside"),), "leading outside"),
    "symlink through earlier link": (
        (_link("pkg/here", ".."), _link("pkg/escape", "here/..")),
        "leading outside",
    ),
    "file through a link made safe then bent": (
        (_link("a", "x/.."), _link("x", "."), _file("a/outside/evil")),
        "outside the folder",
    ),
    "hard link absolute": ((_link("pkg/pw", "/etc/passwd", kind=tarfile.LNKTYPE),), "hard link"),
    "hard link up": ((_link("pkg/pw", "../outside/f", kind=tarfile.LNKTYPE),), "hard link"),
    "character device": ((_special("pkg/null", tarfile.CHRTYPE),), "device"),
    "block device": ((_special("pkg/sda", tarfile.BLKTYPE),), "device"),
    "fifo": ((_special("pkg/pipe", tarfile.FIFOTYPE),), "device"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_member_is_refused_and_nothing_lands_outside(
    case: str, tmp_path: Path, place: tuple[Path, Path]
) -> None:
    dest, outside = place
    members, reason = HOSTILE[case]
    archive = _tarball(tmp_path / "evil.tar.gz", _file("pkg/ok"), *members)
    with pytest.raises(build_engines.UnsafeArchiveError, match="refusing") as caught:
        build_engines.extract(archive, dest)
    assert reason in str(caught.value)
    assert list(outside.iterdir()) == []
    assert not Path("/tmp/mtpstudio-evil").exists()


def test_link_bent_outside_by_a_later_member_is_removed(
    tmp_path: Path, place: tuple[Path, Path]
) -> None:
    # Each link is inside when extracted, but "x" -> "." turns "a" -> "x/.." into a way out.
    dest, _ = place
    archive = _tarball(tmp_path / "bent.tar.gz", _link("a", "x/.."), _link("x", "."))
    with pytest.raises(build_engines.UnsafeArchiveError, match="'a' leads outside"):
        build_engines.extract(archive, dest)
    assert not (dest / "a").is_symlink()


def test_member_problem_accepts_plain_members(tmp_path: Path) -> None:
    root = os.path.realpath(tmp_path)
    for name, kind in (("pkg", tarfile.DIRTYPE), ("pkg/a.c", tarfile.REGTYPE)):
        info = tarfile.TarInfo(name)
        info.type = kind
        assert build_engines.member_problem(info, root) is None


def _system_pythons() -> list[str]:
    found = [sys.executable]
    debian = "/usr/bin/python3"  # what a stock Debian 12 runs the script with (3.11.2)
    if Path(debian).exists() and os.path.realpath(debian) != os.path.realpath(sys.executable):
        found.append(debian)
    return found


@pytest.mark.parametrize("python", _system_pythons())
def test_extract_runs_under_the_system_python(python: str, tmp_path: Path) -> None:
    """The script runs before any venv exists, so it must work on the interpreter it is given."""
    good, bad = _benign(tmp_path / "ok.tar.gz"), _tarball(tmp_path / "bad.tar.gz", _file("../x"))
    code = (
        "import importlib.util, sys\n"
        "from pathlib import Path\n"
        f"spec = importlib.util.spec_from_file_location('be', {str(BUILD_SCRIPT)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['be'] = m\n"
        "spec.loader.exec_module(m)\n"
        "top = m.extract(Path(sys.argv[1]), Path(sys.argv[3]) / 'good')\n"
        "print(sys.version.split()[0], (top / 'tools' / 'run.sh').exists())\n"
        "try:\n"
        "    m.extract(Path(sys.argv[2]), Path(sys.argv[3]) / 'bad')\n"
        "except m.UnsafeArchiveError as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run(
        [python, "-c", code, str(good), str(bad), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    exists = out.stdout.splitlines()[0].split()[1]
    assert exists == "True", out.stdout
    assert "refused: bad.tar.gz: member '../x' contains '..'" in out.stdout
    assert not (tmp_path / "x").exists()
