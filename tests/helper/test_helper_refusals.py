"""Hostile input to the real helper: every refusal exits 2 with one line and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from support.helper_bench import (
    HELPER,
    SESSION,
    WAYLAND_DIR,
    helper_env,
    make_root,
    nvidia_payload,
    run_helper,
    session_files,
    session_payload,
    snapshot,
    unit_files,
    unit_payload,
)

from mtpstudio.helper.constants import MAX_PAYLOAD_BYTES

UNIT = "mtpstudio-llama.service"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "root", plasma=True)


def refused(result: subprocess.CompletedProcess[bytes], *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtpstudio-helper: refused: "), lines
    for word in words:
        assert word in lines[0], lines[0]
    assert result.stdout == b""
    return lines[0]


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["install-session", "../../etc/passwd.desktop"], "not an accepted name"),
        (["install-session", "a/b.desktop"], "not an accepted name"),
        (["install-session", "evil\n.desktop"], "not an accepted name"),
        (["install-session", "evil.desktop\n"], "not an accepted name"),
        (["install-session", "x..desktop"], "not an accepted name"),
        (["install-session", "plasma.service"], "not an accepted name"),
        (["install-unit", "../x.service"], "not an accepted name"),
        (["remove-unit", "/etc/passwd"], "not an accepted name"),
        (["install-nvidia-profile"], "exactly one NAME"),
        (["status", "x"], "no NAME"),
        (["frobnicate", "x"], "usage"),
        ([], "usage"),
    ],
)
def test_bad_command_lines(root: Path, args: list[str], why: str) -> None:
    before = snapshot(root)
    refused(run_helper(root, *args, payload=session_payload()), why)
    assert snapshot(root) == before


def test_root_is_refused_under_pkexec(root: Path) -> None:
    before = snapshot(root)
    result = run_helper(root, "status", env={"PKEXEC_UID": "1000"})
    refused(result, "--root", "pkexec")
    result = run_helper(root, "install-session", SESSION, payload=session_payload(),
                        env={"PKEXEC_UID": "1000"})  # fmt: skip
    refused(result, "pkexec")
    assert snapshot(root) == before


def test_fault_hook_is_off_under_pkexec(root: Path) -> None:
    """Under pkexec the test hook does nothing (and the root is refused before any write)."""
    from mtpstudio.helper.faults import Faults

    hook = Faults.from_environ({"PKEXEC_UID": "0", "MTPSTUDIO_HELPER_FAULT": "kill@1"})
    hook.point("temp-created")  # would SIGKILL this test process if it were armed


def test_ten_mib_of_input_is_refused_quickly(root: Path) -> None:
    before = snapshot(root)
    started = time.monotonic()
    result = run_helper(root, "install-session", SESSION, payload=b"x" * (10 * 1024 * 1024))
    refused(result, f"{MAX_PAYLOAD_BYTES // 1024} KiB")
    assert time.monotonic() - started < 30
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"sessions_dir": "/usr/local/share/wayland-sessions/../../../../etc"}, "not a session"),
        ({"sessions_dir": "/etc/systemd/system"}, "not a session folder"),
        ({"sessions_dir": "/usr/share/wayland-sessions"}, "only where SDDM reads nothing else"),
        ({"sessions_dir": "/usr/local/share/xsessions"}, "holds xsessions"),
        # text of its own is never taken: the helper writes the files itself
        ({"wrapper": "#!/bin/sh\nexec /home/eve/x\n"}, "does not take"),
        ({"desktop": "[Desktop Entry]\nExec=/bin/sh\n"}, "does not take"),
        ({"wrapper_name": "../../../bin/sh"}, "does not take"),
        ({"variant": "root-shell"}, "variant must be one of"),
        ({"variant": "x11-llvmpipe"}, "is called plasmax11-llvmpipe-mtpstudio.desktop"),
        ({"plasma_session": "/home/eve/plasma.desktop"}, "not in a wayland-sessions folder"),
        ({"plasma_session": "/usr/share/xsessions/plasmax11.desktop"}, "not in a wayland"),
        ({"plasma_session": WAYLAND_DIR + "/x-mtpstudio.desktop"}, "not a session file"),
        ({"plasma_session": "/usr/share/wayland-sessions/none.desktop"}, "does not exist"),
        ({"igpu_card": "/dev/dri/by-path/pci-0000:00:02.0-card"}, "takes no iGPU node"),
        ({"llvmpipe_threads": "4; rm -rf /"}, "whole number"),
        ({"llvmpipe_threads": 0}, "whole number"),
        ({"desktop_vram": [1, 2]}, "JSON object"),
    ],
)
def test_hostile_session_parameters(root: Path, override: dict[str, object], why: str) -> None:
    before = snapshot(root)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload(**override)), why)
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("card", "why"),
    [(None, "DRM node"), ("/home/eve/card", "DRM node"), ("/dev/dri/card0\n", "DRM node")],
)
def test_igpu_session_needs_a_drm_node(root: Path, card: object, why: str) -> None:
    from mtpstudio.core.desktop.session_files import SessionVariant

    payload = session_payload(SessionVariant.WAYLAND_IGPU, igpu_card=card)
    name = "plasmawayland-igpu-mtpstudio.desktop"
    refused(run_helper(root, "install-session", name, payload=payload), why)


def _plasma_file(root: Path, text: str | None = None, link_to: Path | None = None) -> None:
    target = root / "usr/share/wayland-sessions/plasma.desktop"
    target.unlink()
    if link_to is not None:
        target.symlink_to(link_to)
    else:
        target.write_text(text or "")


def test_the_plasma_command_comes_from_plasma_s_own_file(root: Path, tmp_path: Path) -> None:
    """The wrapper runs what the distribution's session file says, nothing handed over."""
    _plasma_file(root, "[Desktop Entry]\nName=Plasma\nExec=/home/eve/evil\n")
    refused(run_helper(root, "install-session", SESSION, payload=session_payload()),
            "does not start Plasma")  # fmt: skip
    elsewhere = tmp_path / "elsewhere.desktop"
    elsewhere.write_text("[Desktop Entry]\nExec=/home/eve/startplasma-wayland\n")
    _plasma_file(root, link_to=elsewhere)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload()),
            "cannot be read")  # fmt: skip
    assert not (root / WAYLAND_DIR.lstrip("/")).exists()


