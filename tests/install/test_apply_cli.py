"""``mtpstudio apply|revert|status`` against temporary roots (the helper's code in-process),
and user units in the isolated XDG config folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.helper_bench import make_root, snapshot

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.cli.main import main
from mtpstudio.core import paths
from mtpstudio.core.plan.io import plan_from_dict, save_plan

SESSION = "plasmawayland-llvmpipe-mtpstudio.desktop"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


PLASMA6 = Path(__file__).resolve().parent.parent / "fixtures" / "desktop" / "arch-plasma6"
NAME = "Plasma software rendering by mtpstudio (Wayland)"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Plasma 6's own session files (Arch's paths), no display manager."""
    root = make_root(tmp_path / "root")
    shutil.copytree(PLASMA6 / "usr/share", root / "usr/share")
    return root


def test_apply_status_revert_round_trip(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(root)
    code, out, err = run(capsys, "apply", "session", "--variant", "llvmpipe", "--root", str(root))
    assert code == 0, err
    assert f"created: {root}/usr/local/share/wayland-sessions/{SESSION}" in out
    assert f"pick '{NAME}'" in out
    assert "remembers the last session" in out
    assert "pick 'Plasma (Wayland)'" in out and "mtpstudio revert session" in out
    stored = json.loads(
        (root / "var/lib/mtpstudio/desktop-vram-plasmawayland-llvmpipe-mtpstudio.json").read_text()
    )
    assert stored["session"] == "plasmawayland-llvmpipe-mtpstudio" and "desktop_bytes" in stored

    code, out, _ = run(capsys, "status", "--root", str(root), "--json")
    groups = json.loads(out)["system"]["groups"]
    assert list(groups) == [f"session:{SESSION}"]
    assert {f["state"] for f in groups[f"session:{SESSION}"]["files"]} == {"installed"}

    code, out, _ = run(capsys, "status", "--root", str(root))
    assert code == 0 and "sha256" in out and SESSION in out

    code, out, err = run(capsys, "revert", "all", "--root", str(root))
    assert code == 0, err
    assert "removed:" in out
    assert snapshot(root) == before
    code, out, _ = run(capsys, "status", "--root", str(root))
    assert "System files (through the helper; record in" in out and "nothing installed" in out


def test_dry_run_prints_files_and_diff_and_writes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = root / "usr/local/share/wayland-sessions" / SESSION
    target.parent.mkdir(parents=True)
    target.write_text("[Desktop Entry]\nName=an older copy\n")
    before = snapshot(root)
    code, out, err = run(capsys, "apply", "session", "--dry-run", "--root", str(root))
    assert code == 0, err
    assert f"/usr/local/share/wayland-sessions/{SESSION} (changed)" in out
    assert "-Name=an older copy" in out and f"+Name={NAME}" in out
    assert "+export KWIN_COMPOSE=Q" in out  # the wrapper's content, as a new file
    assert "Dry run: nothing was written" in out and "After installing:" in out
    assert snapshot(root) == before


def dpkg_lists_sddm(root: Path, version: str, conf: str | None = None, text: str = "") -> None:
    """The root's dpkg database lists sddm ``version``; ``conf`` (root-relative) holds ``text``."""
    status = root / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(f"Package: sddm\nStatus: install ok installed\nVersion: {version}\n")
    if conf is not None:
        (root / conf).parent.mkdir(parents=True, exist_ok=True)
        (root / conf).write_text(text)


def test_debian_sddm_puts_the_session_in_usr_share(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dpkg_lists_sddm(root, "0.19.0-5")
    before = snapshot(root)
    code, out, err = run(capsys, "apply", "session", "--root", str(root))
    assert code == 0, err
    assert "sddm 0.19.0-5 (dpkg-query) reads /usr/share/wayland-sessions" in out
    assert (root / "usr/share/wayland-sessions" / SESSION).is_file()
    assert f"pick '{NAME}'" in out  # ends in " (Wayland)": 0.19 adds nothing
    assert run(capsys, "revert", "session", "--root", str(root))[0] == 0
    assert snapshot(root) == before


def test_sddm_reading_a_custom_folder_gets_the_session_there(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dpkg_lists_sddm(root, "0.21.0-1", "etc/sddm.conf.d/10-custom.conf",
                    "[Wayland]\nSessionDir=/opt/sessions\n")  # fmt: skip
    code, out, err = run(capsys, "apply", "session", "--root", str(root))
    assert code == 0, err
    assert "SessionDir in /etc/sddm.conf.d/10-custom.conf" in out
    assert (root / "opt/sessions" / SESSION).is_file()


def test_a_session_folder_sddm_cannot_read_is_said_plainly(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = "/usr/local/share/wayland-sessions,/usr/share/foo"
    dpkg_lists_sddm(root, "0.19.0-5", "etc/sddm.conf", f"[Wayland]\nSessionDir={both}\n")
    before = snapshot(root)
    code, _out, err = run(capsys, "apply", "session", "--root", str(root))
    assert code == 2 and err.count("\n") == 1
    assert "as one folder" in err and "set one folder" in err.lower() and "/etc/sddm.conf" in err
    assert snapshot(root) == before


def test_no_plasma_says_so_and_offers_what_applies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = make_root(tmp_path / "bare")
    code, _out, err = run(capsys, "apply", "session", "--root", str(bare))
    assert code == 2 and err.count("\n") == 1
    assert "Plasma's Wayland session is not installed here" in err
    assert "plasma-workspace-wayland" in err
    only_x11 = make_root(tmp_path / "x11")
    shutil.copytree(PLASMA6 / "usr/share/xsessions", only_x11 / "usr/share/xsessions")
    code, out, err = run(capsys, "apply", "session", "--dry-run", "--root", str(only_x11))
    assert code == 0, err
    assert "Session: x11-llvmpipe - Plasma's Wayland session is not installed here" in out
    code, _out, err = run(capsys, "apply", "session", "--variant", "llvmpipe", "--root",
                          str(only_x11))  # fmt: skip
    assert code == 2 and "--variant x11" in err


def test_an_empty_root_folder_is_a_fine_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copytree(PLASMA6 / "usr/share", empty / "usr/share")
    code, out, err = run(capsys, "apply", "session", "--root", str(empty))
    assert code == 0, err
    assert (empty / "usr/local/share/wayland-sessions" / SESSION).is_file()
    code, out, err = run(capsys, "status", "--root", str(tmp_path / "empty"))
    assert code == 0 and f"session:{SESSION}" in out


def test_igpu_variant_without_an_igpu(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(capsys, "apply", "session", "--variant", "igpu", "--root", str(root))
    assert code == 2 and "iGPU" in err and err.count("\n") == 1


def test_x11_variant_and_nvidia_profile(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(root)
    assert run(capsys, "apply", "session", "--variant", "x11", "--root", str(root))[0] == 0
    assert (root / "usr/local/share/xsessions/plasmax11-llvmpipe-mtpstudio.desktop").is_file()
    code, _out, err = run(capsys, "apply", "nvidia-profile", "--root", str(root))
    assert code == 0, err
    profile = root / "etc/nvidia/nvidia-application-profiles-rc.d/50-mtpstudio-desktop-vram.json"
    assert json.loads(profile.read_text())["profiles"][0]["settings"][0]["value"] == 0
    assert run(capsys, "revert", "nvidia-profile", "--root", str(root))[0] == 0
    assert not profile.exists()
    assert run(capsys, "revert", "all", "--root", str(root))[0] == 0
    assert snapshot(root) == before


# --------------------------------------------------------------------------------------------
# units


@pytest.fixture
def plan_file(tmp_path: Path) -> tuple[Path, Path]:
    binary = tmp_path / "engine" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", tmp_path / "models" / "q.gguf")
    plan = plan_from_dict({"model": {"path": str(model), "card": None},
                           "engine": {"binary": str(binary)}})  # fmt: skip
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    return path, binary


def verify(unit: Path, runtime: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [shutil.which("systemd-analyze") or "systemd-analyze"]
    env = dict(os.environ)
    if runtime is not None:
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        argv.append("--user")
    return subprocess.run([*argv, "verify", "--man=no", str(unit)], capture_output=True,
                          text=True, env=env, timeout=60, check=False)  # fmt: skip


def test_system_unit_through_the_helper(
    root: Path, plan_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(root)
    plan, _binary = plan_file
    code, _out, err = run(capsys, "apply", "unit", "--plan", str(plan), "--system",
                         "--account", "alice", "--root", str(root))  # fmt: skip
    assert code == 0, err
    unit = root / "etc/systemd/system/mtpstudio-llama.service"
    assert "User=alice" in unit.read_text()
    assert (root / "etc/mtpstudio/mtpstudio-llama.env").is_file()
    result = verify(unit)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stderr
    assert run(capsys, "revert", "unit", "--root", str(root))[0] == 0
    assert snapshot(root) == before


def test_system_unit_as_root_is_refused(
    root: Path, plan_file: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run(capsys, "apply", "unit", "--plan", str(plan_file[0]),
                          "--account", "root", "--root", str(root))  # fmt: skip
    assert code == 2 and "runs the engine as root is refused" in err


def test_user_unit_without_root(
    plan_file: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan, _binary = plan_file
    state_before = sorted(paths.state_dir().rglob("*")) if paths.state_dir().exists() else []
    code, out, err = run(capsys, "apply", "unit", "--plan", str(plan), "--user", "--dry-run")
    assert code == 0 and "Dry run" in out
    unit = paths.user_unit_dir() / "mtpstudio-llama.service"
    assert not unit.exists()
    code, out, err = run(capsys, "apply", "unit", "--plan", str(plan), "--user")
    assert code == 0, err
    assert unit.is_file() and "User=" not in unit.read_text()
    assert "daemon-reload" in out or "no user manager" in out
    result = verify(unit, runtime=tmp_path / "runtime")
    assert result.returncode == 0, result.stderr
    code, out, _ = run(capsys, "status", "--json")
    assert list(json.loads(out)["user"]["groups"]) == ["unit:mtpstudio-llama.service"]
    code, out, err = run(capsys, "revert", "unit")
    assert code == 0, err
    assert not unit.exists()
    state_after = sorted(paths.state_dir().rglob("*")) if paths.state_dir().exists() else []
    assert state_after == state_before  # the manifest and backups are gone again
    assert run(capsys, "apply", "unit", "--plan", str(plan), "--user", "--root", "/tmp")[0] == 2


def test_verify_session_on_this_machine(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No KDE session or GPU here: the verdict says 'unknown' and why, and exits 3."""
    assert run(capsys, "apply", "session", "--root", str(root))[0] == 0
    env = {k: v for k, v in os.environ.items() if k not in {"DBUS_SESSION_BUS_ADDRESS", "DISPLAY"}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", env)
        code, out, err = run(capsys, "verify-session", "--json", "--root", str(root))
        assert code == 3, err
        report = json.loads(out)
        assert report["software_rendering"] == "unknown" and report["exit_code"] == 3
        assert report["desktop_bytes_before"] == 0 and report["measured_before"]
        assert [g["tool"] for g in report["gl"]] == ["glxinfo", "eglinfo"]
        code, out, _ = run(capsys, "verify-session", "--root", str(root))
    lines = out.splitlines()
    assert code == 3 and lines[0].startswith("Software rendering: unknown - ")
    assert "Desktop VRAM now: 0 MiB, before: 0 MiB" in out
    assert not any(marker in out for marker in ("Error", "org.freedesktop", "GDBus"))


def test_status_on_a_fresh_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new account has ~/.config but no ~/.local/state yet: status says 'nothing' for it and
    still shows the system part; reading creates nothing."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    code, out, err = run(capsys, "status")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Helper: ")
    assert lines[1].startswith("System files (through the helper; record in /var/lib/mtpstudio)")
    state = home / ".local/state/mtpstudio"
    assert f"Your account's files (record in {state}): nothing installed" in lines
    code, out, err = run(capsys, "status", "--json")
    assert code == 0 and json.loads(out)["user"]["groups"] == {}
    assert not (home / ".local").exists()


def test_arch_plasma6_with_sddm_0_21(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Arch's files (recorded from sddm 0.21.0 and plasma-workspace 6.7.4): /usr/local first,
    and the wrapper runs Plasma 6's own Exec= (/usr/lib/plasma-dbus-run-session-if-needed)."""
    arch = make_root(tmp_path / "arch")
    shutil.copytree(PLASMA6, arch, dirs_exist_ok=True)
    code, out, err = run(capsys, "apply", "session", "--root", str(arch))
    assert code == 0, err
    assert "sddm 0.21.0-7 (pacman database) reads /usr/local/share/wayland-sessions, " in out
    assert (arch / "usr/local/share/wayland-sessions" / SESSION).is_file()
    wrapper = (arch / "usr/local/lib/mtpstudio/startplasma-wayland-llvmpipe-mtpstudio").read_text()
    assert "PLASMA_SESSION=(/usr/lib/plasma-dbus-run-session-if-needed " \
           "/usr/bin/startplasma-wayland)" in wrapper  # fmt: skip
    assert f"pick '{NAME}'" in out and "pick 'Plasma (Wayland)'" in out
    code, out, err = run(capsys, "apply", "session", "--variant", "x11", "--root", str(arch))
    assert code == 0, err
    assert (arch / "usr/local/share/xsessions/plasmax11-llvmpipe-mtpstudio.desktop").is_file()
    assert "pick 'Plasma software rendering by mtpstudio (X11)'" in out
    assert "pick 'Plasma (X11)'" in out


def test_an_installed_unit_is_replaced_only_with_replace_after_its_diff(
    plan_file: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25 item 4: a working unit is never replaced silently by another plan's."""
    plan, _binary = plan_file
    assert run(capsys, "apply", "unit", "--plan", str(plan), "--user")[0] == 0
    unit = paths.user_unit_dir() / "mtpstudio-llama.service"
    installed = unit.read_text()
    other = tmp_path / "other.json"
    data = json.loads(plan.read_text())
    data["runtime"]["ctx"] = 8192
    other.write_text(json.dumps(data))
    code, out, err = run(capsys, "apply", "unit", "--plan", str(other), "--user")
    assert code == 2
    assert "-c 8192" in out and "+++ " in out  # the diff is shown ...
    assert unit.read_text() == installed  # ... and nothing is written
    assert "a different version of" in err and "--user --replace" in err
    assert len(err.strip().splitlines()) == 1
    # the same plan again changes nothing, so it needs no --replace
    assert run(capsys, "apply", "unit", "--plan", str(plan), "--user")[0] == 0
    code, out, err = run(capsys, "apply", "unit", "--plan", str(other), "--user", "--replace")
    assert code == 0, err
    assert "-c 8192" in unit.read_text()
    assert run(capsys, "revert", "unit")[0] == 0


def test_a_system_unit_is_replaced_only_with_replace(
    root: Path, plan_file: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan, _binary = plan_file
    args = ("apply", "unit", "--system", "--account", "alice", "--root", str(root))
    assert run(capsys, *args, "--plan", str(plan))[0] == 0
    other = tmp_path / "other.json"
    data = json.loads(plan.read_text())
    data["server"]["port"] = 8099
    other.write_text(json.dumps(data))
    code, out, err = run(capsys, *args, "--plan", str(other))
    assert code == 2 and "--port 8099" in out and "--system --replace" in err
    unit = root / "etc/systemd/system/mtpstudio-llama.service"
    assert "--port 8099" not in unit.read_text()
    assert run(capsys, *args, "--plan", str(other), "--replace")[0] == 0
    assert "--port 8099" in unit.read_text()


def test_no_unit_for_the_demo_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25 item 4: a unit for a demo card would run `-m qwen3.6-35b-a3b-iq4_xs.gguf`."""
    plan = tmp_path / "demo.json"
    save_plan(plan_from_dict({"model": {"card": "qwen3.6-35b-a3b-iq4_xs"}}), plan)
    code, _out, err = run(capsys, "apply", "unit", "--plan", str(plan), "--user")
    assert code == 2
    assert "uses the demo card qwen3.6-35b-a3b-iq4_xs, not a model file" in err
    assert "Open the GGUF file first" in err
    assert not (paths.user_unit_dir() / "mtpstudio-llama.service").exists()
    for args in (("export-unit", "-o", str(tmp_path / "u.service")),
                 ("render", "--out", str(tmp_path / "out"))):  # fmt: skip
        code, _out, err = run(capsys, *args, "--plan", str(plan))
        assert code == 2 and "demo card" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json"]
