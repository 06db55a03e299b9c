"""The sdist and the wheel, built once per session the way PKGBUILD builds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build`` output: the sdist, and the wheel built from that sdist."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return out


@pytest.fixture(scope="session")
def built_wheel(dist_dir: Path) -> Path:
    (wheel,) = dist_dir.glob("mtpstudio-*.whl")
    return wheel


@pytest.fixture(scope="session")
def built_sdist(dist_dir: Path) -> Path:
    (sdist,) = dist_dir.glob("mtpstudio-*.tar.gz")
    return sdist
