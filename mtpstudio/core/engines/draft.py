"""A separate draft model's flags for each flavour (``-md``, ``-ngld``, depth, p-min, caches).

Upstream drafts with it through ``--spec-type draft-simple``; ik_llama.cpp drafts whenever
``-md`` is given. The depth, p-min and draft cache types come from the plan's ``mtp`` section
(the speculative-decoding settings both kinds of drafting share).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mtpstudio.core.engines.base import SpecBuilder, emit_draft_cache_types, emit_draft_limits
from mtpstudio.core.engines.flags import FlagSpelling, Option
from mtpstudio.core.plan import EngineFlavour, Plan

DRAFT_SPEC_TYPE = "draft-simple"

UPSTREAM_DRAFT: Mapping[Option, FlagSpelling] = {
    Option.DRAFT_MODEL: FlagSpelling(("-md", "--spec-draft-model", "--model-draft"), "d.gguf"),
    Option.SPEC_TYPE: FlagSpelling(("--spec-type",), "none"),
    Option.DRAFT_GPU_LAYERS: FlagSpelling(
        ("-ngld", "--spec-draft-ngl", "--gpu-layers-draft"), "99"
    ),
    Option.DRAFT_MAX: FlagSpelling(("--spec-draft-n-max", "--draft-max", "--draft-n"), "2"),
    Option.DRAFT_MIN: FlagSpelling(("--spec-draft-n-min", "--draft-min", "--draft-n-min"), "0"),
    Option.DRAFT_P_MIN: FlagSpelling(("--spec-draft-p-min", "--draft-p-min"), "0.5"),
    Option.DRAFT_CACHE_K: FlagSpelling(
        ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"), "f16"
    ),
    Option.DRAFT_CACHE_V: FlagSpelling(
        ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"), "f16"
    ),
}
IK_DRAFT: Mapping[Option, FlagSpelling] = {
    Option.DRAFT_MODEL: FlagSpelling(("-md", "--model-draft"), "d.gguf"),
    Option.DRAFT_GPU_LAYERS: FlagSpelling(("-ngld", "--gpu-layers-draft"), "99"),
    Option.DRAFT_MAX: FlagSpelling(("--draft-max", "--draft", "--draft-n"), "2"),
    Option.DRAFT_MIN: FlagSpelling(("--draft-min", "--draft-n-min"), "0"),
    Option.DRAFT_P_MIN: FlagSpelling(("--draft-p-min",), "0.5"),
    Option.DRAFT_CACHE_K: FlagSpelling(("-ctkd", "--cache-type-k-draft"), "f16"),
    Option.DRAFT_CACHE_V: FlagSpelling(("-ctvd", "--cache-type-v-draft"), "f16"),
}


def draft_spellings(flavour: EngineFlavour) -> Mapping[Option, FlagSpelling]:
    return UPSTREAM_DRAFT if flavour is EngineFlavour.UPSTREAM else IK_DRAFT


def draft_gpu_layers(plan: Plan) -> int:
    """-ngld for the plan: the plan's value, else all (999) on a GPU plan and 0 on the CPU."""
    if plan.draft.gpu_layers is not None:
        return plan.draft.gpu_layers
    return 0 if plan.device == "cpu" else 999


def emit_draft_model(plan: Plan, main: SpecBuilder) -> None:
    """Append the draft model's flags to ``main`` (nothing when the plan has no draft model).

    Raises:
        AdapterError: the build accepts no spelling of a flag the draft model needs.
    """
    path = plan.draft.path
    if path is None:
        return
    flavour = main.build.flavour
    spellings = draft_spellings(flavour)
    build = main.build
    if build.version == "documented":  # planning without a binary: the documented spellings
        documented = frozenset(e.spellings[0] for e in spellings.values())
        build = dataclasses.replace(build, accepted_flags=build.accepted_flags | documented)
    b = SpecBuilder(spellings, build)
    b.emit(
        Option.DRAFT_MODEL,
        [str(path)],
        "draft.path",
        "The small draft model that proposes tokens for the main model to verify.",
        purpose="a separate draft model",
    )
    if flavour is EngineFlavour.UPSTREAM:
        b.emit(
            Option.SPEC_TYPE,
            [DRAFT_SPEC_TYPE],
            "draft.path",
            "Speculative decoding with the draft model.",
            purpose="drafting with a draft model",
        )
    ngld = draft_gpu_layers(plan)
    b.emit(
        Option.DRAFT_GPU_LAYERS,
        [str(ngld)],
        "draft.gpu_layers",
        "Keep the draft model on the CPU." if ngld == 0 else f"Offload {ngld} draft layers.",
        purpose="the draft model's GPU layers",
    )
    emit_draft_limits(b, plan, depth_purpose="the draft depth")
    emit_draft_cache_types(b, plan, whose="the draft model's", drafter="draft")
    main.notes.extend(b.notes)
    for warning in b.warnings:
        main.warn(warning)
