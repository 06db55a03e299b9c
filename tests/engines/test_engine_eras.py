"""Engine eras: a build is described by what it answered, and each era gets its own spelling.

Today's ik_llama.cpp (8337e4c, speculative stages) takes ``--spec-type mtp:n_max=…,p_min=…`` and
refuses ``-mtp``/``--draft-max``/``--draft-p-min``; the pinned ik (0.1.5) is the other way round.
The builds here carry the flags each era's profile documents; tests/engines/
test_recorded_eras.py drives the same through the real builds' recorded answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.argv import launch_spec

from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.flags import FILE_PROBED_FLAGS
from mtpstudio.core.engines.mtp import mtp_can_run, mtp_support
from mtpstudio.core.engines.profiles import ik, ik_stages, profile_for, upstream
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan

IK = EngineFlavour.IK
MODEL = "/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"


def ik_build(era: str, **changes: object) -> EngineBuild:
    """A probed CUDA ik build of ``era`` ("stages": 8337e4c, "pinned": 0.1.5)."""
    profile = ik_stages.PROFILE if era == "stages" else ik.PROFILE
    types = ("none", "ngram-mod", ik_stages.MTP_STAGE.probe) if era == "stages" else ("none",)
    drafts = frozenset(s for e in profile.draft.spellings.values() for s in e.spellings)
    build = EngineBuild(
        binary=Path(f"/opt/ik-{era}/llama-server"),
        flavour=IK,
        version="4840" if era == "stages" else "0",
        backends=(Backend.CUDA, Backend.CPU),
        accepted_flags=profile.documented_flags | drafts | {"--api-key-file"},
        spec_types=types,
        mtp=MtpSupport.AVAILABLE if era == "stages" else MtpSupport.UNKNOWN_UNTIL_LAUNCH,
    )
    return build if not changes else EngineBuild(**{**build.__dict__, **changes})  # type: ignore[arg-type]


def qwen(arch: str = "qwen35moe", nextn: int = 1) -> ModelInfo:
    return ModelInfo(
        architecture=arch, name="Qwen3.6-35B-A3B", block_count=40 + nextn, n_layer=40,
        n_nextn_layer=nextn, n_embd=2048, n_head=16, n_head_kv=2, key_length=256,
        value_length=256, context_length=262144, vocab_size=248320, n_expert=256,
        n_expert_used=8, full_attention_interval=4,
    )  # fmt: skip


def plan(**sections: dict[str, object]) -> Plan:
    data: dict[str, object] = {"model": {"path": MODEL}, "engine": {"flavour": "ik"}}
    data.update(sections)
    return plan_from_dict(data)


def test_a_build_is_described_by_what_it_answered() -> None:
    assert profile_for(ik_build("stages")) is ik_stages.PROFILE
    assert profile_for(ik_build("pinned")) is ik.PROFILE
    assert profile_for(IK) is ik.PROFILE  # a flavour alone: the documented (pinned) era
    # the value syntax decides, not the version: a "pinned" version that answers it is new
    assert profile_for(ik_build("pinned", spec_types=("none", "mtp:n_max=1,p_min=0.0"))) is (
        ik_stages.PROFILE
    )
    up = EngineBuild(Path("/u"), EngineFlavour.UPSTREAM, "1", spec_types=("mtp:n_max=1,p_min=0.0",))
    assert profile_for(up) is upstream.PROFILE  # another flavour's marker means nothing here
    assert mtp_support(ik_build("stages")) is MtpSupport.AVAILABLE
    assert mtp_support(ik_build("pinned")) is MtpSupport.UNKNOWN_UNTIL_LAUNCH


def test_todays_ik_drafts_with_an_mtp_stage_and_writes_p_min_out() -> None:
    spec = launch_spec(plan(mtp={"enabled": None, "draft_max": 3, "draft_p_min": 0.6}),
                             ik_build("stages"), qwen())  # fmt: skip
    assert spec.args[-2:] == ("--spec-type", "mtp:n_max=3,p_min=0.6")
    assert not spec.blockers
    assert not {"-mtp", "--draft-max", "--draft-p-min", "--draft-min"} & set(spec.args)
    note = spec.note_for("--spec-type")
    assert note is not None and note.setting == "mtp.enabled" and "0.6" in note.explanation
    p0 = launch_spec(plan(mtp={"draft_p_min": 0.0, "draft_min": 1}), ik_build("stages"),
                           qwen())  # fmt: skip
    assert p0.args[-1] == "mtp:n_max=2,n_min=1,p_min=0"  # the default would differ by era


def test_the_pinned_ik_keeps_the_old_spelling_and_cannot_load_qwen35moe_with_mtp() -> None:
    glm = qwen("glm4moe")
    spec = launch_spec(plan(mtp={"enabled": True, "draft_max": 3}), ik_build("pinned"), glm)
    assert spec.args[-5:] == ("-mtp", "--draft-max", "3", "--draft-p-min", "0.75")
    refused = launch_spec(plan(), ik_build("pinned"), qwen())
    assert "-mtp" not in refused.args and refused.blockers
    assert mtp_can_run(ik_build("pinned"), qwen()) is not None
    assert mtp_can_run(ik_build("stages"), qwen()) is None
    assert mtp_can_run(ik_build("stages"), qwen("llama", nextn=0)) == (
        "the model has no MTP (nextn) layer"
    )


def test_each_era_refuses_the_other_eras_mtp_request() -> None:
    # today's ik without the stage syntax answered: MTP on as asked cannot be written
    no_stage = ik_build(
        "stages", spec_types=("none",), accepted_flags=ik_stages.PROFILE.documented_flags
    )
    assert profile_for(no_stage) is ik.PROFILE  # described as what it answered: no stages...
    with pytest.raises(AdapterError, match="-mtp"):  # ...and no -mtp either
        launch_spec(plan(mtp={"enabled": True}), no_stage, qwen("glm4moe"))


def test_a_draft_model_on_todays_ik_is_a_draft_stage() -> None:
    spec = launch_spec(
        plan(mtp={"enabled": False, "draft_max": 4, "draft_p_min": 0.5},
             draft={"path": "/m/draft.gguf"}),
        ik_build("stages"),
    )  # fmt: skip
    tail = spec.args[spec.args.index("-md") :]
    assert tail == ("-md", "/m/draft.gguf", "-ngld", "999", "--spec-type",
                    "draft:n_max=4,p_min=0.5", "-ctkd", "f16", "-ctvd", "f16")  # fmt: skip


def test_every_era_profile_is_probed_and_spells_only_what_it_accepts() -> None:
    from mtpstudio.core.engines.probe import CANDIDATE_FLAGS

    probed = {spec.flag for spec in CANDIDATE_FLAGS} | FILE_PROBED_FLAGS
    for profile in (upstream.PROFILE, ik.PROFILE, ik_stages.PROFILE):
        for table in (profile.spellings, profile.draft.spellings):
            spelled = {s for entry in table.values() for s in entry.spellings}
            assert spelled <= probed, (profile.era, sorted(spelled - probed))
    legacy = {"-mtp", "--draft-max", "--draft-p-min", "--draft-min", "--draft", "--draft-n"}
    assert not legacy & set(ik_stages.PROFILE.documented_flags)


def test_todays_ik_drafts_with_one_slot_only() -> None:
    two = launch_spec(plan(runtime={"parallel": 2}), ik_build("stages"), qwen())
    assert any("--parallel 2" in b for b in two.blockers)
    assert any("--parallel 1" in a for a in two.alternatives)
    off = launch_spec(plan(runtime={"parallel": 2}, mtp={"enabled": False}),
                            ik_build("stages"), qwen())  # fmt: skip
    assert not off.blockers  # nothing drafts: any number of slots
    pinned = launch_spec(plan(runtime={"parallel": 2}, mtp={"enabled": True}),
                               ik_build("pinned"), qwen("glm4moe"))  # fmt: skip
    assert not pinned.blockers  # the pinned ik drafts with several slots


# -- issue 34 item 7: upstream after b11434 maps the model in ranges -----------------------------


def upstream_build(build_number: int | None) -> EngineBuild:
    profile = upstream.PROFILE
    return EngineBuild(
        binary=Path("/opt/llama.cpp/build/bin/llama-server"),
        flavour=EngineFlavour.UPSTREAM,
        version=str(build_number),
        build_number=build_number,
        backends=(Backend.CPU,),
        accepted_flags=profile.documented_flags,
        spec_types=profile.documented_spec_types,
        mtp=MtpSupport.AVAILABLE,
    )


def test_builds_after_b11434_are_the_era_that_maps_in_ranges() -> None:
    from mtpstudio.core.engines.profiles import upstream_ranges

    assert profile_for(upstream_build(11739)) is upstream_ranges.PROFILE
    assert profile_for(upstream_build(11434)) is upstream.PROFILE
    assert profile_for(upstream_build(None)) is upstream.PROFILE  # no number: the base era
    assert profile_for(EngineFlavour.UPSTREAM) is upstream.PROFILE
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "engines"
    header = (fixtures / "upstream-11739" / "llama_model_params.h").read_text()
    assert "bool load_mtp;" in header  # the MTP block loads only when asked for


def test_with_mtp_off_the_newer_era_maps_the_mtp_block_less() -> None:
    """The 35B's memory-mapped weights with MTP off: b11434 maps one span per file, the MTP
    block between the trunk and the output layer inside it; the newer era maps runs of CPU
    tensors, 429.87 MiB less (the issue's recording of llama-cpp-py-sync 0.11739) — the MTP
    block's own bytes."""
    from mtpstudio.core.catalog.model_choice import load_model_info
    from mtpstudio.core.memory.devices import HostSpec
    from mtpstudio.core.memory.machine import MachineFacts
    from mtpstudio.core.memory.placement import ModelWeights
    from mtpstudio.core.planner.resolve import PlanningContext, budget_for, resolve
    from mtpstudio.core.units import MIB

    base = plan_from_dict({"device": "cpu", "mtp": {"enabled": False}})  # the demo card
    info = load_model_info(base.model)
    mapped = {}
    for number in (11434, 11739):
        machine = MachineFacts(HostSpec(), (), (upstream_build(number),))
        resolved = resolve(base, PlanningContext(machine, info))
        mapped[number] = budget_for(resolved).parts["weights_cpu"]
    weights = ModelWeights.from_model(info)
    block = sum(lw.dense_bytes + lw.expert_bytes for lw in weights.layers
                if lw.layer >= info.n_layer)  # fmt: skip
    assert mapped[11434] - mapped[11739] == block
    assert round(block / MIB, 2) == pytest.approx(429.87, abs=0.02)
