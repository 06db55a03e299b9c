"""ik_llama.cpp since speculative stages (commit 8337e4c, 2026-08-15, "Fix Qwen35+ MTP") as data.

This era takes repeated ``--spec-type NAME:key=value,…`` stages (``mtp:n_max=3,p_min=0.75``,
``draft:…``, ``ngram-mod:…``) and refuses the legacy ``-mtp``, ``--draft-max``, ``--draft-min``
and ``--draft-p-min`` ("legacy speculative option … is disabled"). It loads Qwen3.5/3.6 GGUFs
with their MTP block and runs their MTP. A build belongs to this era when it answered the
value-syntax probe ``--spec-type mtp:n_max=1,p_min=0.0 --version`` (recorded answers:
tests/fixtures/engines/ik-8337e4c/). Everything else is the base ik profile's.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from mtpstudio.core.engines.build import MtpSupport
from mtpstudio.core.engines.flags import FlagSpelling, Option
from mtpstudio.core.engines.profiles import ik
from mtpstudio.core.engines.profiles.engine_profile import (
    DraftRule,
    MtpRequest,
    MtpRule,
    SpecTypeParams,
)

__all__ = ["MTP_ARCHITECTURES", "MTP_STAGE", "PROFILE", "SPELLINGS"]

MTP_STAGE = SpecTypeParams("mtp", n_min="n_min")
"""``--spec-type mtp:n_max=N[,n_min=M],p_min=P`` (the keys its parser takes)."""
DRAFT_STAGE = SpecTypeParams("draft", n_min="n_min")
"""``--spec-type draft:…`` with ``-md``: a separate draft model."""

MTP_ARCHITECTURES = frozenset(
    {"qwen35moe", "qwen35", "glm4moe", "bailingmoe2", "bailingmoe3", "step35", "glm-dsa",
     "openpangu"}
)  # fmt: skip
"""Architectures whose NextN (MTP) layers this era loads and drafts with (src/llama-hparams.cpp
reads ``nextn_predict_layers`` for these at 8337e4c)."""

LEGACY = (Option.MTP, Option.DRAFT_MAX, Option.DRAFT_MIN, Option.DRAFT_P_MIN)
"""Options whose flags this era refuses: depth and p-min live inside the stage."""

SPELLINGS = MappingProxyType(
    {
        **{k: v for k, v in ik.SPELLINGS.items() if k not in LEGACY},
        Option.SPEC_TYPE: FlagSpelling(("--spec-type",), "none"),
    }
)

DRAFT_SPELLINGS = MappingProxyType(
    {
        **{k: v for k, v in ik.DRAFT_SPELLINGS.items() if k not in LEGACY},
        Option.SPEC_TYPE: FlagSpelling(("--spec-type",), "none"),
    }
)

PROFILE = dataclasses.replace(
    ik.PROFILE,
    era="ik_llama.cpp 8337e4c (2026-08-15): speculative stages in --spec-type",
    spellings=SPELLINGS,
    documented_flags=frozenset(s for e in SPELLINGS.values() for s in e.spellings)
    | {"-ctkd", "-ctvd", "--verbosity"},
    documented_spec_types=(*ik.DOCUMENTED_SPEC_TYPES, MTP_STAGE.probe, DRAFT_STAGE.probe),
    memory=dataclasses.replace(
        ik.MEMORY,
        mtp_architectures=MTP_ARCHITECTURES,
        mtp_layers_in_main_kv=True,  # KV self 0.25 MiB with MTP vs 0.12 without (tiny model)
        recurrent_step_checkpoints=True,  # "per_step_alloc: CPU per-step buffer = 0.11 MiB"
    ),
    mtp=MtpRule(
        request=MtpRequest.SPEC_TYPE_PARAMS,
        params=MTP_STAGE,
        documented=MtpSupport.AVAILABLE,
        note="Draft tokens with the model's own MTP (nextn) layer",
        left_out_for_other_architectures=True,
        instead=ik.IK_INSTEAD,
        other_architectures_instead="for MTP on this model use upstream llama.cpp (--engine "
        "upstream); on ik_llama.cpp use a draft model for speculative decoding",
    ),
    draft=DraftRule(DRAFT_SPELLINGS, params=DRAFT_STAGE),
    bench=dataclasses.replace(ik.PROFILE.bench, drafting_off_remedy=None),
    era_marker=MTP_STAGE.probe,
    # "Speculative decoding is currently limited to a single server slot (-np 1)" (exit 1)
    speculative_max_slots=1,
)
