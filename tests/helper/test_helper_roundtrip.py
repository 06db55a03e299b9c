"""Install -> status -> revert with the real helper: byte-identical trees, real validators."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.helper_bench import (
    SESSION,
    install_plasma,
    make_root,
    nvidia_payload,
    run_helper,
    session_files,
    session_payload,
    snapshot,
    unit_payload,
)
from support.systemd_checks import tool

from mtpstudio.core.desktop.session_files import SessionVariant
from mtpstudio.helper.constants import (
    HELPER_INSTALL_PATH,
    POLICY_ACTION_ID,
    POLICY_FILE_NAME,
    POLICY_INSTALL_DIR,
)

ROOT = Path(__file__).resolve().parents[2]
UNIT = "mtpstudio-llama.service"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root with files already where mtpstudio will write (they must come back as they were)."""
    root = make_root(tmp_path / "root", plasma=True)
    for rel, text, mode in (
        ("etc/systemd/system/mtpstudio-llama.service", "[Service]\nExecStart=/bin/old\n", 0o640),
        ("etc/nvidia/nvidia-application-profiles-rc.d/other.json", "{}\n", 0o644),
        ("usr/local/share/wayland-sessions/plasma.desktop", "[Desktop Entry]\nName=P\n", 0o644),
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
    return root


def ok(result: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def test_install_status_revert_is_byte_identical(root: Path, tmp_path: Path) -> None:
    before = snapshot(root)
    binary = tmp_path / "llama-server"
    ok(run_helper(root, "install-session", SESSION, payload=session_payload(vram={"mib": 1})))
    x11 = session_files(SessionVariant.X11_LLVMPIPE)["desktop"].name
    ok(run_helper(root, "install-session", x11,
                  payload=session_payload(SessionVariant.X11_LLVMPIPE)))  # fmt: skip
    answer = ok(run_helper(root, "install-unit", UNIT, payload=unit_payload(str(binary))))
    actions = {c["path"]: c["action"] for c in answer["changes"]}  # type: ignore[attr-defined]
    assert actions[f"{root}/etc/systemd/system/{UNIT}"] == "replaced"
    assert actions[f"{root}/etc/mtpstudio/mtpstudio-llama.env"] == "created"
    name, profile = nvidia_payload()
    ok(run_helper(root, "install-nvidia-profile", name, payload=profile))
    # installing the same thing twice keeps the first backup (the file from before mtpstudio)
    ok(run_helper(root, "install-unit", UNIT, payload=unit_payload(str(binary))))

    status = ok(run_helper(root, "status"))
    groups = status["groups"]
    assert isinstance(groups, dict)
    assert sorted(groups) == [
        f"nvidia-profile:{name}",
        f"session:{SESSION}",
        f"session:{x11}",
        f"unit:{UNIT}",
    ]
    unit_state = groups[f"unit:{UNIT}"]["files"]
    assert [f["state"] for f in unit_state] == ["installed", "installed"]
    assert [f["replaced_a_file"] for f in unit_state] == [False, True]
    text = (root / "etc/systemd/system" / UNIT).read_bytes()
    assert unit_state[1]["sha256"] == hashlib.sha256(text).hexdigest()
    assert (root / "etc/systemd/system" / UNIT).stat().st_mode & 0o777 == 0o644

    for key in list(groups):
        group, _, file_name = key.partition(":")
        ok(run_helper(root, f"remove-{group}", file_name))
    assert snapshot(root) == before
    assert ok(run_helper(root, "status"))["groups"] == {}
    assert snapshot(root) == before  # status writes nothing


def test_revert_refuses_a_file_changed_since(root: Path) -> None:
    ok(run_helper(root, "install-session", SESSION, payload=session_payload()))
    target = root / "usr/local/share/wayland-sessions" / SESSION
    target.write_text(target.read_text() + "# edited by hand\n")
    result = run_helper(root, "remove-session", SESSION)
    assert result.returncode == 2 and b"was changed after mtpstudio installed it" in result.stderr
    assert target.read_text().endswith("# edited by hand\n")
    assert (
        json.loads(run_helper(root, "status").stdout)["groups"][f"session:{SESSION}"]["files"][1][
            "state"
        ]
        == "changed"
    )


def test_remove_what_was_never_installed(root: Path) -> None:
    before = snapshot(root)
    result = run_helper(root, "remove-unit", UNIT)
    assert result.returncode == 2 and b"has not installed unit" in result.stderr
    assert snapshot(root) == before


def test_without_var_lib_the_root_is_refused(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    install_plasma(bare)
    before = snapshot(bare)
    result = run_helper(bare, "install-session", SESSION, payload=session_payload())
    assert result.returncode == 2 and b"/var/lib does not exist" in result.stderr
    assert snapshot(bare) == before


# --------------------------------------------------------------------------------------------
# the real validators on what the helper installed

DESKTOP_NAMES_COMPLAINT = "DesktopNames"  # the display managers' key, unknown to the spec


@pytest.mark.parametrize("variant", list(SessionVariant))
def test_installed_session_files_pass_desktop_file_validate(
    root: Path, variant: SessionVariant
) -> None:
    files = session_files(variant)
    payload = session_payload(variant)
    ok(run_helper(root, "install-session", files["desktop"].name, payload=payload))
    installed = root / str(files["desktop"].install_path).lstrip("/")
    assert installed.read_text() == files["desktop"].text  # what mtpstudio showed, to the byte
    wrapper = root / str(files["wrapper"].install_path).lstrip("/")
    assert wrapper.read_text() == files["wrapper"].text
    result = subprocess.run([tool("desktop-file-validate"), str(installed)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and DESKTOP_NAMES_COMPLAINT not in line
    ]
    assert problems == []
    assert os.access(wrapper, os.X_OK)
    assert subprocess.run(["bash", "-n", str(wrapper)], check=False).returncode == 0


def test_plasma_own_session_file_fails_the_same_check(tmp_path: Path) -> None:
    """Plasma's plasma.desktop (no Type=, §1.3) draws a complaint; ours does not (see above)."""
    plasma = tmp_path / "plasma.desktop"
    plasma.write_text(
        "[Desktop Entry]\n"
        "Exec=/usr/lib/plasma-dbus-run-session-if-needed /usr/bin/startplasma-wayland\n"
        "TryExec=/usr/bin/startplasma-wayland\nDesktopNames=KDE\nName=Plasma (Wayland)\n"
        "Comment=Plasma by KDE\nX-KDE-PluginInfo-Version=6.3.5\n"
    )
    result = subprocess.run([tool("desktop-file-validate"), str(plasma)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode != 0 and '"Type"' in out


def test_installed_unit_passes_systemd_analyze_verify(root: Path, tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    ok(run_helper(root, "install-unit", UNIT, payload=unit_payload(str(binary))))
    unit = root / "etc/systemd/system" / UNIT
    result = subprocess.run(
        [tool("systemd-analyze"), "verify", "--man=no", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stderr
    broken = tmp_path / "broken.service"
    broken.write_text(unit.read_text().replace(str(binary), str(tmp_path / "missing")))
    result = subprocess.run([tool("systemd-analyze"), "verify", "--man=no", str(broken)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode != 0


# --------------------------------------------------------------------------------------------
# the polkit policy


def test_policy_parses_and_points_at_the_installed_helper() -> None:
    path = ROOT / "packaging" / POLICY_FILE_NAME
    tree = ET.parse(path)
    actions = tree.getroot().findall("action")
    assert tree.getroot().tag == "policyconfig" and len(actions) == 1
    action = actions[0]
    assert action.get("id") == POLICY_ACTION_ID
    annotations = {a.get("key"): a.text for a in action.findall("annotate")}
    assert annotations["org.freedesktop.policykit.exec.path"] == HELPER_INSTALL_PATH
    defaults = action.find("defaults")
    assert defaults is not None
    assert {d.tag: d.text for d in defaults} == {
        "allow_any": "auth_admin",
        "allow_inactive": "auth_admin",
        "allow_active": "auth_admin_keep",
    }
    assert POLICY_INSTALL_DIR == "/usr/share/polkit-1/actions"
    assert "<!DOCTYPE policyconfig" in path.read_text()


def test_policy_check_can_fail() -> None:
    text = (ROOT / "packaging" / POLICY_FILE_NAME).read_text()
    wrong = text.replace(HELPER_INSTALL_PATH, "/usr/local/bin/mtpstudio-helper")
    paths = [a.text for a in ET.fromstring(wrong.encode()).iter("annotate")]
    assert paths and paths[0] != HELPER_INSTALL_PATH


def test_console_script_points_at_the_helper() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["mtpstudio-helper"] == "mtpstudio.helper.main:main"
    assert Path(HELPER_INSTALL_PATH).name == "mtpstudio-helper"


def test_the_check_before_the_start_installs_verifies_and_refuses_hostile_values(
    root: Path, tmp_path: Path
) -> None:
    """The unit's ExecStartPre= (mtpstudio prestart) comes through the real helper built from
    its checked values, passes systemd-analyze verify, and a payload that tries to slip a
    command or a word into it is refused."""
    import sys

    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    check = {"python": sys.executable, "needs": [["CUDA0", 10184, 1024]], "on_short": "refuse",
             "engine_size": 15547992, "engine_mtime_ns": 1796170146149566164,
             "flags": ["--fit", "--n-cpu-moe"], "host": "127.0.0.1", "port": 8080,
             "loads": [["CUDA0", 9330], ["CPU", 12575]]}  # fmt: skip
    ok(run_helper(root, "install-unit", UNIT, payload=unit_payload(str(binary), prestart=check)))
    unit = root / "etc/systemd/system" / UNIT
    text = unit.read_text()
    pre = next(line for line in text.splitlines() if line.startswith("ExecStartPre="))
    assert pre.startswith(f"ExecStartPre={sys.executable} -m mtpstudio prestart --unit {UNIT} ")
    assert f"--need CUDA0=10184,1024 --engine {binary} --engine-size 15547992" in pre
    post = next(line for line in text.splitlines() if line.startswith("ExecStartPost="))
    assert post == (
        f"ExecStartPost=-{sys.executable} -m mtpstudio poststart --unit {UNIT} --host "
        "127.0.0.1 --port 8080 --load CUDA0=9330 --load CPU=12575"
    )
    result = subprocess.run(
        [tool("systemd-analyze"), "verify", "--man=no", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stderr
    for hostile in (
        {**check, "python": "/bin/sh -c 'rm -rf /'"},
        {**check, "python": "relative/python"},
        {**check, "needs": [["CUDA0;reboot", 1, 1]]},
        {**check, "needs": [["CUDA0", -1, 0]]},
        {**check, "on_short": "ignore"},
        {**check, "flags": ["--ok", "; reboot"]},
        {k: v for k, v in check.items() if k != "engine_mtime_ns"},  # a size without its time
        {**check, "argv": ["/bin/true"]},
        {**check, "host": "127.0.0.1 --load CPU=1"},
        {**check, "host": "$(reboot)"},
        {**check, "port": "8080; reboot"},
        {**check, "port": 0},
        {**check, "loads": [["CUDA0", 1], ["CUDA0", 2]]},
        {**check, "loads": [["/dev/sda", 1]]},
        {**check, "loads": [["CPU", "1;reboot"]]},
    ):
        refused = run_helper(root, "install-unit", UNIT,
                             payload=unit_payload(str(binary), prestart=hostile))  # fmt: skip
        assert refused.returncode != 0, hostile
    assert unit.read_text() == text  # nothing changed by a refused install
