"""ik_llama.cpp ``llama-server`` as data: spellings, MTP, fit, memory, bench, detection.

Flags per engines.md §0, §3 and §6 (the snapshot in the pinned ik-llama-cpp-python sdist).
"""

from __future__ import annotations

import re
from types import MappingProxyType

from mtpstudio.core.engines.build import MtpSupport
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.engines.flags import SHARED_SPELLINGS, FlagSpelling, Option
from mtpstudio.core.engines.profiles.engine_profile import (
    BenchProtocol,
    DetectionRule,
    DraftRule,
    EngineProfile,
    FitRule,
    MtpRequest,
    MtpRule,
    SplitRule,
    VersionPattern,
)
from mtpstudio.core.engines.speed_facts import IK_SPEED
from mtpstudio.core.plan.choices import EngineFlavour

__all__ = ["DOCUMENTED_FLAGS", "DOCUMENTED_SPEC_TYPES", "IK_MTP_ARCHITECTURES", "PROFILE",
           "SPELLINGS"]  # fmt: skip

IK_MTP_ARCHITECTURES = frozenset({"glm4moe"})
"""Architectures whose MTP ik_llama.cpp honours (engines.md §0.1: GLM-4.x MoE only)."""

IK_INSTEAD = (
    "for MTP on this model use upstream llama.cpp (--engine upstream); on ik_llama.cpp use a "
    "GGUF converted without the MTP layer, with a draft model for speculative decoding"
)
"""What works where ik_llama.cpp cannot run the model's MTP (engines.md §0.1)."""

SPELLINGS = MappingProxyType(
    {
        **SHARED_SPELLINGS,
        Option.FIT: FlagSpelling(("--fit",), None),
        Option.FIT_MARGIN: FlagSpelling(("--fit-margin",), "1024"),
        Option.MLOCK: FlagSpelling(("--mlock",), None),
        Option.NO_MMAP: FlagSpelling(("--no-mmap",), None),
        Option.MTP: FlagSpelling(("-mtp", "--multi-token-prediction"), None),
        Option.DRAFT_MAX: FlagSpelling(("--draft-max", "--draft", "--draft-n"), "2"),
        Option.DRAFT_MIN: FlagSpelling(("--draft-min", "--draft-n-min"), "0"),
        Option.DRAFT_P_MIN: FlagSpelling(("--draft-p-min",), "0.5"),
    }
)

DOCUMENTED_FLAGS = frozenset(s for e in SPELLINGS.values() for s in e.spellings) | {
    "--spec-type", "-ctkd", "-ctvd", "--verbosity",
}  # fmt: skip
"""Flags of the ik_llama.cpp snapshot described in engines.md §3 (the profile's spellings and
four it does not emit)."""

DOCUMENTED_SPEC_TYPES = (
    "none", "ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
)  # fmt: skip

DRAFT_SPELLINGS = MappingProxyType(
    {
        Option.DRAFT_MODEL: FlagSpelling(("-md", "--model-draft"), "d.gguf"),
        Option.DRAFT_GPU_LAYERS: FlagSpelling(("-ngld", "--gpu-layers-draft"), "99"),
        **{o: SPELLINGS[o] for o in (Option.DRAFT_MAX, Option.DRAFT_MIN, Option.DRAFT_P_MIN)},
        Option.DRAFT_CACHE_K: FlagSpelling(("-ctkd", "--cache-type-k-draft"), "f16"),
        Option.DRAFT_CACHE_V: FlagSpelling(("-ctvd", "--cache-type-v-draft"), "f16"),
    }
)
"""A separate draft model's flags (MTP's depth and p-min spellings, the draft cache types)."""

MEMORY = EngineMemoryFacts(
    flavour=EngineFlavour.IK,
    kv_pad_flash=256,
    kv_pad_plain=32,
    per_slot_streams=False,
    recurrent_in_kv_buffer=True,
    recurrent_rollback_copies=False,
    mtp_architectures=IK_MTP_ARCHITECTURES,
    mtp_uses_draft_cache_types=False,
    fit_changes_ctx=False,
    fit_ctx_floor=0,
    reserves_all_logits=True,
)

PROFILE = EngineProfile(
    speed=IK_SPEED,
    flavour=EngineFlavour.IK,
    name="ik_llama.cpp",
    era="ik_llama.cpp in ik-llama-cpp-python 0.1.5 (engines.md §0, §3)",
    spellings=SPELLINGS,
    documented_flags=DOCUMENTED_FLAGS,
    documented_spec_types=DOCUMENTED_SPEC_TYPES,
    memory=MEMORY,
    mtp=MtpRule(
        request=MtpRequest.SWITCH,
        documented=MtpSupport.UNKNOWN_UNTIL_LAUNCH,
        note="Draft tokens with the model's own MTP (nextn) layer, where ik_llama.cpp supports it.",
        left_out_for_other_architectures=True,
        unknown_model_warning="ik_llama.cpp decides at load time whether MTP is active (this "
        "snapshot honours it only for GLM-4.x MoE models); check the log for 'MTP will be "
        "disabled'.",
        unloadable_with_nextn={
            "qwen35moe": "ik_llama.cpp cannot load this qwen35moe GGUF: it treats the MTP block "
            "as an ordinary layer and stops at a missing tensor"
        },
        instead=IK_INSTEAD,
        other_architectures_instead="for MTP on this model use upstream llama.cpp (--engine "
        "upstream); on ik_llama.cpp use a draft model for speculative decoding",
    ),
    draft=DraftRule(DRAFT_SPELLINGS),
    split=SplitRule((("layer", "layer"), ("row", None)), per_device_margins=False),
    fit=FitRule(
        on_values=(),
        off_values=None,
        margin=Option.FIT_MARGIN,
        note="Let ik_llama.cpp offload every layer and move experts to RAM, last layer first, "
        "until the model fits (it never changes the context).",
        zero_margin_reads_as=1024,
        counts_mtp_context=False,
    ),
    bench=BenchProtocol(
        endpoint="/v1/completions",
        n_predict_field="max_tokens",
        drafting_off_remedy=(
            "use upstream llama.cpp (this ik_llama.cpp build has no MTP for qwen35moe)",
            {"engine.flavour": "upstream"},
        ),
    ),
    detection=DetectionRule(
        version=VersionPattern(
            re.compile(r"^version: (\d+) \((\S+)\)\s*$", re.MULTILINE),
            version=1,
            build=1,
            commit=2,
            ambiguous=True,
        ),
        help_markers=(
            re.compile(r"^usage: \S+ \[options\]", re.MULTILINE),
            re.compile(r"^general:\s*$", re.MULTILINE),
        ),
        distinctive_flags=("-mtp", "--fit-margin"),
        binary_names=("llama-server", "ik_llama-server", "ik-llama-server"),
        home_build_dirs=("ik_llama.cpp/build/bin",),
    ),
    flash_attn_auto_note="Flash attention: ik_llama.cpp reads auto as on.",
)
