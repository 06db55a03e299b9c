"""The plan users run (issue 6 acceptance): exact argv per engine, golden files, real engines.

Qwen3.6-35B-A3B, ctx 131072, q8_0 K/V and draft K/V, MTP depth 3, p-min 0.75, the engine's fit
with a 1664 MiB margin (ik --fit-margin, upstream --fit-target), 8 threads.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.argv import launch_spec
from support.rendering import BINARY, MODEL, check_golden, layout, users_plan

from mtpstudio.core.desktop.session_files import SessionSettings, render_reclaim_files
from mtpstudio.core.detect.engines import EngineCandidate, identify_engine
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.service.export import render_all
from mtpstudio.core.service.render import UnitScope

EXPECTED_ARGV = {
    "upstream": [
        BINARY["upstream"], "-m", MODEL, "--host", "127.0.0.1", "--port", "8080",
        "-c", "131072", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "2048", "-ub", "512",
        "--parallel", "1", "-t", "8", "--fit", "on", "--fit-target", "1664",
        "--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-p-min", "0.75",
        "--spec-draft-type-k", "q8_0", "--spec-draft-type-v", "q8_0",
    ],
    "ik": [
        BINARY["ik"], "-m", MODEL, "--host", "127.0.0.1", "--port", "8080",
        "-c", "131072", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "2048", "-ub", "512",
        "--parallel", "1", "-t", "8", "--fit", "--fit-margin", "1664",
        "--spec-type", "mtp:n_max=3,p_min=0.75",
    ],
}  # fmt: skip
LIVE_ARGV = EXPECTED_ARGV
"""The ik of the test bench is 8337e4c, the era the documented stand-in plans too: depth and
p-min inside its MTP stage."""
"""What the probed builds of the test bench get (upstream b11434, ik 8337e4c)."""


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_exact_argv(flavour: str) -> None:
    plan = users_plan(flavour)
    spec = launch_spec(plan, documented_build(EngineFlavour(flavour), Path(BINARY[flavour])))
    assert list(spec.argv) == EXPECTED_ARGV[flavour]


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
@pytest.mark.parametrize("scope", [UnitScope.SYSTEM, UnitScope.USER])
def test_every_template_matches_its_golden_copy(flavour: str, scope: UnitScope) -> None:
    plan = users_plan(flavour)
    spec = launch_spec(plan, documented_build(EngineFlavour(flavour), Path(BINARY[flavour])))
    from mtpstudio.core.service.render import render_service_files

    files = render_service_files(
        plan,
        spec,
        scope=scope,
        user="alice" if scope is UnitScope.SYSTEM else None,
        layout=layout(plan, scope),
    )
    files |= render_reclaim_files(plan.desktop, SessionSettings())
    for key, f in files.items():
        check_golden(f"users-plan/{flavour}-{scope.value}-{key}-{f.name}", f.text)


def test_export_readme_lists_every_file() -> None:
    plan = users_plan("upstream")
    spec = launch_spec(plan, documented_build(EngineFlavour.UPSTREAM, Path(BINARY["upstream"])))
    files = render_all(plan, spec, scope=UnitScope.SYSTEM, user="alice")
    readme = files.pop("readme").text
    for f in files.values():
        assert f"`{f.name}`" in readme and str(f.install_path) in readme
    assert "systemctl enable --now mtpstudio-llama.service" in readme


def probed_build(binary: Path) -> EngineBuild:
    info = identify_engine(EngineCandidate(binary, "test"), SubprocessRunner())
    build = info.to_build()
    assert build is not None, info.problems
    return build


@pytest.mark.engine
@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_real_engine_accepts_the_argv(flavour: str, engine: Callable[[str], Path]) -> None:
    binary = engine(flavour)
    plan = users_plan(flavour)
    spec = launch_spec(plan, probed_build(binary))
    argv = list(spec.argv)
    expected = [str(binary), *LIVE_ARGV[flavour][1:]]
    assert argv == expected
    result = subprocess.run(
        [*argv, "--version"], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"}
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
@pytest.mark.parametrize("scope", [UnitScope.SYSTEM, UnitScope.USER])
def test_users_plan_units_pass_systemd_analyze_verify(
    flavour: str, scope: UnitScope, tmp_path: Path
) -> None:
    from support.systemd_checks import clean, verify_unit

    from mtpstudio.core.service.render import render_service_files

    binary = tmp_path / "engine dir" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    plan = users_plan(flavour)
    spec = launch_spec(plan, documented_build(EngineFlavour(flavour), binary))
    files = render_service_files(
        plan,
        spec,
        scope=scope,
        user="root" if scope is UnitScope.SYSTEM else None,
        layout=layout(plan, scope),
    )
    unit = tmp_path / files["unit"].name
    unit.write_text(files["unit"].text)
    result = verify_unit(unit, user=scope is UnitScope.USER)
    assert clean(result), result.stdout + result.stderr
