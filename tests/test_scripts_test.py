"""scripts/test, run from a new user's minimal shell, installs only the packages really missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_minimal_path_sees_installed_libraries() -> None:
    # ldconfig lives in /sbin, outside a user's PATH: the library check must still find it.
    env = {
        "HOME": os.environ.get("HOME", "/"),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "MTPSTUDIO_TEST_LIST_MISSING": "1",
    }
    out = subprocess.run(
        [str(REPO / "scripts" / "test")], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    listed = [line for line in out.stdout.splitlines() if line.strip()]
    dpkg = shutil.which("dpkg-query")
    assert dpkg, "scripts/test installs with apt; this test needs a Debian system"
    installed = [
        pkg
        for pkg in listed
        if "install ok installed"
        in subprocess.run(
            [dpkg, "-W", "-f=${Status}", pkg], capture_output=True, text=True, check=False
        ).stdout
    ]
    assert installed == [], f"scripts/test would reinstall packages already present: {installed}"
