"""Rendered files: golden copies, the real validators, and running the scripts for real.

Golden files live in tests/render/golden/; rewrite them with
``MTPSTUDIO_UPDATE_GOLDEN=1 pytest tests/render`` and review the diff.
``systemd-analyze`` (package systemd) and ``desktop-file-validate`` (desktop-file-utils) must
be installed: these tests check the files with the tools that will read them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.argv import launch_spec
from support.rendering import HOME, check_golden, layout
from support.systemd_checks import clean, tool, verify_unit

from mtpstudio.core.desktop.session_files import (
    SessionSettings,
    SessionVariant,
    render_nvidia_profile,
    render_reclaim_files,
    render_session_files,
    session_variant_for,
)
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.errors import RenderError
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.quoting.env_file import parse_env_file
from mtpstudio.core.quoting.systemd import parse_unit_file, split_systemd_command_line
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.render import UnitScope, render_service_files
from mtpstudio.helper.templating import template_environment

IGPU = "/dev/dri/by-path/pci-0000:00:02.0-card"


def demo_plan(**sections: Any) -> Plan:
    data: dict[str, Any] = {
        "model": {"path": "/home/alice/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"},
        "runtime": {"moe": "n_cpu_moe", "n_cpu_moe": 20},
    }
    data.update(sections)
    return plan_from_dict(data)


def ik_plan() -> Plan:
    return plan_from_dict(
        {
            "model": {"path": "/home/alice/My Models/GLM 4.5 Air (100% MoE) $pecial.gguf"},
            "engine": {"flavour": "ik"},
            "runtime": {"moe": "fit", "load_mode": "mlock", "threads": 8},
            "server": {"host": "0.0.0.0", "port": 8081},
            "outputs": {"service_name": "glm-air", "env_file": "glm-air.env",
                        "launch_script": "glm-air.sh"},
        }
    )  # fmt: skip


def spec_for(plan: Plan, binary: str, **kwargs: Any) -> LaunchSpec:
    build = documented_build(plan.engine.flavour, Path(binary))
    return launch_spec(plan, build, **kwargs)


def system_files(binary: str = "/opt/llama.cpp/bin/llama-server") -> dict[str, RenderedFile]:
    plan = demo_plan()
    spec = spec_for(plan, binary)
    return render_service_files(
        plan, spec, scope=UnitScope.SYSTEM, user="alice", layout=layout(plan, UnitScope.SYSTEM)
    )


def user_files(binary: str = "/opt/ik_llama.cpp/bin/llama-server") -> dict[str, RenderedFile]:
    plan = ik_plan()
    key = HOME / ".config/mtpstudio/server-api-key"
    spec = spec_for(plan, binary, api_key_file=key)
    return render_service_files(
        plan, spec, scope=UnitScope.USER, layout=layout(plan, UnitScope.USER)
    )


SESSION_SETTINGS = SessionSettings(igpu_card=IGPU)


# --------------------------------------------------------------------------------------------
# golden files


def test_service_files_golden() -> None:
    for prefix, files in (("system", system_files()), ("user", user_files())):
        for role, rendered in files.items():
            check_golden(f"{prefix}-{role}-{rendered.name}", rendered.text)


@pytest.mark.parametrize("variant", list(SessionVariant))
def test_session_files_golden(variant: SessionVariant) -> None:
    for rendered in render_session_files(variant, SESSION_SETTINGS).values():
        check_golden(f"session-{rendered.name}", rendered.text)


def test_nvidia_profile_golden_and_shape() -> None:
    rendered = render_nvidia_profile()
    check_golden(rendered.name, rendered.text)
    data = json.loads(rendered.text)
    procs = [rule["pattern"]["matches"] for rule in data["rules"]]
    assert procs == ["kwin_wayland", "Xwayland", "plasmashell"]
    assert all(rule["pattern"]["feature"] == "procname" for rule in data["rules"])
    (profile,) = data["profiles"]
    assert {r["profile"] for r in data["rules"]} == {profile["name"]}
    assert profile["settings"] == [{"key": "GLVidHeapReuseRatio", "value": 0}]
    assert rendered.install_path.parent == Path("/etc/nvidia/nvidia-application-profiles-rc.d")
    assert rendered.privileged


# --------------------------------------------------------------------------------------------
# what the files say


def test_system_unit_contents() -> None:
    files = system_files()
    unit = files["unit"]
    assert unit.name == "mtpstudio-llama.service" and unit.mode == 0o644 and unit.privileged
    assert unit.install_path == Path("/etc/systemd/system/mtpstudio-llama.service")
    entries = {(s, k): v for s, k, v in parse_unit_file(unit.text)}
    assert entries[("Service", "User")] == "alice"
    assert entries[("Service", "SupplementaryGroups")] == "video render"
    assert entries[("Service", "EnvironmentFile")] == "/etc/mtpstudio/mtpstudio-llama.env"
    assert entries[("Service", "Restart")] == "on-failure"
    assert entries[("Install", "WantedBy")] == "multi-user.target"
    for forbidden in ("PrivateDevices", "MemoryDenyWriteExecute"):  # hide the GPU, break CUDA
        assert ("Service", forbidden) not in entries
    assert entries[("Service", "DevicePolicy")] == "closed"  # with the GPU classes allowed
    assert ("Service", "LimitMEMLOCK") not in entries  # no mlock in the demo plan
    spec = spec_for(demo_plan(), "/opt/llama.cpp/bin/llama-server")
    assert split_systemd_command_line(entries[("Service", "ExecStart")]) == list(spec.argv)
    assert files["env"].install_path == Path("/etc/mtpstudio/mtpstudio-llama.env")
    assert parse_env_file(files["env"].text) == {}
    script = files["script"]
    assert script.mode == 0o755 and not script.privileged
    assert script.install_path == HOME / ".local/share/mtpstudio/mtpstudio-llama.sh"


def test_user_unit_contents() -> None:
    files = user_files()
    unit = files["unit"]
    assert unit.install_path == HOME / ".config/systemd/user/glm-air.service"
    assert not unit.privileged
    entries = {(s, k): v for s, k, v in parse_unit_file(unit.text)}
    assert ("Service", "User") not in entries and ("Service", "ProtectSystem") not in entries
    assert entries[("Install", "WantedBy")] == "default.target"
    assert "KWIN_COMPOSE" in entries[("Service", "UnsetEnvironment")]
    assert ("Service", "LimitMEMLOCK") not in entries  # would exceed the user manager's limit
    assert unit.warnings and "memory-lock limit" in unit.warnings[0]
    argv = split_systemd_command_line(entries[("Service", "ExecStart")])
    assert argv[argv.index("-m") + 1] == "/home/alice/My Models/GLM 4.5 Air (100% MoE) $pecial.gguf"
    assert argv[argv.index("--api-key-file") + 1] == str(HOME / ".config/mtpstudio/server-api-key")
    assert "--fit" in argv and "--mlock" in argv
    assert files["env"].install_path == HOME / ".config/mtpstudio/glm-air.env"


def test_mlock_system_unit_raises_the_limit() -> None:
    plan = demo_plan(runtime={"load_mode": "mlock"})
    spec = spec_for(plan, "/opt/llama.cpp/bin/llama-server")
    unit = render_service_files(plan, spec, user="alice", layout=layout(plan, UnitScope.SYSTEM))
    entries = {(s, k): v for s, k, v in parse_unit_file(unit["unit"].text)}
    assert entries[("Service", "LimitMEMLOCK")] == "infinity"


def test_env_file_holds_the_spec_environment() -> None:
    plan = demo_plan()
    spec = spec_for(plan, "/opt/llama.cpp/bin/llama-server")
    env = {"CUDA_VISIBLE_DEVICES": "0", "ODD": 'a "b" $c `d` \\e %f'}
    spec = LaunchSpec(spec.flavour, spec.binary, spec.flags, env=env)
    files = render_service_files(plan, spec, user="alice", layout=layout(plan, UnitScope.SYSTEM))
    assert parse_env_file(files["env"].text) == env


def test_render_refusals() -> None:
    plan = demo_plan()
    spec = spec_for(plan, "/opt/llama.cpp/bin/llama-server")
    with pytest.raises(RenderError, match="needs the account"):
        render_service_files(plan, spec, layout=layout(plan, UnitScope.SYSTEM))
    with pytest.raises(RenderError, match="not a valid user name"):
        render_service_files(plan, spec, user="bad user", layout=layout(plan, UnitScope.SYSTEM))
    with pytest.raises(RenderError, match="layout is for a system unit"):
        render_service_files(
            plan, spec, scope=UnitScope.USER, layout=layout(plan, UnitScope.SYSTEM)
        )
    bad = spec_for(plan, "/opt/llama.cpp/bin/llama-server", model_path=Path("/m/a\tb.gguf"))
    with pytest.raises(RenderError, match="control character"):
        render_service_files(plan, bad, user="alice", layout=layout(plan, UnitScope.SYSTEM))
    with pytest.raises(RenderError, match="iGPU"):
        render_session_files(SessionVariant.WAYLAND_IGPU)
    with pytest.raises(RenderError, match="does not honour quoting"):
        render_session_files(
            SessionVariant.WAYLAND_LLVMPIPE, SessionSettings(wrapper_dir="/opt/my apps")
        )


def test_session_choice_and_reclaim_files() -> None:
    assert session_variant_for(True) is SessionVariant.WAYLAND_IGPU
    assert session_variant_for(False) is SessionVariant.WAYLAND_LLVMPIPE
    assert session_variant_for(False, x11=True) is SessionVariant.X11_LLVMPIPE
    assert render_reclaim_files(DesktopReclaim.NONE) == {}
    assert set(render_reclaim_files(DesktopReclaim.NVIDIA_PROFILE)) == {"nvidia-profile"}
    llvm = render_reclaim_files(DesktopReclaim.LLVMPIPE)
    assert llvm["desktop"].name == "plasmawayland-llvmpipe-mtpstudio.desktop"
    assert llvm["desktop"].install_path == Path(
        "/usr/local/share/wayland-sessions/plasmawayland-llvmpipe-mtpstudio.desktop"
    )
    assert llvm["wrapper"].mode == 0o755 and llvm["wrapper"].privileged
    igpu = render_reclaim_files(DesktopReclaim.IGPU, SESSION_SETTINGS)
    assert "KWIN_DRM_DEVICES" in igpu["wrapper"].text
    x11 = render_reclaim_files(DesktopReclaim.LLVMPIPE, x11=True)
    assert x11["desktop"].install_path.parent == Path("/usr/local/share/xsessions")


def test_templates_are_strict() -> None:
    env = template_environment()
    with pytest.raises(Exception, match="undefined"):
        env.from_string("{{ missing }}").render()
    assert env.autoescape is False and env.keep_trailing_newline


# --------------------------------------------------------------------------------------------
# the real validators


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    binary = tmp_path / "bin dir" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    return binary


@pytest.mark.parametrize("scope", list(UnitScope))
def test_systemd_analyze_verify_accepts_the_units(scope: UnitScope, fake_binary: Path) -> None:
    files = (
        system_files(str(fake_binary))
        if scope is UnitScope.SYSTEM
        else user_files(str(fake_binary))
    )
    unit = fake_binary.parent.parent / files["unit"].name
    unit.write_text(files["unit"].text)
    result = verify_unit(unit, user=scope is UnitScope.USER)
    assert clean(result), result.stdout + result.stderr


@pytest.mark.parametrize(
    ("breakage", "why"),
    [
        (lambda t: t.replace("-c 32768", '-c "32768', 1), "unbalanced quote"),
        (lambda t: t.replace("Restart=on-failure", "Restart=sometimes"), "bad value"),
        (lambda t: t.replace("UMask=0077", "UMask=0077\nFrobnicate=yes"), "unknown key"),
        (lambda t: t.replace("Type=exec", "Type=exec\nExecStart=relative/path"), "relative"),
    ],
)
def test_systemd_analyze_verify_catches_a_broken_unit(
    breakage: Any, why: str, fake_binary: Path
) -> None:
    good = system_files(str(fake_binary))["unit"].text
    broken = breakage(good)
    assert broken != good, why
    unit = fake_binary.parent.parent / "broken.service"
    unit.write_text(broken)
    assert not clean(verify_unit(unit)), why


def test_systemd_analyze_verify_catches_a_missing_binary(tmp_path: Path) -> None:
    unit = tmp_path / "missing.service"
    unit.write_text(system_files(str(tmp_path / "nope" / "llama-server"))["unit"].text)
    result = verify_unit(unit)
    assert result.returncode != 0 and "not executable" in result.stderr


def validate_desktop(path: Path) -> list[str]:
    result = subprocess.run(
        [tool("desktop-file-validate"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


# Session files need DesktopNames= (it sets XDG_CURRENT_DESKTOP=KDE): the display managers
# define that key, the desktop-entry spec does not, so the validator always flags it.
DESKTOP_NAMES_COMPLAINT = "DesktopNames"


@pytest.mark.parametrize("variant", list(SessionVariant))
def test_desktop_file_validate_accepts_the_sessions(
    variant: SessionVariant, tmp_path: Path
) -> None:
    rendered = render_session_files(variant, SESSION_SETTINGS)["desktop"]
    path = tmp_path / rendered.name
    path.write_text(rendered.text)
    problems = [p for p in validate_desktop(path) if DESKTOP_NAMES_COMPLAINT not in p]
    assert problems == []
    without = tmp_path / ("plain-" + rendered.name)
    without.write_text(rendered.text.replace("DesktopNames=KDE\n", ""))
    assert validate_desktop(without) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda t: t.replace("mtpstudio\nTryExec", "mtpstudio $HOME\nTryExec", 1),
        lambda t: t.replace("mtpstudio\nTryExec", 'mtpstudio "open\nTryExec', 1),
        lambda t: t.replace("Type=Application", "Type=XSession"),
    ],
)
def test_desktop_file_validate_catches_a_broken_session(breakage: Any, tmp_path: Path) -> None:
    rendered = render_session_files(SessionVariant.WAYLAND_LLVMPIPE)["desktop"]
    broken = breakage(rendered.text.replace("DesktopNames=KDE\n", ""))
    assert broken != rendered.text.replace("DesktopNames=KDE\n", "")
    path = tmp_path / "broken.desktop"
    path.write_text(broken)
    assert validate_desktop(path) != []


# --------------------------------------------------------------------------------------------
# running the scripts


def recorder(path: Path) -> Path:
    """An executable that writes its arguments (NUL-separated) and LLAMA_* env to files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/bash\n"
        'printf "%s\\0" "$@" > "$RECORD_DIR/args"\n'
        'env | grep -E "^LLAMA_" > "$RECORD_DIR/env" || true\n'
    )
    path.chmod(0o755)
    return path


