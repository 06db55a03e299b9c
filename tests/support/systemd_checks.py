"""The real validators the unit tests run: ``systemd-analyze verify`` and ``security``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

TARGET = 3.5  # the highest exposure score a rendered unit may have
SCORE = re.compile(r"Overall exposure level for \S+: (\d+\.\d)")


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (scripts/test installs it)", pytrace=False)
    return found


def verify_unit(path: Path, *, user: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [tool("systemd-analyze")]
    env = dict(os.environ)
    if user:
        runtime = path.parent / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        argv.append("--user")
    argv += ["verify", "--man=no", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


def clean(result: subprocess.CompletedProcess[str]) -> bool:
    """verify exits 0 on unknown keys and bad values (it only warns): demand silence too."""
    return result.returncode == 0 and not (result.stdout + result.stderr).strip()


def exposure(unit: Path) -> tuple[float, str]:
    result = subprocess.run(
        [tool("systemd-analyze"), "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    found = SCORE.search(result.stdout + result.stderr)
    assert found, result.stdout + result.stderr
    return float(found.group(1)), result.stdout
