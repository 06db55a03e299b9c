"""The polkit policy's exec.path, PKGBUILD and install.sh all name the same helper path."""

from __future__ import annotations

import ast
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from support.pkgbuild_lint import read_pkgbuild

from mtpstudio.helper import constants

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "packaging" / constants.POLICY_FILE_NAME
PKGBUILD = ROOT / "packaging" / "PKGBUILD"
INSTALL_SH = ROOT / "packaging" / "install.sh"
LAUNCHER = ROOT / "packaging" / "mtpstudio-helper"
EXEC_PATH_KEY = "org.freedesktop.policykit.exec.path"


def policy_exec_paths(policy_xml: str) -> dict[str, str]:
    """Action id -> its exec.path annotation."""
    root = ET.fromstring(policy_xml)
    return {
        action.get("id", ""): annotate.text or ""
        for action in root.iter("action")
        for annotate in action.iter("annotate")
        if annotate.get("key") == EXEC_PATH_KEY
    }


def install_sh_value(script: str, name: str) -> str:
    """The value of a top-level ``NAME=value`` assignment in install.sh."""
    match = re.search(rf"^{name}=(\S+)$", script, re.M)
    assert match, f"install.sh sets no {name}="
    return match.group(1)


def pkgbuild_helper_destination(package_body: str, helper_var: str) -> list[str]:
    """The ``install`` lines of package() that put packaging/mtpstudio-helper somewhere."""
    return [
        line.strip()
        for line in package_body.splitlines()
        if "packaging/mtpstudio-helper" in line and line.strip().startswith("install")
        if f'"$pkgdir${helper_var}"' in line or f'"$pkgdir{helper_var}"' in line
    ]


def path_mismatches(policy_path: str, **others: str) -> list[str]:
    """Which of ``others`` name a different helper path than the policy."""
    return [f"{name}: {path}" for name, path in others.items() if path != policy_path]


def test_the_policy_names_the_helpers_installed_path() -> None:
    paths = policy_exec_paths(POLICY.read_text())
    assert paths == {constants.POLICY_ACTION_ID: constants.HELPER_INSTALL_PATH}


def test_pkgbuild_and_install_sh_install_the_helper_at_the_policys_exec_path() -> None:
    (policy_path,) = policy_exec_paths(POLICY.read_text()).values()
    facts = read_pkgbuild(PKGBUILD)
    pkgbuild_helper = read_helper_var(PKGBUILD)
    assert pkgbuild_helper_destination(facts.functions["package"], "_helper"), (
        "package() does not install packaging/mtpstudio-helper to $pkgdir$_helper"
    )
    script = INSTALL_SH.read_text()
    assert (
        path_mismatches(
            policy_path,
            PKGBUILD=pkgbuild_helper,
            install_sh=install_sh_value(script, "HELPER"),
        )
        == []
    )
    assert install_sh_value(script, "POLICY_DIR") == constants.POLICY_INSTALL_DIR
    assert f"{constants.POLICY_INSTALL_DIR}/$_id.helper.policy" in facts.functions["package"]


def read_helper_var(pkgbuild: Path) -> str:
    """PKGBUILD's ``_helper`` as bash reads it."""
    out = subprocess.run(
        ["bash", "-c", 'source "$1" >/dev/null; printf %s "$_helper"', "x", str(pkgbuild)],
        check=True,
        capture_output=True,
        text=True,
        cwd=pkgbuild.parent,
    )
    return out.stdout


def test_the_path_check_reports_a_diverging_path() -> None:
    assert path_mismatches("/usr/lib/a/h", PKGBUILD="/usr/lib/a/h", install_sh="/usr/local/h") == [
        "install_sh: /usr/local/h"
    ]
    policy = POLICY.read_text().replace(constants.HELPER_INSTALL_PATH, "/opt/elsewhere")
    assert policy_exec_paths(policy) != {constants.POLICY_ACTION_ID: constants.HELPER_INSTALL_PATH}


def test_the_launcher_is_the_isolated_mode_launcher_the_helper_documents() -> None:
    docstring = next(
        node.value.value
        for node in ast.parse((ROOT / "mtpstudio/helper/constants.py").read_text()).body
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and "#!/usr/bin/python3 -I" in str(node.value.value)
    )
    documented = [line.strip() for line in docstring.split("::", 1)[1].strip().splitlines()]
    assert LAUNCHER.read_text().splitlines() == documented
    assert LAUNCHER.stat().st_mode & 0o777 == 0o755