def run_script(script: RenderedFile, tmp: Path, *extra: str) -> tuple[list[str], str]:
    path = tmp / script.name
    path.write_text(script.text)
    path.chmod(script.mode)
    env = {**os.environ, "RECORD_DIR": str(tmp), "LLAMA_ARG_CTX_SIZE": "4", "LLAMA_API_KEY": "x"}
    subprocess.run([str(path), *extra], env=env, check=True, timeout=30)
    args = (tmp / "args").read_bytes().split(b"\0")[:-1]
    return [a.decode() for a in args], (tmp / "env").read_text()


def test_launch_script_runs_the_exact_command(tmp_path: Path) -> None:
    binary = recorder(tmp_path / "odd 'dir' (1)" / "llama-server")
    files = user_files(str(binary))
    args, env = run_script(files["script"], tmp_path, "--metrics", "two words")
    spec = spec_for(ik_plan(), str(binary), api_key_file=HOME / ".config/mtpstudio/server-api-key")
    assert args == [*spec.args, "--metrics", "two words"]
    assert env == ""  # LLAMA_ARG_* and LLAMA_API_KEY were dropped


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    model=st.text(
        alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/\0")
        | st.sampled_from(list(" \"'\\$%;`#*?&|<>()~")),
        min_size=1,
        max_size=30,
    )
)
def test_launch_script_round_trips_any_model_name(tmp_path: Path, model: str) -> None:
    binary = recorder(tmp_path / "bin" / "llama-server")
    plan = demo_plan(model={"path": f"/models/{model}"})
    spec = spec_for(plan, str(binary))
    files = render_service_files(plan, spec, user="alice", layout=layout(plan, UnitScope.SYSTEM))
    args, _ = run_script(files["script"], tmp_path)
    assert args == list(spec.args)
    entries = {(s, k): v for s, k, v in parse_unit_file(files["unit"].text)}
    assert split_systemd_command_line(entries[("Service", "ExecStart")]) == list(spec.argv)