UNIT_NAME_EXISTS = "mtpstudio-shadow.service"


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"user": "root"}, "as root"),
        ({"user": "0"}, "as root"),
        ({"user": "%U"}, "plain account name"),
        ({"user": None}, "User="),
        ({"argv": ["opt/llama-server", "-m", "x"], "arg_groups": None}, "absolute"),
        ({"argv": ["+/opt/llama-server"], "arg_groups": None}, "absolute"),
        ({"argv": ["/opt/llama-server", "-m\nExecStartPre=/bin/sh"], "arg_groups": None},
         "control character"),
        ({"argv": ["/opt/llama-server", "a\rUser=root"], "arg_groups": None}, "control character"),
        ({"argv": []}, "absolute"),
        ({"arg_groups": [1]}, "cover"),
        ({"notes": [["-m", "x\n[Service]\nUser=root"]]}, "control character"),
        ({"warnings": ["x\u001b]0;title\u0007"]}, "control character"),
        ({"env": [["LD_PRELOAD", "/tmp/evil.so"]]}, "LD_PRELOAD"),
        ({"env": [["GCONV_PATH", "/tmp"]]}, "GCONV_PATH"),
        ({"env": [["A B", "x"]]}, "not a variable name"),
        ({"env_name": "../x.env"}, "not an accepted name"),
        ({"model_file": "../../x.gguf"}, "not a path"),
        ({"mlock": "yes"}, "true or false"),
        # keys mtpstudio's unit never has cannot even be asked for
        ({"unit": "[Service]\nExecStart=/bin/sh\n"}, "does not take"),
        ({"group": "disk"}, "does not take"),
        ({"supplementary_groups": "disk"}, "does not take"),
    ],
)  # fmt: skip
def test_hostile_unit_parameters(root: Path, override: dict[str, object], why: str) -> None:
    before = snapshot(root)
    refused(run_helper(root, "install-unit", UNIT, payload=unit_payload(**override)), why)
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("sshd.service", "does not start with 'mtpstudio-'"),
        ("dbus.service", "does not start with 'mtpstudio-'"),
        ("mtpstudio-.service", "does not start with"),
        ("mtpstudio-x@.service", "template"),
        (UNIT_NAME_EXISTS, f"/usr/lib/systemd/system/{UNIT_NAME_EXISTS} exists"),
    ],
)
def test_unit_names_that_would_override_another(root: Path, name: str, why: str) -> None:
    packaged = root / "usr/lib/systemd/system" / UNIT_NAME_EXISTS
    packaged.parent.mkdir(parents=True)
    packaged.write_text("[Service]\nExecStart=/usr/bin/true\n")
    before = snapshot(root)
    refused(run_helper(root, "install-unit", name, payload=unit_payload()), why)
    assert snapshot(root) == before


