"""A separate draft model: the flags each flavour gets, and its memory in the budget (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from support.argv import launch_spec

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.profiles.upstream import DRAFT_SPELLINGS as UPSTREAM_DRAFT
from mtpstudio.core.engines.registry import documented_build, memory_facts
from mtpstudio.core.errors import AdapterError, PlanError
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.draft import with_draft
from mtpstudio.core.memory.terms import kv_bytes_per_cell
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan

GPU = TargetDevice("CUDA0", "test GPU", 12 * 1024**3)
CPU = TargetDevice("CPU", "CPU", None)


def draft_plan(flavour: str, device: str = "auto", **changes: object) -> Plan:
    return plan_with(Plan(), {"model.path": "/m/main.gguf", "model.card": None,
                              "engine.flavour": flavour, "device": device,
                              "mtp.enabled": False, "draft.path": "/m/draft model.gguf",
                              "mtp.draft_max": 4, "mtp.draft_p_min": 0.5,
                              **changes})  # fmt: skip


def test_mtp_and_a_draft_model_are_exclusive() -> None:
    with pytest.raises(PlanError, match="not both"):
        plan_with(Plan(), {"mtp.enabled": True, "draft.path": "/d.gguf"})


def test_mtp_auto_with_a_draft_model_resolves_off() -> None:
    from mtpstudio.core.engines.mtp import decide_mtp

    plan = plan_with(Plan(), {"draft.path": "/d.gguf"})  # MTP on auto: allowed
    build = documented_build(EngineFlavour.UPSTREAM)
    assert decide_mtp(plan, build, None).resolved(plan).mtp.enabled is False


def test_upstream_draft_flags() -> None:
    spec = launch_spec(
        draft_plan("upstream"), documented_build(EngineFlavour.UPSTREAM), assume_documented=True
    )
    assert spec.args[spec.args.index("-md") :] == (
        "-md", "/m/draft model.gguf", "--spec-type", "draft-simple", "-ngld", "999",
        "--spec-draft-n-max", "4", "--spec-draft-p-min", "0.5", "--spec-draft-type-k", "f16",
        "--spec-draft-type-v", "f16",
    )  # fmt: skip
    note = spec.note_for("-md")
    assert note is not None and note.setting == "draft.path"


def test_ik_draft_flags_on_a_cpu_plan() -> None:
    """Without a detected build ik is planned as today's era (8337e4c): the draft model's depth
    and p-min go into its ``--spec-type draft:`` stage."""
    spec = launch_spec(draft_plan("ik", "cpu"), documented_build(EngineFlavour.IK),
                             assume_documented=True)  # fmt: skip
    tail = spec.args[spec.args.index("-md") :]
    assert tail == ("-md", "/m/draft model.gguf", "-ngld", "0", "--spec-type",
                    "draft:n_max=4,p_min=0.5", "-ctkd", "f16", "-ctvd", "f16")  # fmt: skip


def probed_upstream(accepted_draft_flags: set[str]) -> EngineBuild:
    """The documented upstream build as if probed, accepting these draft-model spellings."""
    build = documented_build(EngineFlavour.UPSTREAM)
    return dataclasses.replace(
        build, version="probed", accepted_flags=build.accepted_flags | accepted_draft_flags
    )


ALL_DRAFT_SPELLINGS = {s for entry in UPSTREAM_DRAFT.values() for s in entry.spellings}


def test_a_build_without_draft_gpu_layers_is_refused() -> None:
    build = probed_upstream(
        ALL_DRAFT_SPELLINGS - {"-ngld", "--spec-draft-ngl", "--gpu-layers-draft"}
    )
    with pytest.raises(AdapterError, match="-ngld / --spec-draft-ngl / --gpu-layers-draft"):
        launch_spec(draft_plan("upstream"), build)


def test_an_older_spelling_is_used_when_the_first_was_rejected() -> None:
    build = probed_upstream(ALL_DRAFT_SPELLINGS - {"-md", "--spec-draft-model"})
    spec = launch_spec(draft_plan("upstream"), build)
    assert "-md" not in spec.args and "--model-draft" in spec.args


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_budget_counts_the_draft_on_its_device(
    flavour: str, tiny_model: Callable[..., Path]
) -> None:
    main = read_model_info(tiny_model("dense"))
    draft = read_model_info(tiny_model("draft"))
    facts = memory_facts(EngineFlavour(flavour))
    kv = kv_bytes_per_cell(draft, len(draft.attention_layers), "f16", "f16") * 4096
    plan = draft_plan(flavour, **{"runtime.ctx": 4096})
    on_gpu = with_draft(compute_budget(plan, main, GPU, facts), plan, draft, facts)
    seg = on_gpu.devices[0].segments
    assert seg["draft_kv_cache"] == kv
    # the token embedding stays in system RAM; the rest of the draft is on the GPU
    assert seg["draft_weights"] + on_gpu.host.segments["draft_weights"] >= draft.tensor_bytes
    assert seg["draft_compute"] > 0
    assert on_gpu.host.segments["draft_kv_cache"] == 0
    assert (
        on_gpu.devices[0].used_bytes > compute_budget(plan, main, GPU, facts).devices[0].used_bytes
    )

    cpu_plan = draft_plan(flavour, "cpu", **{"runtime.ctx": 4096})
    on_cpu = with_draft(compute_budget(cpu_plan, main, CPU, facts), cpu_plan, draft, facts)
    seg = on_cpu.devices[0].segments
    assert seg["draft_kv_cache"] == kv and seg["draft_weights"] == draft.tensor_bytes
    assert on_cpu.parts["draft_kv_cache"] == kv