def fake_session_tools(tmp: Path) -> tuple[SessionSettings, Path]:
    """Stand-ins for startplasma, the D-Bus helper and systemctl that record what they see."""
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "startplasma").write_text(
        "#!/bin/bash\n"
        'env | grep -E "^(KWIN_|LIBGL_|GALLIUM_|LP_|__EGL_|__GLX_)" | sort > "$RECORD_DIR/env"\n'
        'echo started >> "$RECORD_DIR/log"\n'
    )
    (bindir / "dbus-run").write_text('#!/bin/bash\necho dbus-run >> "$RECORD_DIR/log"\nexec "$@"\n')
    (bindir / "systemctl").write_text('#!/bin/bash\necho "systemctl $*" >> "$RECORD_DIR/log"\n')
    for f in bindir.iterdir():
        f.chmod(0o755)
    mesa = tmp / "50_mesa.json"
    mesa.write_text("{}")
    card = tmp / "by-path-card"
    card.symlink_to("/dev/null")  # a character device, like /dev/dri/cardN
    settings_ = SessionSettings(
        igpu_card=str(card),
        wayland_command=(str(bindir / "dbus-run"), str(bindir / "startplasma")),
        x11_command=(str(bindir / "startplasma"),),
        wrapper_dir=str(tmp / "wrappers"),
        mesa_egl_vendor_file=str(mesa),
        llvmpipe_threads=4,
    )
    return settings_, bindir


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        (
            SessionVariant.WAYLAND_LLVMPIPE,
            ["GALLIUM_DRIVER=llvmpipe", "KWIN_COMPOSE=Q", "LIBGL_ALWAYS_SOFTWARE=1",
             "LP_NUM_THREADS=4", "__EGL_VENDOR_LIBRARY_FILENAMES={mesa}",
             "__GLX_VENDOR_LIBRARY_NAME=mesa"],
        ),
        (
            SessionVariant.WAYLAND_IGPU,
            ["KWIN_DRM_DEVICES=/dev/null", "__EGL_VENDOR_LIBRARY_FILENAMES={mesa}",
             "__GLX_VENDOR_LIBRARY_NAME=mesa"],
        ),
        (
            SessionVariant.X11_LLVMPIPE,
            ["GALLIUM_DRIVER=llvmpipe", "LIBGL_ALWAYS_SOFTWARE=1", "LP_NUM_THREADS=4",
             "__EGL_VENDOR_LIBRARY_FILENAMES={mesa}", "__GLX_VENDOR_LIBRARY_NAME=mesa"],
        ),
    ],
)  # fmt: skip
def test_session_wrapper_sets_and_clears_the_variables(
    variant: SessionVariant, expected: list[str], tmp_path: Path
) -> None:
    settings_, bindir = fake_session_tools(tmp_path)
    wrapper = render_session_files(variant, settings_)["wrapper"]
    path = tmp_path / wrapper.name
    path.write_text(wrapper.text)
    path.chmod(wrapper.mode)
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith(("KWIN_", "LIBGL_"))}
    env = {**clean_env, "RECORD_DIR": str(tmp_path), "PATH": f"{bindir}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-n", str(path)], check=True)
    subprocess.run([str(path)], env=env, check=True, timeout=30)
    mesa = str(tmp_path / "50_mesa.json")
    assert (tmp_path / "env").read_text().split() == [e.format(mesa=mesa) for e in expected]
    log = (tmp_path / "log").read_text().splitlines()
    assert log[-1].startswith("systemctl --user unset-environment KWIN_COMPOSE")
    assert "started" in log
    assert ("dbus-run" in log) == (variant is not SessionVariant.X11_LLVMPIPE)


