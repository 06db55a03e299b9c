"""What an engine build can do, phrased for people (badges, reasons to disable a setting)."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.engines.build import EngineBuild, MtpSupport
from mtpstudio.core.engines.flags import Option
from mtpstudio.core.engines.mtp import build_mtp_blocker, mtp_can_run
from mtpstudio.core.engines.profiles import profile_for
from mtpstudio.core.engines.spec import SpecBuilder
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import EngineFlavour, LoadMode, MoePlacement
from mtpstudio.core.plan.schema import Plan

MTP_SETTINGS = ("mtp.draft_max", "mtp.draft_min", "mtp.draft_p_min")
DRAFT_CACHE_SETTINGS = ("mtp.cache_type_k", "mtp.cache_type_v")


def engine_name(flavour: EngineFlavour) -> str:
    return profile_for(flavour).name


def _builder(build: EngineBuild) -> SpecBuilder:
    """The profile's spelling logic for ``build`` (the same one the command line uses)."""
    return SpecBuilder(profile_for(build).spellings, build)


def option_accepted(build: EngineBuild, option: Option) -> bool:
    """True when the build accepted one of its profile's spellings of ``option``."""
    return _builder(build).accepts(option)


def spelled(build: EngineBuild, option: Option) -> str:
    """The first spelling the build accepts (or the preferred one)."""
    builder = _builder(build)
    return builder.spelling(option) or builder.preferred(option)


@dataclass(frozen=True)
class Capability:
    """One badge: a short name, whether the build has it, and a sentence for the tooltip."""

    name: str
    available: bool
    detail: str
    uncertain: bool = False


def build_mtp_reason(build: EngineBuild) -> str | None:
    """Why this build cannot draft with MTP at all (None: it can, or may)."""
    return build_mtp_blocker(build)


def mtp_reason(build: EngineBuild, model: ModelInfo | None) -> str | None:
    """Why MTP cannot be used with this build and model (None: it can)."""
    return mtp_can_run(build, model)


def build_capabilities(build: EngineBuild) -> list[Capability]:
    """The badges of a build: MTP, fit, expert offload, load mode, draft cache types, key file."""
    caps: list[Capability] = []
    mtp_no = build_mtp_reason(build)
    profile = profile_for(build)
    if mtp_no is not None:
        caps.append(Capability("MTP", False, mtp_no[:1].upper() + mtp_no[1:] + "."))
    elif build.mtp is MtpSupport.UNKNOWN_UNTIL_LAUNCH:
        caps.append(
            Capability(
                "MTP",
                True,
                f"Accepts {profile.mtp.words}; whether MTP is active is decided when the model "
                "loads.",
                uncertain=True,
            )
        )
    else:
        caps.append(Capability("MTP", True, f"Drafts with {profile.mtp.words}."))
    fit = option_accepted(build, Option.FIT)
    caps.append(
        Capability(
            "fit",
            fit,
            f"The engine can place experts itself ({spelled(build, Option.FIT)})."
            if fit
            else "No --fit: the expert placement must be given.",
        )
    )
    ncmoe = option_accepted(build, Option.N_CPU_MOE)
    caps.append(
        Capability(
            "n-cpu-moe",
            ncmoe,
            "Moves the experts of the first N layers to RAM (--n-cpu-moe)."
            if ncmoe
            else "No --n-cpu-moe: expert offload is written as -ot patterns.",
        )
    )
    lm = option_accepted(build, Option.LOAD_MODE)
    old = option_accepted(build, Option.MLOCK) or option_accepted(build, Option.NO_MMAP)
    caps.append(
        Capability(
            "load mode",
            lm or old,
            "Load mode with -lm." if lm else ("--mlock / --no-mmap." if old else "No load modes."),
        )
    )
    draft_types = (
        option_accepted(build, Option.DRAFT_CACHE_K) and profile.memory.mtp_uses_draft_cache_types
    )
    caps.append(
        Capability(
            "draft cache types",
            draft_types,
            "The MTP draft context has its own K/V cache types."
            if draft_types
            else "The MTP draft context uses the main cache types.",
        )
    )
    keyfile = option_accepted(build, Option.API_KEY_FILE)
    caps.append(
        Capability(
            "key file",
            keyfile,
            "Reads the API key from a file (--api-key-file)."
            if keyfile
            else "The API key must go on the command line.",
        )
    )
    return caps


def disabled_reasons(build: EngineBuild, model: ModelInfo | None, plan: Plan) -> dict[str, str]:
    """Settings (``mtp.enabled``, ``runtime.moe=fit`` …) this build/model cannot honour, and why.

    Keys are Plan paths; ``path=value`` keys name a single choice of a setting.
    """
    reasons: dict[str, str] = {}
    mtp = mtp_reason(build, model)
    if mtp is not None:
        reasons["mtp.enabled"] = mtp
        for key in (*MTP_SETTINGS, *DRAFT_CACHE_SETTINGS):
            reasons[key] = f"MTP cannot be used: {mtp}"
    elif plan.mtp.enabled is False:
        for key in (*MTP_SETTINGS, *DRAFT_CACHE_SETTINGS):
            reasons[key] = "MTP is off"
    if "mtp.cache_type_k" not in reasons:
        if not profile_for(build).memory.mtp_uses_draft_cache_types:
            why = f"{engine_name(build.flavour)}'s MTP context uses the main cache types"
            reasons["mtp.cache_type_k"] = reasons["mtp.cache_type_v"] = why
        elif not option_accepted(build, Option.DRAFT_CACHE_K):
            why = "this build has no flag for the draft cache types"
            reasons["mtp.cache_type_k"] = reasons["mtp.cache_type_v"] = why
    if "mtp.draft_min" not in reasons and not option_accepted(build, Option.DRAFT_MIN):
        reasons["mtp.draft_min"] = "this build has no flag for the minimum draft depth"
    if not option_accepted(build, Option.FIT):
        reasons[f"runtime.moe={MoePlacement.FIT.value}"] = "this build has no --fit"
    if model is not None and not model.is_moe:
        reasons["runtime.n_cpu_moe"] = "the model has no experts"
        for choice in (MoePlacement.FIT, MoePlacement.ALL_CPU):
            reasons.setdefault(f"runtime.moe={choice.value}", "the model has no experts")
    elif plan.runtime.moe is not MoePlacement.N_CPU_MOE:
        reasons["runtime.n_cpu_moe"] = "used only with 'first N layers on the CPU'"
    if plan.runtime.moe is MoePlacement.FIT:
        reasons["runtime.n_gpu_layers"] = "the engine's fit chooses the GPU layers"
    lm = option_accepted(build, Option.LOAD_MODE)
    if not lm and not option_accepted(build, Option.NO_MMAP):
        reasons[f"runtime.load_mode={LoadMode.NO_MMAP.value}"] = (
            "this build cannot load without mmap"
        )
    if not lm and not option_accepted(build, Option.MLOCK):
        reasons[f"runtime.load_mode={LoadMode.MLOCK.value}"] = "this build cannot lock the weights"
    return reasons
