"""Drafting flags: depth, p-min and draft cache types (MTP and a draft model), and the draft model.

A separate draft model is switched on the way its profile says (upstream: ``--spec-type
draft-simple``; ik_llama.cpp: ``-md`` alone). The depth, p-min and draft cache types come from
the plan's ``mtp`` section (the speculative-decoding settings both kinds of drafting share).
P-min is always written out: the engines' defaults differ and changed between builds.
"""

from __future__ import annotations

import dataclasses

from mtpstudio.core.engines.flags import Option
from mtpstudio.core.engines.profiles.engine_profile import EngineProfile, SpecTypeParams
from mtpstudio.core.engines.spec import SpecBuilder, format_float
from mtpstudio.core.plan.schema import Plan

__all__ = [
    "draft_gpu_layers",
    "emit_draft_cache_types",
    "emit_draft_limits",
    "emit_draft_model",
    "emit_spec_type_params",
]


def draft_gpu_layers(plan: Plan, cpu_only: bool) -> int:
    """-ngld for the plan: the plan's value, else all (999) on a GPU target and 0 on the CPU."""
    if plan.draft.gpu_layers is not None:
        return plan.draft.gpu_layers
    return 0 if cpu_only else 999


def emit_draft_limits(
    b: SpecBuilder, plan: Plan, *, depth_purpose: str, depth_note: str = ""
) -> None:
    """The draft depth, minimum depth and p-min flags, for MTP and a draft model alike."""
    mtp = plan.mtp
    b.emit(
        Option.DRAFT_MAX,
        [str(mtp.draft_max)],
        "mtp.draft_max",
        f"Draft at most {mtp.draft_max} tokens per step{depth_note}.",
        purpose=depth_purpose,
    )
    if mtp.draft_min > 0:
        b.emit(
            Option.DRAFT_MIN,
            [str(mtp.draft_min)],
            "mtp.draft_min",
            f"Draft at least {mtp.draft_min} tokens per step.",
            purpose="the minimum draft depth",
        )
    b.emit(
        Option.DRAFT_P_MIN,
        [format_float(mtp.draft_p_min)],
        "mtp.draft_p_min",
        f"Stop drafting when the draft's probability falls below {format_float(mtp.draft_p_min)}.",
        purpose="the draft p-min",
    )


def emit_spec_type_params(
    b: SpecBuilder, plan: Plan, params: SpecTypeParams, setting: str, what: str, purpose: str
) -> None:
    """One ``--spec-type NAME:n_max=…,p_min=…`` entry carrying the depth and p-min."""
    mtp = plan.mtp
    p_min = format_float(mtp.draft_p_min)
    value = params.value(mtp.draft_max, p_min, mtp.draft_min)
    b.emit(
        Option.SPEC_TYPE,
        [value],
        setting,
        f"{what}: at most {mtp.draft_max} tokens per step, stopping when the draft's "
        f"probability falls below {p_min}.",
        purpose=purpose,
    )


def emit_draft_cache_types(
    b: SpecBuilder, plan: Plan, *, whose: str, drafter: str, note: str = ""
) -> None:
    """The draft context's K and V cache types: "Store {whose} K cache as q8_0{note}."."""
    mtp = plan.mtp
    for option, value, setting, which in (
        (Option.DRAFT_CACHE_K, mtp.cache_type_k, "mtp.cache_type_k", "K"),
        (Option.DRAFT_CACHE_V, mtp.cache_type_v, "mtp.cache_type_v", "V"),
    ):
        b.emit(
            option,
            [value.value],
            setting,
            f"Store {whose} {which} cache as {value.value}{note}.",
            purpose=f"the {drafter} {which} cache type",
        )


def emit_draft_model(
    plan: Plan, main: SpecBuilder, profile: EngineProfile, *, cpu_only: bool
) -> None:
    """Append the draft model's flags to ``main`` (nothing when the plan has no draft model).

    Raises:
        AdapterError: the build accepts no spelling of a flag the draft model needs.
    """
    path = plan.draft.path
    if path is None:
        return
    rule = profile.draft
    build = main.build
    if build.version == "documented":  # planning without a binary: the documented spellings
        documented = frozenset(e.spellings[0] for e in rule.spellings.values())
        build = dataclasses.replace(build, accepted_flags=build.accepted_flags | documented)
    b = SpecBuilder(rule.spellings, build, main.who)
    b.emit(
        Option.DRAFT_MODEL,
        [str(path)],
        "draft.path",
        "The small draft model that proposes tokens for the main model to verify.",
        purpose="a separate draft model",
    )
    if rule.params is None and rule.spec_type is not None:
        b.emit(
            Option.SPEC_TYPE,
            [rule.spec_type],
            "draft.path",
            "Speculative decoding with the draft model.",
            purpose="drafting with a draft model",
        )
    ngld = draft_gpu_layers(plan, cpu_only)
    b.emit(
        Option.DRAFT_GPU_LAYERS,
        [str(ngld)],
        "draft.gpu_layers",
        "Keep the draft model on the CPU." if ngld == 0 else f"Offload {ngld} draft layers.",
        purpose="the draft model's GPU layers",
    )
    if rule.params is not None:
        emit_spec_type_params(
            b, plan, rule.params, "draft.path", "Speculative decoding with the draft model",
            "drafting with a draft model",
        )  # fmt: skip
    else:
        emit_draft_limits(b, plan, depth_purpose="the draft depth")
    emit_draft_cache_types(b, plan, whose="the draft model's", drafter="draft")
    main.notes.extend(b.notes)
    for warning in b.warnings:
        main.warn(warning)
