"""The check before the engine starts (``mtpstudio prestart``, the unit's ``ExecStartPre=``):
recorded NVML readings with too little and with enough free memory, the plan's choice between
refusing and warning, a changed engine build (two real builds) named before the engine starts,
and the helper reading the check back from an installed unit and refusing one edited by hand."""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fixtures.detect.fake_nvml import FakeNvml, load_recording
from fixtures.detect.machines import build_machine
from support.cli import run_cli
from support.plans import published_resolved
from support.rendering import unit_plan_text
from support.servers import EngineMissingError, engine_binary
from support.systemd_checks import tool

from mtpstudio.core.detect.nvidia import detect_nvidia
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.service.prestart import check_engine, check_vram
from mtpstudio.core.service.render import UnitScope, render_service_files
from mtpstudio.core.service.service_files import unit_plan
from mtpstudio.helper.prestart_shape import PrestartShape
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.unit_shape import check_installed_unit

MIB = 1024**2
KDE = "rtx4070super-kde.json"  # llama-server running: 1,470 MiB free


def reading(tmp_path: Path, free_mib: int | None = None) -> object:
    """The recorded RTX 4070 SUPER under KDE (its processes named from the recorded /proc),
    its free memory set to ``free_mib`` where given."""
    recording = copy.deepcopy(load_recording(KDE))
    device = recording["devices"][0]
    if free_mib is not None:
        total = device["nvmlDeviceGetMemoryInfo_v2"]["total"]
        reserved = device["nvmlDeviceGetMemoryInfo_v2"]["reserved"]
        device["nvmlDeviceGetMemoryInfo_v2"]["free"] = free_mib * MIB
        device["nvmlDeviceGetMemoryInfo_v2"]["used"] = total - reserved - free_mib * MIB
    machine = tmp_path / "machine"
    roots = build_machine(
        "desktop_amd_igpu_nvidia", machine / str(len(list(tmp_path.glob("machine/*"))))
    )
    return detect_nvidia(FakeNvml(recording), roots.proc_root)


def shape(on_short: str = "refuse", desktop_mib: int = 1024) -> PrestartShape:
    return PrestartShape(
        python="/usr/bin/python3",
        unit="mtpstudio-llama.service",
        needs=(("CUDA0", 10184, desktop_mib),),
        on_short=on_short,
    )


def test_too_little_free_memory_refuses_and_names_what_holds_it(tmp_path: Path) -> None:
    outcome = check_vram(shape(), reading(tmp_path))  # type: ignore[arg-type]
    print("\n".join(outcome.lines))
    (line,) = outcome.lines
    assert outcome.start is False
    assert line.startswith("mtpstudio: mtpstudio-llama.service: CUDA0 (NVIDIA GeForce RTX 4070")
    assert "the engine needs 10,184 MiB" in line and "MiB short" in line
    assert "held by llama-server (pid" in line  # the biggest holder first
    assert "not starting" in line


def test_the_plan_may_start_all_the_same_and_say_so(tmp_path: Path) -> None:
    outcome = check_vram(shape("warn"), reading(tmp_path))  # type: ignore[arg-type]
    assert outcome.start is True
    assert "starting all the same, as the plan says (--short-vram warn)" in outcome.lines[0]


def test_enough_free_memory_passes_and_counts_the_desktop_already_there(tmp_path: Path) -> None:
    # the recorded desktop (kwin_wayland, Xwayland, plasmashell) already holds its memory, so
    # only what it does not hold yet is still to come
    detection = reading(tmp_path, free_mib=10500)
    outcome = check_vram(shape(), detection)  # type: ignore[arg-type]
    print("\n".join(outcome.lines))
    assert outcome.start is True
    assert "enough" in outcome.lines[0]
    held = outcome.lines[0]
    assert "the desktop's 278 MiB still to come" in held  # it holds 746 of its 1,024 MiB
    at_boot = check_vram(shape(desktop_mib=0), detection)  # type: ignore[arg-type]
    assert "still to come" not in at_boot.lines[0]
    short = check_vram(shape(), reading(tmp_path, free_mib=10400))  # type: ignore[arg-type]
    assert short.start is False  # the engine alone fits, the desktop's rest does not
    assert "62 MiB short" in short.lines[0]


