"""The wheel carries the templates and resources, and the app runs from it alone."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from support.packaged_env import clean_env
from support.servers import engine_binary

from devkit.zero_gguf import zero_gguf_for_card

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def data_files(folder: str) -> set[str]:
    """Every file below ``folder`` of the source tree (no bytecode), as a wheel names it."""
    base = ROOT / folder
    return {
        f"mtpstudio/{folder}/{path.relative_to(base).as_posix()}"
        for path in base.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_carries_every_template_and_resource(built_wheel: Path) -> None:
    names = set(zipfile.ZipFile(built_wheel).namelist())
    wanted = data_files("templates") | data_files("resources")
    assert wanted - names == set()
    assert {
        "mtpstudio/resources/io.github.mtpstudio.desktop",
        "mtpstudio/resources/io.github.mtpstudio.metainfo.xml",
        "mtpstudio/resources/icons/png/mtpstudio-512.png",
        "mtpstudio/templates/launch.sh.j2",
    } <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(built_wheel).read(entry_points).decode()
    assert "mtpstudio = mtpstudio.cli.main:main" in text


def test_the_wheel_ships_no_development_kit(built_wheel: Path) -> None:
    # devkit/ (the GPU kit, the zero-weight GGUFs, the local Hub) stays in the repository: no
    # module of it is in the wheel, under its own name or inside mtpstudio.
    names = zipfile.ZipFile(built_wheel).namelist()
    kit = {p.name for p in (ROOT / "devkit").glob("*.py") if p.name != "__init__.py"}
    assert len(kit) > 10  # the check really knows the kit's modules
    assert [n for n in names if n.startswith("devkit/") or n.rsplit("/", 1)[-1] in kit] == []
    assert {n.split("/", 1)[0] for n in names} == {"mtpstudio", f"mtpstudio-{VERSION}.dist-info"}


def test_the_sdist_carries_what_pkgbuild_and_install_sh_install(built_sdist: Path) -> None:
    with tarfile.open(built_sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    wanted = {
        "packaging/PKGBUILD",
        "packaging/install.sh",
        "packaging/mtpstudio-helper",
        "packaging/io.github.mtpstudio.helper.policy",
        "resources/io.github.mtpstudio.desktop",
        "resources/io.github.mtpstudio.metainfo.xml",
        "resources/icons/mtpstudio.svg",
    }
    assert wanted - names == set()


@pytest.mark.slow
def test_the_app_runs_from_a_fresh_venv_with_only_the_wheel(
    built_wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(built_wheel),
        ],
        check=True,
        capture_output=True,
        env=clean_env(),
    )
    work = tmp_path / "elsewhere"  # far from the source tree, so nothing is read from it
    work.mkdir()
    env = clean_env(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        QT_QPA_PLATFORM="offscreen",
    )

    def mtpstudio(*args: str) -> str:
        result = subprocess.run(
            [str(venv / "bin" / "mtpstudio"), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert mtpstudio("--version").strip() == f"mtpstudio {VERSION}"
    plan = mtpstudio("plan", "--demo", "--save", str(work / "plan.json"))
    assert "Verdict:" in plan and "llama-server" in plan
    # a unit is only rendered for a model file (the demo card's full-size zero-weight GGUF) and
    # an engine on this computer (the test bench's build), to run as an account other than root
    model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", work / "Qwen3.6-35B-A3B-IQ4_XS.gguf")
    mtpstudio("plan", "--model", str(model), "--engine", str(engine_binary("upstream")),
              "--save", str(work / "model-plan.json"))  # fmt: skip
    mtpstudio("render", "--plan", str(work / "model-plan.json"), "--out", str(work / "export"),
              "--user", "alice")  # fmt: skip
    rendered = {path.name for path in (work / "export").rglob("*") if path.is_file()}
    assert any(name.endswith(".service") for name in rendered), rendered

    where = subprocess.run(
        [str(python), "-I", "-c", "import mtpstudio; print(mtpstudio.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(venv), where