def test_the_installed_unit_has_no_group_line(root: Path) -> None:
    """Whatever was asked, the unit is mtpstudio's own shape: no Group=, no extra keys."""
    answer = run_helper(root, "install-unit", UNIT, payload=unit_payload())
    assert answer.returncode == 0, answer.stderr
    text = (root / "etc/systemd/system" / UNIT).read_text()
    assert "\nGroup=" not in text and "SupplementaryGroups=video render\n" in text
    assert text == unit_files()["unit"].text


def test_profile_parameters(root: Path) -> None:
    name, profile = nvidia_payload()
    data = json.loads(profile)
    refused(run_helper(root, "install-nvidia-profile", name,
                       payload=json.dumps({**data, "settings": "x"}).encode()),
            "does not take")  # fmt: skip
    refused(run_helper(root, "install-nvidia-profile", name,
                       payload=json.dumps({"processes": ["a b"]}).encode()),
            "not a process name")  # fmt: skip
    refused(run_helper(root, "install-nvidia-profile", "evil.json", payload=profile), "called")
    refused(run_helper(root, "install-nvidia-profile", name, payload=b"{not json"), "JSON")
    refused(run_helper(root, "install-nvidia-profile", name, payload=b""), "no content")


def test_symlinks_on_the_target_path_are_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "usr/local/share").mkdir(parents=True)
    (root / "usr/local/share/wayland-sessions").symlink_to(outside)
    before = snapshot(root)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload()),
            "/usr/local/share/wayland-sessions is a symbolic link")  # fmt: skip
    assert list(outside.iterdir()) == []
    assert snapshot(root) == before

    (root / "usr/local/share/wayland-sessions").unlink()
    (root / "usr/local/share/wayland-sessions").mkdir()
    victim = outside / "victim"
    victim.write_text("keep me\n")
    (root / "usr/local/share/wayland-sessions" / SESSION).symlink_to(victim)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload()),
            "is a symbolic link")  # fmt: skip
    assert victim.read_text() == "keep me\n"


def test_non_regular_targets_are_refused(root: Path) -> None:
    target = root / "usr/local/share/wayland-sessions" / SESSION
    target.mkdir(parents=True)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload()),
            "not a regular file")  # fmt: skip
    target.rmdir()
    os.mkfifo(target)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload()),
            "not a regular file")  # fmt: skip


def _paused_run(root: Path, tmp_path: Path, where: str) -> tuple[subprocess.Popen[bytes], Path]:
    pause = tmp_path / "pause"
    env = helper_env({"MTPSTUDIO_HELPER_FAULT": f"pause@{where}",
                      "MTPSTUDIO_HELPER_PAUSE": str(pause)})  # fmt: skip
    proc = subprocess.Popen(
        [*HELPER, "--root", str(root), "install-session", SESSION],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(session_payload())
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it again
    deadline = time.monotonic() + 30
    while not Path(str(pause) + ".paused").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the helper did not pause"
        time.sleep(0.01)
    return proc, pause


def _resume(proc: subprocess.Popen[bytes], pause: Path) -> tuple[int, bytes]:
    Path(str(pause) + ".resume").touch()
    _out, err = proc.communicate(timeout=30)
    return proc.returncode, err


@pytest.mark.parametrize("where", ["checked", "temp-written#3"])
def test_symlink_swapped_in_after_the_check(root: Path, tmp_path: Path, where: str) -> None:
    """The target file becomes a link to a file outside while the helper is paused."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    target = root / WAYLAND_DIR.lstrip("/") / SESSION
    proc, pause = _paused_run(root, tmp_path, where)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    target.symlink_to(victim)
    code, err = _resume(proc, pause)
    assert code == 2 and b"is a symbolic link" in err, err
    assert victim.read_text() == "keep me\n"
    assert target.is_symlink()  # left as found


def test_symlink_swapped_in_just_before_the_rename(root: Path, tmp_path: Path) -> None:
    """After the last check: rename replaces the link itself and never writes through it."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    target = root / WAYLAND_DIR.lstrip("/") / SESSION
    proc, pause = _paused_run(root, tmp_path, "before-rename#3")
    target.symlink_to(victim)
    code, err = _resume(proc, pause)
    assert code == 0, err
    assert victim.read_text() == "keep me\n"
    assert not target.is_symlink() and target.read_text() == session_files()["desktop"].text


def test_folder_swapped_for_a_link_after_the_check(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    sessions = root / WAYLAND_DIR.lstrip("/")
    sessions.mkdir(parents=True)
    proc, pause = _paused_run(root, tmp_path, "checked")
    sessions.rename(tmp_path / "moved")
    sessions.symlink_to(outside)
    code, err = _resume(proc, pause)
    assert code == 2 and b"symbolic link" in err, err
    assert list(outside.iterdir()) == []