def test_no_nvml_is_said_and_not_checked() -> None:
    detection = detect_nvidia(FakeNvml({"devices": []}, init_error="NVMLError_LibraryNotFound"))
    outcome = check_vram(shape(), detection)
    assert outcome.start is True
    assert outcome.lines[0].endswith("not checked.")


def _build(name: str) -> Path:
    try:
        return engine_binary(name)
    except EngineMissingError as exc:
        pytest.fail(str(exc))


def test_a_changed_build_is_named_with_the_flag_it_rejects() -> None:
    """The unit was made for b11549 (which has --moe-cache-mib); the binary is replaced by
    b11434, which does not: the check says so before the engine starts."""
    newer, older = _build("upstream-b11549"), _build("upstream")
    made_for = newer.stat()
    check = PrestartShape(
        python="/usr/bin/python3",
        unit="mtpstudio-llama.service",
        needs=(("CUDA0", 1, 0),),
        engine_size=made_for.st_size,
        engine_mtime_ns=made_for.st_mtime_ns,
        flags=("--moe-cache-mib", "-c", "--spec-type"),
    )
    same = check_engine(check, newer, SubprocessRunner())
    assert same.lines == () and same.start
    changed = check_engine(check, older, SubprocessRunner())
    print("\n".join(changed.lines))
    (line,) = changed.lines
    assert "is another build than the unit was made for" in line
    assert "it rejects --moe-cache-mib;" in line and "-c," not in line
    assert "mtpstudio export-unit" in line


def test_the_command_runs_as_the_unit_writes_it(tmp_path: Path) -> None:
    """The unit's ExecStartPre= words, run as a command: here NVML is absent (no driver), so
    the memory is not checked, and the engine's stamp is compared."""
    engine = _build("upstream")
    check = PrestartShape(
        python=sys.executable,
        unit="mtpstudio-llama.service",
        needs=(("CUDA0", 100, 0),),
        flags=("-m", "--fit", "-ngl"),  # flags begin with a dash: the words must still parse
    )
    words = check.argv(str(engine))[4:]
    done = run_cli("prestart", *words)
    assert done.returncode == 0, done.stderr
    assert "mtpstudio: mtpstudio-llama.service: " in done.stdout
    missing = run_cli(
        "prestart", *[w if w != str(engine) else str(tmp_path / "gone") for w in words]
    )
    assert missing.returncode == 1 and "cannot be read" in missing.stdout
    edited = run_cli("prestart", *words, "--flag=--x;rm")
    assert edited.returncode != 0


def test_the_helper_reads_the_check_back_and_refuses_an_edited_one() -> None:
    made = unit_plan(published_resolved(), UnitScope.SYSTEM)
    assert made.prestart is not None
    text = unit_plan_text(made)
    name = "mtpstudio-llama.service"
    check_installed_unit(text, name, "mtpstudio-llama.env", system=True)
    for edit in (
        ("--on-short refuse", "--on-short ignore"),
        ("--need CUDA0=", "--need CUDA0=1;"),
        ("-m mtpstudio prestart", "-c import os"),
        ("--unit mtpstudio-llama.service", "--unit other.service"),
        ("ExecStartPost=-", "ExecStartPost="),  # its failure would stop the engine
        ("--port 8080 --load", "--port 8080 --flag x --load"),
        ("--load CUDA0=", "--load CUDA0=x"),
        ("poststart --unit mtpstudio-llama.service", "poststart --unit other.service"),
    ):
        assert edit[0] in text
        with pytest.raises(Refused):
            check_installed_unit(text.replace(edit[0], edit[1], 1), name, "mtpstudio-llama.env",
                                 system=True)  # fmt: skip
    extra = text.replace("ExecStart=", "ExecStartPre=/bin/true\nExecStart=", 1)
    with pytest.raises(Refused):
        check_installed_unit(extra, name, "mtpstudio-llama.env", system=True)


