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
    return make_root(tmp_path / "root")


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
    result = run_helper(root, "status", env={"PKEXEC_UID": "1000"})
    refused(result, "--root", "pkexec")
    result = run_helper(root, "install-session", SESSION, payload=session_payload(),
                        env={"PKEXEC_UID": "1000"})  # fmt: skip
    refused(result, "pkexec")
    assert not (root / "usr").exists()


def test_fault_hook_is_off_under_pkexec(root: Path) -> None:
    """Under pkexec the test hook does nothing (and the root is refused before any write)."""
    from mtpstudio.helper.faults import Faults

    hook = Faults.from_environ({"PKEXEC_UID": "0", "MTPSTUDIO_HELPER_FAULT": "kill@1"})
    hook.point("temp-created")  # would SIGKILL this test process if it were armed


def test_ten_mib_of_input_is_refused_quickly(root: Path) -> None:
    started = time.monotonic()
    result = run_helper(root, "install-session", SESSION, payload=b"x" * (10 * 1024 * 1024))
    refused(result, f"{MAX_PAYLOAD_BYTES // 1024} KiB")
    assert time.monotonic() - started < 30
    assert snapshot(root) == {"var": snapshot(root)["var"], "var/lib": snapshot(root)["var/lib"]}


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"sessions_dir": "/usr/local/share/wayland-sessions/../../../../etc"}, "not a session"),
        ({"sessions_dir": "/etc/systemd/system"}, "not a session folder"),
        ({"sessions_dir": "/usr/share/wayland-sessions"}, "only where SDDM reads nothing else"),
        ({"wrapper_name": "../../../bin/sh"}, "not an accepted name"),
        ({"wrapper_name": "x\ny"}, "not an accepted name"),
        ({"desktop": "[Desktop Entry]\nType=Application\nName=x\nExec=/bin/sh\n"}, "wrapper"),
        ({"wrapper": "#!/usr/bin/python3\nprint()\n"}, "#!/bin/bash"),
        ({"desktop_vram": [1, 2]}, "JSON object"),
    ],
)
def test_hostile_session_payloads(root: Path, override: dict[str, object], why: str) -> None:
    before = snapshot(root)
    refused(run_helper(root, "install-session", SESSION, payload=session_payload(**override)), why)
    assert snapshot(root) == before


def _desktop_with(extra: str) -> str:
    return session_files()["desktop"].text.replace(
        "DesktopNames=KDE\n", "DesktopNames=KDE\n" + extra
    )


@pytest.mark.parametrize(
    ("desktop", "why"),
    [
        (_desktop_with("X-SDDM-Env=LD_PRELOAD=/tmp/x.so\n"), "X-SDDM-Env"),
        (_desktop_with("Exec=/bin/sh\n"), "twice"),
        (_desktop_with("[Other]\nA=b\n"), "group"),
        (session_files()["desktop"].text.replace("TryExec=/usr/local", "TryExec=/opt"), "TryExec"),
    ],
)
def test_session_files_that_do_not_validate(root: Path, desktop: str, why: str) -> None:
    refused(run_helper(root, "install-session", SESSION, payload=session_payload(desktop=desktop)),
            why)  # fmt: skip


UNIT_TEXT = unit_files()["unit"].text


def inject(value: str) -> str:
    """``value`` appended to the Description= line, as a renderer without quoting would."""
    start = UNIT_TEXT.index("\nDescription=") + 1
    end = UNIT_TEXT.index("\n", start)
    return UNIT_TEXT[:end] + value + UNIT_TEXT[end:]


@pytest.mark.parametrize(
    ("unit", "why"),
    [
        # a newline injected into a value becomes a line of its own: caught either way
        (inject("\nExecStartPre=/bin/sh -c 'id'"), "ExecStartPre"),
        (inject("\n[Service]\nUser=root\n[Unit]"), "User= twice"),
        (inject("\nUser=root"), "User= in [Unit]"),
        (inject("\rUser=root"), "control character '\\r'"),
        (inject("\x00User=root"), "control character"),
        (UNIT_TEXT.replace("User=alice", "User=root"), "as root"),
        (UNIT_TEXT.replace("User=alice\n", ""), "User="),
        (UNIT_TEXT.replace("ExecStart=/opt/", "ExecStart=opt/"), "absolute"),
        (UNIT_TEXT.replace("ExecStart=/opt/", "ExecStart=+/opt/"), "absolute"),
        (UNIT_TEXT.replace("ExecStart=", "ExecStartX="), "ExecStartX"),
        (UNIT_TEXT.replace("[Install]", "[Timer]"), "[Timer]"),
        (UNIT_TEXT + "ExecStart=/bin/true\n", "Install"),
        (UNIT_TEXT.replace("EnvironmentFile=/etc/mtpstudio/", "EnvironmentFile=/tmp/"),
         "EnvironmentFile"),
        (UNIT_TEXT.replace("-c 32768", '-c "32768'), "absolute command"),
        ("not a unit at all", "does not parse"),
    ],
)  # fmt: skip
def test_units_that_do_not_validate(root: Path, unit: str, why: str) -> None:
    assert unit != UNIT_TEXT
    before = snapshot(root)
    refused(run_helper(root, "install-unit", UNIT, payload=unit_payload(unit=unit)), why)
    assert snapshot(root) == before


def test_env_file_and_profile_checks(root: Path) -> None:
    env = unit_files()["env"].text + 'LD_PRELOAD="/tmp/evil.so"\n'
    refused(run_helper(root, "install-unit", UNIT, payload=unit_payload(env=env)), "LD_PRELOAD")
    refused(run_helper(root, "install-unit", UNIT, payload=unit_payload(env_name="../x.env")),
            "not an accepted name")  # fmt: skip
    name, profile = nvidia_payload()
    data = json.loads(profile)
    data["profiles"][0]["settings"].append({"key": "GLShowGraphicsOSD", "value": 1})
    refused(run_helper(root, "install-nvidia-profile", name, payload=json.dumps(data).encode()),
            "key")  # fmt: skip
    refused(run_helper(root, "install-nvidia-profile", name, payload=b"{not json"), "not JSON")
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
