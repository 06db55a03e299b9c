"""packaging/PKGBUILD: bash -n, namcap-style rules, and its build() and package() run for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.pkgbuild_lint import lint, read_pkgbuild

from mtpstudio.helper import constants

ROOT = Path(__file__).resolve().parents[2]
PKGBUILD = ROOT / "packaging" / "PKGBUILD"
APP_ID = "io.github.mtpstudio"


def test_the_pkgbuild_passes_bash_n_and_every_lint_rule() -> None:
    assert lint(PKGBUILD) == []


def test_optional_dependencies_explain_nvml_mesa_utils_and_llama_cpp() -> None:
    optdepends = dict(line.split(": ", 1) for line in read_pkgbuild(PKGBUILD).values["optdepends"])
    assert {"python-nvidia-ml-py", "mesa-utils", "llama.cpp"} <= optdepends.keys()
    assert "nvidia-utils" in optdepends["python-nvidia-ml-py"]
    assert "llama-server" in optdepends["llama.cpp"]


def mutated(tmp_path: Path, old: str, new: str) -> Path:
    text = PKGBUILD.read_text()
    assert old in text, old
    path = tmp_path / "PKGBUILD"
    path.write_text(text.replace(old, new, 1))
    return path


BROKEN = [
    ("sha256sums=('SKIP')\n", "", "no checksums"),
    ("arch=('any')", "arch='any'", "arch must be an array"),
    ("pkgrel=1", "pkgrel=0", "pkgrel"),
    ("pkgver=0.1.0", "pkgver=0.1-0", "pkgver"),
    ("'mesa-utils: glxinfo", "'mesa-utils glxinfo", "optdepends entry"),
    (
        'source=("$pkgname-$pkgver.tar.gz")',
        'source=("https://example.invalid/$pkgname-$pkgver.tar.gz")',
        "needs a real checksum",
    ),
    ("sha256sums=('SKIP')", "sha256sums=('SKIP' 'SKIP')", "2 entries for 1 sources"),
    ("sha256sums=('SKIP')", "sha256sums=('abc123')", "neither SKIP nor"),
    (
        '"$pkgdir/usr/share/applications/$_id.desktop"',
        '"/usr/share/applications/$_id.desktop"',
        "writes outside $pkgdir",
    ),
    ('--destdir="$pkgdir"', "", "without --destdir"),
    ("python -m installer", "sudo python -m installer", "sudo"),
    ("build() {", "_build() {", "build() is missing"),
    ("pkgdesc='Plan", "pkgdesc='mtpstudio: Plan", "should not start with the package name"),
    ("depends=(\n  'python'\n", "depends=(\n  'python 3'\n", "is not a package name"),
]


@pytest.mark.parametrize(("old", "new", "complaint"), BROKEN, ids=[c for _, _, c in BROKEN])
def test_each_lint_rule_catches_its_mistake(
    tmp_path: Path, old: str, new: str, complaint: str
) -> None:
    problems = lint(mutated(tmp_path, old, new))
    assert any(complaint in problem for problem in problems), problems


def test_bash_n_catches_a_syntax_error(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError):
        lint(mutated(tmp_path, "build() {", "build() {{ ("))


@pytest.mark.slow
def test_build_and_package_from_the_sdist_produce_the_package_tree(
    built_sdist: Path, tmp_path: Path
) -> None:
    srcdir, pkgdir = tmp_path / "src", tmp_path / "pkg"
    srcdir.mkdir()
    subprocess.run(["tar", "-xzf", str(built_sdist), "-C", str(srcdir)], check=True)
    # makepkg's way: source the PKGBUILD, run build() then package() under set -e.
    script = 'set -e; source "$1"; cd "$srcdir"; build; cd "$srcdir"; package'
    env = dict(os.environ, srcdir=str(srcdir), pkgdir=str(pkgdir))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # python: the venv's
    result = subprocess.run(
        ["bash", "-c", script, "makepkg", str(PKGBUILD)],
        env=env,
        capture_output=True,
        text=True,
        cwd=srcdir,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    files = {
        "/" + str(path.relative_to(pkgdir))
        for path in pkgdir.rglob("*")
        if path.is_file() and "site-packages" not in path.parts and "bin" not in path.parts
    }
    icons = {
        f"/usr/share/icons/hicolor/{size}x{size}/apps/{APP_ID}.png"
        for size in (16, 22, 24, 32, 48, 64, 128, 256, 512)
    }
    assert files == {
        constants.HELPER_INSTALL_PATH,
        f"{constants.POLICY_INSTALL_DIR}/{constants.POLICY_FILE_NAME}",
        f"/usr/share/applications/{APP_ID}.desktop",
        f"/usr/share/metainfo/{APP_ID}.metainfo.xml",
        f"/usr/share/icons/hicolor/scalable/apps/{APP_ID}.svg",
        *icons,
    }
    helper = pkgdir / constants.HELPER_INSTALL_PATH.lstrip("/")
    assert helper.stat().st_mode & 0o777 == 0o755
    assert helper.read_text() == (ROOT / "packaging" / "mtpstudio-helper").read_text()
    # The wheel went in through python-installer: the entry point and the packaged resources.
    (entry,) = [p for p in pkgdir.rglob("bin/mtpstudio")]
    assert "from mtpstudio.cli.main import main" in entry.read_text()
    (resources,) = [p for p in pkgdir.rglob("site-packages/mtpstudio/resources")]
    assert (resources / f"{APP_ID}.desktop").is_file()


def shellcheck(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("shellcheck")
    assert tool, "shellcheck is missing: scripts/test installs it"
    return subprocess.run([tool, *args], capture_output=True, text=True)


# makepkg sets srcdir/pkgdir, reads the variables itself and runs functions under errexit.
PKGBUILD_SHELLCHECK = ("--shell=bash", "--exclude=SC2034,SC2154,SC2164")


def test_shellcheck_passes_on_the_pkgbuild_and_install_sh() -> None:
    result = shellcheck(*PKGBUILD_SHELLCHECK, str(PKGBUILD))
    assert result.returncode == 0, result.stdout
    result = shellcheck(str(ROOT / "packaging" / "install.sh"))
    assert result.returncode == 0, result.stdout


def test_shellcheck_catches_an_unquoted_pkgdir(tmp_path: Path) -> None:
    broken = mutated(tmp_path, '"$pkgdir$_helper"', "$pkgdir$_helper")
    result = shellcheck(*PKGBUILD_SHELLCHECK, str(broken))
    assert result.returncode != 0
    assert "SC2086" in result.stdout