def test_status_names_a_rebuilt_engine_under_an_installed_unit(tmp_path: Path) -> None:
    """An installed unit made for one build whose binary is then rebuilt (replaced by another
    real build): ``mtpstudio status`` reads the unit's check and says which flags the new
    build rejects."""
    import shutil

    from mtpstudio.core.usecases.prestart import installed_unit_check

    engine = tmp_path / "llama.cpp" / "bin" / "llama-server"
    engine.parent.mkdir(parents=True)
    shutil.copy2(_build("upstream-b11549"), engine)
    made = unit_plan(published_resolved(**{"engine.binary": str(engine)}), UnitScope.SYSTEM)
    assert made.prestart is not None
    stamp = engine.stat()
    check = PrestartShape(
        python=made.prestart.python,
        unit=made.prestart.unit,
        needs=made.prestart.needs,
        engine_size=stamp.st_size,
        engine_mtime_ns=stamp.st_mtime_ns,
        flags=(*made.prestart.flags, "--moe-cache-mib"),
    )
    unit = tmp_path / "etc/systemd/system/mtpstudio-llama.service"
    unit.parent.mkdir(parents=True)
    files = render_service_files(
        made.resolved.effective, made.spec, scope=UnitScope.SYSTEM, user="alice", prestart=check
    )
    unit.write_text(files["unit"].text)
    (same,) = installed_unit_check(unit)
    assert same.endswith("is the build the unit was made for")
    shutil.copy(_build("upstream"), engine)  # rebuilt: another build
    (line,) = installed_unit_check(unit)
    print(line)
    assert "is another build than the unit was made for" in line
    assert "rejects --moe-cache-mib" in line
    assert installed_unit_check(tmp_path / "missing.service") == []


def fit_unit() -> tuple[Any, str]:
    """The published setup's system unit whose check starts the engine's fit when short."""
    made = unit_plan(published_resolved(**{"outputs.short_vram": "fit"}), UnitScope.SYSTEM)
    assert made.prestart is not None
    return made, unit_plan_text(made)