def test_igpu_wrapper_falls_back_when_the_igpu_is_gone(tmp_path: Path) -> None:
    settings_, bindir = fake_session_tools(tmp_path)
    (tmp_path / "by-path-card").unlink()
    wrapper = render_session_files(SessionVariant.WAYLAND_IGPU, settings_)["wrapper"]
    path = tmp_path / wrapper.name
    path.write_text(wrapper.text)
    path.chmod(wrapper.mode)
    env = {**os.environ, "RECORD_DIR": str(tmp_path), "PATH": f"{bindir}:{os.environ['PATH']}"}
    result = subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "not found" in result.stderr
    assert (tmp_path / "env").read_text() == ""  # Plasma started unchanged


def test_wrapper_says_so_when_plasma_is_gone(tmp_path: Path) -> None:
    settings_, bindir = fake_session_tools(tmp_path)
    (bindir / "dbus-run").unlink()  # the distribution's command is no longer installed
    wrapper = render_session_files(SessionVariant.WAYLAND_LLVMPIPE, settings_)["wrapper"]
    path = tmp_path / wrapper.name
    path.write_text(wrapper.text)
    path.chmod(wrapper.mode)
    env = {**os.environ, "RECORD_DIR": str(tmp_path)}
    result = subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "is missing" in result.stderr
    assert "mtpstudio revert session" in result.stderr and not (tmp_path / "log").exists()


@pytest.mark.parametrize("variant", list(SessionVariant))
def test_session_wrappers_pass_shellcheck(variant: SessionVariant, tmp_path: Path) -> None:
    tool = shutil.which("shellcheck")
    assert tool, "shellcheck is missing: scripts/test installs it"
    wrapper = render_session_files(variant, SESSION_SETTINGS)["wrapper"]
    path = tmp_path / wrapper.name
    path.write_text(wrapper.text)
    result = subprocess.run([tool, "-S", "warning", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
