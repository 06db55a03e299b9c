"""The adapters' command lines are accepted by the real llama-server builds.

The build is probed for real (the detection's ``<flag> <value> --version`` probe, plus the
adapters' own spellings), then every command the adapter builds gets ``--version`` appended:
both parsers read argv in order and exit 0 on ``--version`` only if every flag and value
before it was valid (engines.md §1).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.argv import launch_spec
from support.servers import start_server

from mtpstudio.core.detect.engines import EngineCandidate, identify_engine
from mtpstudio.core.engines.apikey import store_api_key
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.probe import CANDIDATE_FLAGS, FlagSpec
from mtpstudio.core.engines.registry import probe_candidates
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.runner import SubprocessRunner, clean_environ

pytestmark = pytest.mark.engine


def probe_build(binary: Path, flavour: EngineFlavour) -> EngineBuild:
    known = {spec.flag for spec in CANDIDATE_FLAGS}
    extra = [
        FlagSpec(flag, ((value,),) if value is not None else ((),), "adapter spelling")
        for flag, value in probe_candidates(flavour)
        if flag not in known
    ]
    info = identify_engine(
        EngineCandidate(binary, "test"), SubprocessRunner(), flags=[*CANDIDATE_FLAGS, *extra]
    )
    build = info.to_build()
    assert build is not None and build.flavour is flavour, info.problems
    return build


def parses(spec: LaunchSpec) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [*spec.argv, "--version"],
        env=clean_environ(os.environ),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def plan(flavour: EngineFlavour, **sections: Any) -> Plan:
    data: dict[str, Any] = {
        "model": {"path": "/models/dir with spaces/Qwen3.6 35B-A3B.gguf"},
        "engine": {"flavour": flavour.value},
    }
    data.update(sections)
    return plan_from_dict(data)


PLANS: list[dict[str, Any]] = [
    {},
    {"runtime": {"moe": "fit", "fit_margin_mib": 512}},
    {"runtime": {"moe": "all_cpu", "load_mode": "mlock", "threads": 2}},
    {"runtime": {"moe": "n_cpu_moe", "n_cpu_moe": 30, "load_mode": "no-mmap", "n_gpu_layers": 20}},
    {"runtime": {"flash_attn": "auto", "cache_type_k": "q4_0", "cache_type_v": "q5_1"},
     "mtp": {"draft_max": 4, "draft_min": 1, "draft_p_min": 0.3, "cache_type_k": "q8_0"}},
    {"mtp": {"enabled": False}, "device": "cpu"},
    {"server": {"host": "0.0.0.0", "port": 9931}},
]  # fmt: skip


BUILDS = [
    ("upstream", EngineFlavour.UPSTREAM),
    ("upstream-b11549", EngineFlavour.UPSTREAM),
    ("ik", EngineFlavour.IK),
]
"""Each build of the test bench by name, with its flavour."""


@pytest.mark.parametrize(("name", "flavour"), BUILDS)
def test_the_real_parser_accepts_every_command(
    name: str, flavour: EngineFlavour, engine: Callable[[str], Path], tmp_path: Path
) -> None:
    binary = engine(name)
    build = probe_build(binary, flavour)
    key_file = tmp_path / "key"
    key_file.write_text("mtps-test\n")
    for sections in PLANS:
        lan = sections.get("server", {}).get("host") == "0.0.0.0"
        spec = launch_spec(
            plan(flavour, **sections),
            build,
            for_mtpstudio_launch=True,
            api_key_file=key_file if lan else None,
        )
        assert {n.flag for n in spec.flags} <= build.accepted_flags
        result = parses(spec)
        assert result.returncode == 0, (sections, spec.argv, result.stderr[-2000:])
        assert "version:" in result.stderr


def test_the_check_catches_a_rejected_flag(engine: Callable[[str], Path]) -> None:
    """Negative control: the removed upstream --mlock makes the same check fail."""
    binary = engine("upstream")
    build = probe_build(binary, EngineFlavour.UPSTREAM)
    assert "--mlock" not in build.accepted_flags and "-lm" in build.accepted_flags
    spec = launch_spec(plan(EngineFlavour.UPSTREAM), build)
    broken = LaunchSpec(
        flavour=spec.flavour,
        binary=spec.binary,
        flags=(*spec.flags, type(spec.flags[0])("--mlock", (), "runtime.load_mode", "x")),
    )
    assert parses(broken).returncode != 0


@pytest.mark.parametrize("flavour", [EngineFlavour.UPSTREAM, EngineFlavour.IK])
def test_both_engines_serve_the_key_from_the_plans_key_file(
    flavour: EngineFlavour, engine: Callable[[str], Path], tiny_model: Any, tmp_path: Path
) -> None:
    """The key file the plan names really guards the server: 401 without it, 200 with it."""
    binary = engine(flavour.value)
    key_file = tmp_path / "server-api-key"
    key = store_api_key(key_file, "mtps-real-key").key
    spec = launch_spec(
        plan(flavour, server={"host": "0.0.0.0", "api_key_file": str(key_file)}),
        probe_build(binary, flavour),
    )
    at = spec.args.index("--api-key-file")
    assert key not in spec.argv
    server = start_server(
        binary, tiny_model("dense"), list(spec.args[at : at + 2]), log_dir=tmp_path
    )
    try:
        payload = {"prompt": "Hi", "n_predict": 1, "temperature": 0.0}
        assert server.post("/completion", json=payload).status_code == 401
        ok = server.post("/completion", json=payload, headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200, ok.text[:500]
    finally:
        server.stop()


def test_todays_ik_runs_the_qwen35moe_mtp_the_plan_asks_for(
    engine: Callable[[str], Path], tiny_model: Any, tmp_path: Path
) -> None:
    """The plan asks ik 8337e4c for the MTP of a qwen35moe GGUF with its MTP block (its stage
    syntax, no blocker), and the build drafts with it (the April tree refused to load such a
    file: tests/fixtures/engines/ik-0.1.5/mtp-run-refused)."""
    from mtpstudio.core.model.gguf import read_model_info

    model = tiny_model("hybrid-mtp")
    binary = engine("ik")
    spec = launch_spec(
        plan(EngineFlavour.IK, model={"path": str(model)}, device="cpu"),
        probe_build(binary, EngineFlavour.IK),
        read_model_info(model),
    )
    assert spec.blockers == ()
    stage = spec.args[spec.args.index("--spec-type") + 1]
    assert stage.startswith("mtp:n_max=") and "-mtp" not in spec.args
    server = start_server(binary, model, ["--spec-type", stage], log_dir=tmp_path)
    try:
        body = server.completion("Once upon a time", n_predict=16, endpoint="/v1/completions")
        assert body["timings"]["draft_n"] > 0
    finally:
        server.stop()