def test_the_fit_instead_swaps_the_placement_only(tmp_path: Path) -> None:
    """``--short-vram fit``: the unit's placement is the variable the check may override, its
    other flags stay in ExecStart=, and the fit leaves the desktop's share and the margin."""
    made, text = fit_unit()
    check = made.prestart
    plan = made.resolved.effective
    placement = " ".join(check.placement)
    assert f'\nEnvironment="MTPSTUDIO_PLACEMENT={placement}"\n' in text
    assert placement.startswith("--fit off") and f"--n-cpu-moe {made.boot.n_cpu_moe}" in placement
    exec_start = text[text.index("\nExecStart=") : text.index("\n# After the load")]
    assert exec_start.endswith("\\\n    $MTPSTUDIO_PLACEMENT")
    assert "--n-cpu-moe" not in exec_start and "-ngl" not in exec_start
    assert "\nRuntimeDirectory=mtpstudio-llama\n" in text
    assert "\nEnvironmentFile=-%t/mtpstudio-llama/placement.env\n" in text
    desktop = made.resolved.target.device.desktop_bytes // MIB
    margin = plan.runtime.fit_margin_mib + desktop
    assert check.fallback == ("--fit", "on", "--fit-target", str(margin)), check.fallback
    check_installed_unit(text, "mtpstudio-llama.service", "mtpstudio-llama.env", system=True)
    engine = tmp_path / "llama-server"  # systemd-analyze verify wants an executable there
    engine.write_text("#!/bin/sh\nexit 0\n")
    engine.chmod(0o755)
    unit = tmp_path / "mtpstudio-llama.service"
    unit.write_text(text.replace("/usr/local/bin/llama-server", str(engine)))
    verify = subprocess.run([tool("systemd-analyze"), "verify", "--man=no", str(unit)],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify.stderr
    user = unit_plan(published_resolved(**{"outputs.short_vram": "fit"}), UnitScope.USER)
    assert user.prestart is not None and not user.prestart.placement  # the fit already


def test_an_edited_fit_instead_is_refused() -> None:
    _, text = fit_unit()
    name = "mtpstudio-llama.service"
    for edit in (
        ("MTPSTUDIO_PLACEMENT=--fit off", "MTPSTUDIO_PLACEMENT=$(id) --fit off"),
        ("MTPSTUDIO_PLACEMENT=--fit off", "MTPSTUDIO_PLACEMENT=-ot .*=CPU --fit off"),
        ("--fallback=on", "--fallback=on;rm"),
        ("\n    $MTPSTUDIO_PLACEMENT", "\n    $OTHER"),
        ("%t/mtpstudio-llama/placement.env", "/home/alice/placement.env"),
        ("--on-short fit", "--on-short warn"),
    ):
        assert edit[0] in text, edit
        with pytest.raises(Refused):
            check_installed_unit(text.replace(edit[0], edit[1], 1), name, "mtpstudio-llama.env",
                                 system=True)  # fmt: skip


def test_short_memory_starts_the_fit_and_says_so(tmp_path: Path) -> None:
    from mtpstudio.core.quoting.env_file import parse_env_file
    from mtpstudio.core.service.prestart import write_fit_instead

    made, _ = fit_unit()
    check = made.prestart
    short = check_vram(check, reading(tmp_path))  # type: ignore[arg-type]
    print("\n".join(short.lines))
    (line,) = short.lines
    assert short.start and short.fit_instead
    assert "MiB short; held by llama-server (pid" in line
    assert "starting with the engine's fit instead (--fit on --fit-target 2048)" in line
    runtime = tmp_path / "run"
    runtime.mkdir()
    assert write_fit_instead(check, short, str(runtime)) == ""
    written = parse_env_file((runtime / "placement.env").read_text())
    assert written == {"MTPSTUDIO_PLACEMENT": " ".join(check.fallback)}
    enough = check_vram(check, reading(tmp_path, free_mib=11_500))  # type: ignore[arg-type]
    assert enough.start and not enough.fit_instead, enough.lines
    assert write_fit_instead(check, enough, str(runtime)) == ""
    assert not (runtime / "placement.env").exists()  # an earlier start's fit is gone
    nowhere = write_fit_instead(check, short, None)
    assert "no runtime folder" in nowhere and "not starting" in nowhere


def test_the_script_starts_the_engine_with_the_fit_it_is_handed(tmp_path: Path) -> None:
    """The launch script with ``--short-vram fit``: bash runs it; the check's output (here a
    stand-in for mtpstudio's interpreter that prints the fit) becomes the engine's placement,
    and without output the planned placement stays."""
    made, _ = fit_unit()
    check = made.prestart
    python = tmp_path / "python"
    engine = tmp_path / "llama-server"
    for program, body in ((python, 'echo "$FIT"'), (engine, 'printf "%s\\n" "$@"')):
        program.write_text(f"#!/bin/bash\n{body}\n")
        program.chmod(0o755)
    spec = replace(made.spec, binary=engine)
    files = render_service_files(
        made.resolved.effective, spec, scope=UnitScope.SYSTEM, user="alice",
        prestart=replace(check, python=str(python)),
    )  # fmt: skip
    script = tmp_path / "run.sh"
    script.write_text(files["script"].text)
    for fit, expected in (("--fit on --fit-target 2048", check.fallback), ("", check.placement)):
        done = subprocess.run(["bash", str(script)], env={"FIT": fit, "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        args = done.stdout.splitlines()
        assert tuple(args[-len(expected) :]) == expected, args
        assert ("--n-cpu-moe" in args) == (not fit)
