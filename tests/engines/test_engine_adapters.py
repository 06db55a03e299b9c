"""Engine adapters: exact argv per engine and setting, refusals, warnings, renamed flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.argv import launch_spec

from mtpstudio.core.engines.argv import build_launch_spec
from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.flags import FILE_PROBED_FLAGS, Option
from mtpstudio.core.engines.mtp import MtpDecision, decide_mtp
from mtpstudio.core.engines.profiles import ik, upstream
from mtpstudio.core.engines.profiles.ik import DOCUMENTED_FLAGS as IK_FLAGS
from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_FLAGS as UP_FLAGS
from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_SPEC_TYPES
from mtpstudio.core.engines.registry import (
    documented_build,
    probe_candidates,
    profile_for,
)
from mtpstudio.core.errors import AdapterError, PlanError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import (
    CacheType,
    EngineFlavour,
    FlashAttention,
    LoadMode,
    MoePlacement,
)
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan

UP_BIN = "/opt/llama.cpp/bin/llama-server"
IK_BIN = "/opt/ik_llama.cpp/bin/llama-server"
MODEL = "/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"
KEY_FILE = Path("/home/alice/.config/mtpstudio/server-api-key")
UP = EngineFlavour.UPSTREAM
IK = EngineFlavour.IK


def probed(
    flavour: EngineFlavour,
    flags: frozenset[str] | None = None,
    *,
    spec_types: tuple[str, ...] | None = None,
    mtp: MtpSupport | None = None,
) -> EngineBuild:
    """An EngineBuild as the prober would describe a CUDA build of the documented snapshot."""
    up = flavour is UP
    accepted = flags if flags is not None else (UP_FLAGS if up else IK_FLAGS) | {"--api-key-file"}
    if spec_types is None:
        spec_types = DOCUMENTED_SPEC_TYPES if up else ("none",)
    if mtp is None:
        mtp = MtpSupport.AVAILABLE if up else MtpSupport.UNKNOWN_UNTIL_LAUNCH
    return EngineBuild(
        binary=Path(UP_BIN if up else IK_BIN),
        flavour=flavour,
        version="0.6.0-dev" if up else "0",
        backends=(Backend.CUDA, Backend.CPU),
        accepted_flags=frozenset(accepted),
        spec_types=spec_types,
        mtp=mtp,
    )


def make_plan(flavour: EngineFlavour = UP, **sections: Any) -> Plan:
    data: dict[str, Any] = {"model": {"path": MODEL}, "engine": {"flavour": flavour.value}}
    for name, values in sections.items():
        if isinstance(values, dict):
            data.setdefault(name, {}).update(values)
        else:
            data[name] = values
    return plan_from_dict(data)


def model_info(arch: str = "qwen35moe", *, nextn: int = 1, experts: int = 256) -> ModelInfo:
    return ModelInfo(
        architecture=arch,
        name="Qwen3.6-35B-A3B",
        block_count=40 + nextn,
        n_layer=40,
        n_nextn_layer=nextn,
        n_embd=2048,
        n_head=16,
        n_head_kv=2,
        key_length=256,
        value_length=256,
        context_length=262144,
        vocab_size=248320,
        n_expert=experts,
        n_expert_used=8 if experts else 0,
        full_attention_interval=4,
    )


# --------------------------------------------------------------------------------------------
# the demo plan, complete


def test_upstream_demo_plan_exact_argv() -> None:
    plan = make_plan(UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 20})
    spec = launch_spec(plan, probed(UP), model_info(), for_mtpstudio_launch=True)
    assert spec.argv == (
        UP_BIN,
        "-m", MODEL,
        "--host", "127.0.0.1",
        "--port", "8080",
        "-c", "32768",
        "-ctk", "q8_0",
        "-ctv", "q8_0",
        "-fa", "on",
        "-b", "2048",
        "-ub", "512",
        "--parallel", "1",
        "--fit", "off",
        "-ngl", "999",
        "--n-cpu-moe", "20",
        "--spec-type", "draft-mtp",
        "--spec-draft-n-max", "2",
        "--spec-draft-p-min", "0.75",
        "--spec-draft-type-k", "f16",
        "--spec-draft-type-v", "f16",
        "-lv", "4",
    )  # fmt: skip
    assert spec.warnings == ()
    assert spec.flavour is UP and not spec.assumed_documented
    assert spec.args == spec.argv[1:]
    assert sum(spec.arg_groups) == len(spec.args)


def test_ik_demo_plan_exact_argv() -> None:
    plan = make_plan(IK, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 20})
    spec = launch_spec(plan, probed(IK), for_mtpstudio_launch=True)
    assert spec.argv == (
        IK_BIN,
        "-m", MODEL,
        "--host", "127.0.0.1",
        "--port", "8080",
        "-c", "32768",
        "-ctk", "q8_0",
        "-ctv", "q8_0",
        "-fa", "on",
        "-b", "2048",
        "-ub", "512",
        "--parallel", "1",
        "-ngl", "999",
        "--n-cpu-moe", "20",
        "-mtp",
        "--draft-max", "2",
        "--draft-p-min", "0.75",
    )  # fmt: skip


def test_every_flag_has_a_one_line_explanation() -> None:
    plan = make_plan(
        UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 4, "threads": 8, "load_mode": "mlock"}
    )
    spec = launch_spec(plan, probed(UP), for_mtpstudio_launch=True)
    for note in spec.flags:
        assert note.explanation and "\n" not in note.explanation, note
        assert note.setting
    assert {n.flag for n in spec.flags} >= {"-m", "-t", "-lm", "--n-cpu-moe", "-lv"}


# --------------------------------------------------------------------------------------------
# the matrix: engine x MTP x placement x load mode x host

HOST = {
    "loopback": (
        {"host": "127.0.0.1"},
        ["--host", "127.0.0.1", "--port", "8080"],
    ),
    "lan": (
        {"host": "0.0.0.0"},
        ["--host", "0.0.0.0", "--port", "8080", "--api-key-file", str(KEY_FILE)],
    ),
}
COMMON = ["-c", "32768", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "2048",
          "-ub", "512", "--parallel", "1"]  # fmt: skip
PLACEMENT = {
    UP: {
        "fit": ["--fit", "on", "--fit-target", "1024"],
        "n_cpu_moe": ["--fit", "off", "-ngl", "999", "--n-cpu-moe", "12"],
        "all_cpu": ["--fit", "off", "-ngl", "999", "--cpu-moe"],
        "gpu": ["--fit", "off", "-ngl", "999"],
    },
    IK: {
        "fit": ["--fit", "--fit-margin", "1024"],
        "n_cpu_moe": ["-ngl", "999", "--n-cpu-moe", "12"],
        "all_cpu": ["-ngl", "999", "--cpu-moe"],
        "gpu": ["-ngl", "999"],
    },
}
LOAD = {
    UP: {"mmap": [], "no-mmap": ["-lm", "none"], "mlock": ["-lm", "mmap+mlock"]},
    IK: {"mmap": [], "no-mmap": ["--no-mmap"], "mlock": ["--mlock"]},
}
MTP = {
    UP: {
        True: ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-p-min",
               "0.6", "--spec-draft-type-k", "q8_0", "--spec-draft-type-v", "q8_0"],
        False: [],
    },
    IK: {True: ["-mtp", "--draft-max", "3", "--draft-p-min", "0.6"], False: []},
}  # fmt: skip


@pytest.mark.parametrize("flavour", [UP, IK])
@pytest.mark.parametrize("mtp", [True, False])
@pytest.mark.parametrize("placement", ["fit", "n_cpu_moe", "all_cpu", "gpu"])
@pytest.mark.parametrize("load_mode", ["mmap", "no-mmap", "mlock"])
@pytest.mark.parametrize("host", ["loopback", "lan"])
def test_argv_matrix(
    flavour: EngineFlavour, mtp: bool, placement: str, load_mode: str, host: str
) -> None:
    server, host_args = HOST[host]
    plan = make_plan(
        flavour,
        runtime={"moe": placement, "n_cpu_moe": 12, "load_mode": load_mode},
        mtp={"enabled": mtp, "draft_max": 3, "draft_p_min": 0.6, "cache_type_k": "q8_0",
             "cache_type_v": "q8_0"},
        server=server,
    )  # fmt: skip
    key_file = KEY_FILE if host == "lan" else None
    spec = launch_spec(plan, probed(flavour), model_info("glm4moe"), api_key_file=key_file)
    binary = UP_BIN if flavour is UP else IK_BIN
    expected = [
        binary,
        "-m",
        MODEL,
        *host_args,
        *COMMON,
        *PLACEMENT[flavour][placement],
        *LOAD[flavour][load_mode],
        *MTP[flavour][mtp],
    ]
    assert list(spec.argv) == expected
    assert spec.api_key_file == key_file


def test_ngl_and_threads_and_draft_min() -> None:
    plan = make_plan(
        UP,
        runtime={"moe": "gpu", "n_gpu_layers": 30, "threads": 6},
        mtp={"draft_min": 1},
    )
    args = launch_spec(plan, probed(UP)).args
    assert args[args.index("-ngl") + 1] == "30"
    assert args[args.index("-t") + 1] == "6"
    assert args[args.index("--spec-draft-n-min") + 1] == "1"
    plan_ik = make_plan(IK, mtp={"draft_min": 1})
    args_ik = launch_spec(plan_ik, probed(IK)).args
    assert args_ik[args_ik.index("--draft-min") + 1] == "1"


def test_cpu_device_keeps_everything_on_the_cpu() -> None:
    plan = make_plan(UP, device="cpu", runtime={"moe": "fit"})
    spec = launch_spec(plan, probed(UP))
    assert spec.args[spec.args.index("--parallel") + 2 :][:4] == ("--fit", "off", "-ngl", "0")
    assert "--fit-target" not in spec.args
    assert any("CPU" in w for w in spec.warnings)
    ik = launch_spec(make_plan(IK, device="cpu"), probed(IK))
    assert ik.args[ik.args.index("-ngl") : ik.args.index("-ngl") + 2] == ("-ngl", "0")


def test_verbosity_only_when_mtpstudio_launches() -> None:
    plan = make_plan(UP)
    assert "-lv" not in launch_spec(plan, probed(UP)).args
    assert launch_spec(plan, probed(UP), for_mtpstudio_launch=True).args[-2:] == (
        "-lv",
        "4",
    )
    assert "-lv" not in launch_spec(make_plan(IK), probed(IK), for_mtpstudio_launch=True).args


def test_flash_attention_and_probability_spelling() -> None:
    plan = make_plan(UP, runtime={"flash_attn": "auto"}, mtp={"draft_p_min": 0.0})
    spec = launch_spec(plan, probed(UP))
    assert spec.args[spec.args.index("-fa") + 1] == "auto"
    assert spec.args[spec.args.index("--spec-draft-p-min") + 1] == "0"
    assert any("auto" in w for w in spec.warnings)  # quantized V with fa auto


# --------------------------------------------------------------------------------------------
# refusals


def test_fit_refuses_a_fixed_layer_count() -> None:
    for flavour in (UP, IK):
        plan = make_plan(flavour, runtime={"moe": "fit", "n_gpu_layers": 30})
        with pytest.raises(AdapterError, match=r"fit cannot be combined .*-ngl 30"):
            launch_spec(plan, probed(flavour))


@pytest.mark.parametrize("flavour", [UP, IK])
def test_fit_never_shares_the_line_with_manual_placement(flavour: EngineFlavour) -> None:
    manual = {"-ngl", "-ot", "--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe", "--override-tensor"}
    plan = make_plan(flavour, runtime={"moe": "fit", "n_cpu_moe": 7})
    args = set(launch_spec(plan, probed(flavour)).args)
    assert "--fit" in args
    assert not (args & manual)


def test_quantized_v_without_flash_attention_is_refused() -> None:
    plan = make_plan(UP, runtime={"flash_attn": "off", "cache_type_v": "q4_0"})
    with pytest.raises(AdapterError, match="quantized V cache"):
        launch_spec(plan, probed(UP))
    ok = make_plan(UP, runtime={"flash_attn": "off", "cache_type_v": "f16"})
    assert launch_spec(ok, probed(UP)).args[12:14] == ("-fa", "off")


def test_non_loopback_needs_a_key_file() -> None:
    plan = make_plan(UP, server={"host": "0.0.0.0"})
    with pytest.raises(AdapterError, match=r"0\.0\.0\.0.*API key") as info:
        launch_spec(plan, probed(UP))
    assert info.value.hint
    keyed = make_plan(UP, server={"host": "0.0.0.0", "api_key_file": str(KEY_FILE)})
    spec = launch_spec(keyed, probed(UP))
    assert spec.args[4:8] == ("--port", "8080", "--api-key-file", str(KEY_FILE))
    assert spec.api_key_file == KEY_FILE


def test_the_key_itself_is_never_in_a_plan_or_the_command_line() -> None:
    with pytest.raises(PlanError, match="API key in plain text") as info:
        make_plan(UP, server={"api_key": "sk-plan"})
    assert "api_key_file" in (info.value.hint or "")
    # a version-1 file with a key is refused the same way, one without a key loads
    with pytest.raises(PlanError, match="plain text"):
        plan_from_dict({"schema_version": 1, "server": {"api_key": "sk-old"}})
    assert plan_from_dict({"schema_version": 1, "server": {"api_key": None}}).server
    # a build without --api-key-file is refused rather than given the key on the command line
    no_file = probed(UP, UP_FLAGS - {"--api-key-file"})
    keyed = make_plan(UP, server={"api_key_file": str(KEY_FILE)})
    with pytest.raises(AdapterError, match="--api-key-file"):
        launch_spec(keyed, no_file)
    spec = launch_spec(keyed, probed(UP))
    assert "--api-key" not in spec.args and "--api-key-file" in spec.args


def test_upstream_mtp_needs_draft_mtp() -> None:
    old = probed(UP, spec_types=("none", "draft-simple"), mtp=MtpSupport.UNAVAILABLE)
    with pytest.raises(AdapterError, match="draft-mtp") as info:
        launch_spec(make_plan(UP, mtp={"enabled": True}), old)
    assert str(old.binary) in str(info.value)
    assert "--spec-type" not in launch_spec(make_plan(UP, mtp={"enabled": False}), old).args
    # auto: off on a build that cannot draft with MTP, no error
    assert "--spec-type" not in launch_spec(make_plan(UP), old, model_info()).args


def test_mtp_auto_follows_the_model_and_explicit_on_without_a_layer_is_refused() -> None:
    plain = model_info(nextn=0)
    assert make_plan(UP).mtp.enabled is None  # auto is the default
    assert "--spec-type" not in launch_spec(make_plan(UP), probed(UP), plain).args
    assert "--spec-type" in launch_spec(make_plan(UP), probed(UP), model_info()).args
    for flavour in (UP, IK):
        with pytest.raises(AdapterError, match="no MTP"):
            launch_spec(make_plan(flavour, mtp={"enabled": True}), probed(flavour), plain)
    glm = model_info("glm4moe")
    assert "-mtp" in launch_spec(make_plan(IK), probed(IK), glm).args


def test_ik_build_without_mtp_switch() -> None:
    build = probed(IK, IK_FLAGS - {"-mtp", "--multi-token-prediction"}, mtp=MtpSupport.UNAVAILABLE)
    with pytest.raises(AdapterError, match="-mtp"):
        launch_spec(make_plan(IK, mtp={"enabled": True}), build)
    assert "-mtp" not in launch_spec(make_plan(IK), build).args  # auto: off


def test_flavour_mismatch_and_unprobed_builds() -> None:
    with pytest.raises(AdapterError, match="the plan is for ik"):
        launch_spec(make_plan(IK), probed(UP))
    bare = EngineBuild(binary=Path(UP_BIN), flavour=UP, version="0.6.0-dev")
    with pytest.raises(AdapterError, match="has not been probed") as info:
        launch_spec(make_plan(UP), bare)
    assert info.value.hint


def test_demo_card_needs_a_model_file_unless_documented() -> None:
    plan = Plan()  # demo card, no path
    with pytest.raises(AdapterError, match="demo model card"):
        launch_spec(plan, probed(UP))
    spec = launch_spec(plan, probed(UP), model_path=Path("/m/x.gguf"))
    assert spec.args[:2] == ("-m", "/m/x.gguf")


def test_missing_required_flag_names_option_and_build() -> None:
    build = probed(UP, UP_FLAGS - {"-ctk", "--cache-type-k"})
    with pytest.raises(AdapterError) as info:
        launch_spec(make_plan(UP), build)
    message = str(info.value)
    assert "-ctk / --cache-type-k" in message and UP_BIN in message
    assert "cache_type_k" in message


# --------------------------------------------------------------------------------------------
# documented planning (no binary)


def test_assume_documented_plans_without_a_binary() -> None:
    bare = EngineBuild(binary=Path(UP_BIN), flavour=UP, version="?")
    spec = launch_spec(Plan(), bare, assume_documented=True)
    assert spec.assumed_documented
    assert spec.args[:2] == ("-m", "/path/to/qwen3.6-35b-a3b-iq4_xs.gguf")
    assert any("documented flags" in w for w in spec.warnings)
    assert any("demo card" in w for w in spec.warnings)
    assert set(n.flag for n in spec.flags) <= UP_FLAGS
    # the stand-in build gives the same command
    doc = documented_build(UP, Path(UP_BIN))
    spec2 = launch_spec(Plan(), doc, model_path=Path(MODEL))
    assert spec2.args[2:] == spec.args[2:]
    assert not spec2.assumed_documented


def test_documented_ik_fit_margin_zero() -> None:
    plan = make_plan(IK, runtime={"moe": "fit", "fit_margin_mib": 0})
    spec = launch_spec(plan, documented_build(IK))
    assert spec.args[spec.args.index("--fit-margin") + 1] == "1"
    assert any("1024" in w for w in spec.warnings)


# --------------------------------------------------------------------------------------------
# renamed flags


def test_older_upstream_spellings_are_used_when_the_new_ones_were_rejected() -> None:
    older = (UP_FLAGS - {"-lm", "--load-mode", "--spec-draft-n-max", "--spec-draft-p-min",
                         "--spec-draft-n-min", "--parallel"}) | {
        "--mlock", "--no-mmap", "--draft-max", "--draft-min", "--draft-p-min"}  # fmt: skip
    build = probed(UP, frozenset(older))
    plan = make_plan(UP, runtime={"load_mode": "mlock"}, mtp={"draft_min": 1})
    spec = launch_spec(plan, build)
    args = spec.args
    for flag in ("--mlock", "--draft-max", "--draft-min", "--draft-p-min", "-np"):
        assert flag in args
    for flag in ("-lm", "--spec-draft-n-max", "--parallel"):
        assert flag not in args
    note = spec.note_for("--draft-max")
    assert note is not None and "spelling of --spec-draft-n-max" in note.explanation
    plan_nommap = make_plan(UP, runtime={"load_mode": "no-mmap"})
    assert "--no-mmap" in launch_spec(plan_nommap, build).args


def test_removed_spellings_are_never_emitted_by_current_upstream() -> None:
    for load_mode in LoadMode:
        plan = make_plan(UP, runtime={"load_mode": load_mode.value})
        args = set(launch_spec(plan, probed(UP)).args)
        assert not args & {"--mlock", "--no-mmap", "--draft-max", "--draft-min", "--draft"}


def test_expert_placement_falls_back_to_override_tensor() -> None:
    build = probed(UP, UP_FLAGS - {"--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe"})
    off = {"enabled": False}
    spec = launch_spec(make_plan(UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 3}, mtp=off), build)
    assert spec.args[-2:] == ("-ot", r"blk\.(0|1|2)\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU")
    note = spec.note_for("-ot")
    assert note is not None and "no --n-cpu-moe" in note.explanation
    spec = launch_spec(make_plan(UP, runtime={"moe": "all_cpu"}, mtp=off), build)
    assert spec.args[-2:] == ("-ot", r"\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU")
    ik_build = probed(IK, IK_FLAGS - {"--n-cpu-moe", "-ncmoe"})
    spec = launch_spec(
        make_plan(IK, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 2}, mtp=off), ik_build
    )
    assert spec.args[-2:] == ("-ot", r"blk\.(0|1)\.ffn_(up|down|gate|gate_up)_exps=CPU")


def test_alternative_short_spellings() -> None:
    short_only = frozenset(
        f for f in UP_FLAGS if f not in {"--parallel", "--fit", "--n-cpu-moe", "-ngl"}
    ) | {"-np", "-fit", "-ncmoe", "--n-gpu-layers"}
    spec = launch_spec(
        make_plan(UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 2}), probed(UP, short_only)
    )
    assert spec.args[spec.args.index("-np") : spec.args.index("-np") + 2] == ("-np", "1")
    assert "-fit" in spec.args and "-ncmoe" in spec.args and "--n-gpu-layers" in spec.args


# --------------------------------------------------------------------------------------------
# warnings


def test_ik_on_qwen35moe_will_not_run_and_never_gets_mtp() -> None:
    for mtp in (None, True):
        spec = launch_spec(make_plan(IK, mtp={"enabled": mtp}), probed(IK), model_info())
        assert "-mtp" not in spec.args  # a flag the build cannot honour for this model
        assert any("cannot load this qwen35moe" in b for b in spec.blockers)
        assert any("upstream" in a and "draft model" in a for a in spec.alternatives)
    explicit = launch_spec(make_plan(IK, mtp={"enabled": True}), probed(IK), model_info())
    assert any("-mtp is left out" in b for b in explicit.blockers)
    glm = launch_spec(make_plan(IK, mtp={"enabled": True}), probed(IK), model_info("glm4moe"))
    assert "-mtp" in glm.args and not glm.blockers
    unknown = launch_spec(make_plan(IK, mtp={"enabled": True}), probed(IK))
    assert any("decides at load time" in w for w in unknown.warnings)


def test_ik_warns_about_draft_cache_types() -> None:
    plan = make_plan(IK, mtp={"cache_type_k": "f16", "cache_type_v": "f16"})
    spec = launch_spec(plan, probed(IK), model_info("glm4moe"))
    assert any("main cache types" in w for w in spec.warnings)
    assert "-ctkd" not in spec.args


def test_dense_model_drops_expert_flags_with_a_warning() -> None:
    spec = launch_spec(
        make_plan(UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 5}),
        probed(UP),
        model_info(experts=0),
    )
    assert "--n-cpu-moe" not in spec.args
    assert any("no experts" in w for w in spec.warnings)


def test_binary_mismatch_warns() -> None:
    plan = make_plan(UP, engine={"binary": "/somewhere/else/llama-server"})
    spec = launch_spec(plan, probed(UP))
    assert spec.argv[0] == UP_BIN
    assert any("/somewhere/else" in w for w in spec.warnings)


# --------------------------------------------------------------------------------------------
# properties


plans = st.builds(
    lambda flavour, mtp, moe, load, ngl, n_cpu_moe, fa, threads, lan: make_plan(
        flavour,
        runtime={
            "moe": moe,
            "load_mode": load,
            "n_gpu_layers": ngl if moe != "fit" else None,
            "n_cpu_moe": n_cpu_moe,
            "flash_attn": fa,
            "threads": threads,
        },
        mtp={"enabled": mtp},
        server={"host": "0.0.0.0" if lan else "127.0.0.1"},
    ),
    st.sampled_from([UP, IK]),
    st.booleans(),
    st.sampled_from([m.value for m in MoePlacement]),
    st.sampled_from([m.value for m in LoadMode]),
    st.none() | st.integers(0, 99),
    st.integers(0, 40),
    st.sampled_from([FlashAttention.ON.value, FlashAttention.AUTO.value]),
    st.none() | st.integers(1, 64),
    st.booleans(),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans, data=st.data())
def test_rejected_flags_are_never_emitted(plan: Plan, data: st.DataObject) -> None:
    flavour = plan.engine.flavour
    universe = sorted({s for s, _ in probe_candidates(flavour)})
    subset = frozenset(data.draw(st.sets(st.sampled_from(universe)), label="accepted"))
    build = probed(flavour, subset)
    try:
        spec = launch_spec(plan, build, api_key_file=KEY_FILE)
    except AdapterError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    emitted = [n.flag for n in spec.flags]
    assert set(emitted) <= subset
    assert list(spec.args) == [w for n in spec.flags for w in n.words]


@settings(max_examples=200, deadline=None)
@given(plan=plans)
def test_full_probe_always_succeeds_and_is_deterministic(plan: Plan) -> None:
    build = probed(plan.engine.flavour)
    one = launch_spec(plan, build, model_info("glm4moe"), api_key_file=KEY_FILE)
    two = launch_spec(plan, build, model_info("glm4moe"), api_key_file=KEY_FILE)
    assert one == two
    assert len(set(n.flag for n in one.flags)) == len(one.flags)  # no flag twice
    fit = plan.runtime.moe is MoePlacement.FIT
    assert ("--fit" in one.args) == (fit or plan.engine.flavour is UP)


# --------------------------------------------------------------------------------------------
# plumbing


def test_profile_for_and_build_launch_spec() -> None:
    assert profile_for(probed(UP)) is upstream.PROFILE
    assert profile_for(IK) is ik.PROFILE
    spec = launch_spec(make_plan(UP), probed(UP))
    assert spec.argv[0] == UP_BIN
    assert spec.command_line().startswith(UP_BIN + " -m ")
    assert spec.drop_env_prefixes == ("LLAMA_ARG_", "LLAMA_API_KEY")


def test_probe_candidates_cover_every_option_with_a_value() -> None:
    for flavour in (UP, IK):
        candidates = dict(probe_candidates(flavour))
        assert candidates["-c"] == "4096" and candidates["--cpu-moe"] is None
        assert "--api-key-file" in candidates and candidates["--api-key-file"] == "/dev/null"
        documented = UP_FLAGS if flavour is UP else IK_FLAGS
        # every documented flag the adapter may emit is probed
        profile = profile_for(flavour)
        for option, entry in profile.spellings.items():
            assert any(s in candidates for s in entry.spellings), option
        assert documented & set(candidates)


def test_detection_probes_every_spelling_the_adapters_emit() -> None:
    from mtpstudio.core.engines.probe import CANDIDATE_FLAGS

    probed_flags = {spec.flag for spec in CANDIDATE_FLAGS} | FILE_PROBED_FLAGS
    for flavour in (UP, IK):
        missing = {s for s, _ in probe_candidates(flavour)} - probed_flags
        assert not missing, f"{flavour}: {sorted(missing)}"


def test_option_enum_is_fully_spelled_somewhere() -> None:
    from mtpstudio.core.engines.profiles import PROFILES

    spelled = {o for p in PROFILES for table in (p.spellings, p.draft.spellings) for o in table}
    assert spelled == set(Option)
    # only b11549 and later spell the MoE cache
    assert Option.MOE_CACHE_MIB not in upstream.SPELLINGS | ik.SPELLINGS


def test_draft_model_spellings_are_all_probed() -> None:
    from mtpstudio.core.engines.probe import CANDIDATE_FLAGS

    probed_flags = {spec.flag for spec in CANDIDATE_FLAGS}
    for table in (upstream.DRAFT_SPELLINGS, ik.DRAFT_SPELLINGS):
        spellings = {s for entry in table.values() for s in entry.spellings}
        assert spellings <= probed_flags, sorted(spellings - probed_flags)


def test_plan_cache_types_are_all_accepted_values() -> None:
    # every Plan cache type is among the values both engines document (engines.md §3)
    assert {c.value for c in CacheType} <= {
        "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"
    }  # fmt: skip


def test_spec_is_frozen() -> None:
    spec = launch_spec(make_plan(UP), probed(UP))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.binary = Path("/x")  # type: ignore[misc]


def test_no_op_offload_is_emitted_when_asked_and_supported() -> None:
    on = launch_spec(
        make_plan(UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 8}), documented_build(UP)
    )
    assert "--no-op-offload" not in on.args
    plan = make_plan(UP, runtime={"moe": "n_cpu_moe", "n_cpu_moe": 8, "op_offload": False})
    spec = launch_spec(plan, documented_build(UP))
    assert "--no-op-offload" in spec.args
    note = next(n for n in spec.flags if n.flag == "--no-op-offload")
    assert note.setting == "runtime.op_offload" and "VRAM" in note.explanation
    # a CPU-only plan has nothing to offload
    cpu = make_plan(UP, device="cpu", runtime={"op_offload": False})
    assert "--no-op-offload" not in launch_spec(cpu, documented_build(UP)).args


def test_the_builder_spells_the_planners_decisions_and_never_makes_its_own() -> None:
    """MTP auto decided off by the planner (speed) and the CPU as the resolved target of a
    plan whose device is auto: the command follows the decisions it was handed."""
    plan, build, info = make_plan(UP), probed(UP), model_info()
    on = build_launch_spec(plan, build, info, mtp=decide_mtp(plan, build, info), cpu_only=False)
    off = MtpDecision(False, False, None, "MTP auto: off (the estimate is slower with it).")
    spec = build_launch_spec(plan, build, info, mtp=off, cpu_only=True)
    assert "--spec-type" in on.args and "--spec-type" not in spec.args
    assert "--fit" in on.args and on.args[on.args.index("--fit") + 1] == "on"
    assert spec.args[spec.args.index("-ngl") + 1] == "0"  # every layer on the CPU
    assert spec.args[spec.args.index("--fit") + 1] == "off"
