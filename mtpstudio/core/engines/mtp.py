"""Can MTP run here? The one answer, from a build's profile, what it answered, and the model.

``mtp_can_run`` is the only place that decides; the planner (``planning.resolve``) asks it once
and the argv builder, the budget, the badges and the verdict read that decision.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.engines.flags import Option
from mtpstudio.core.engines.profiles import profile_for
from mtpstudio.core.engines.profiles.engine_profile import EngineProfile, MtpRequest
from mtpstudio.core.engines.spec import SpecBuilder
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan

__all__ = [
    "MtpDecision",
    "as_documented",
    "build_mtp_blocker",
    "decide_mtp",
    "model_mtp_blocker",
    "mtp_can_run",
    "mtp_support",
]


def as_documented(build: EngineBuild, profile: EngineProfile | None = None) -> EngineBuild:
    """``build`` with its profile's documented flags standing in for a probe it never had."""
    profile = profile or profile_for(build)
    return dataclasses.replace(
        build,
        accepted_flags=profile.documented_flags,
        spec_types=build.spec_types or profile.documented_spec_types,
        mtp=profile.documented_mtp,
        backends=build.backends if build.has_gpu_backend else (Backend.CUDA, Backend.CPU),
    )


def build_mtp_blocker(build: EngineBuild) -> str | None:
    """Why this build cannot draft with MTP at all (None: it can, or may)."""
    profile = profile_for(build)
    rule = profile.mtp
    if rule.request is MtpRequest.SWITCH:
        if not SpecBuilder(profile.spellings, build).accepts(Option.MTP):
            return f"this {profile.name} build has no {rule.words} flag"
        return None
    if rule.request is MtpRequest.SPEC_TYPE_PARAMS:
        assert rule.params is not None
        if rule.params.probe not in build.spec_types:
            return f"this build does not take {rule.words}; choose a newer {profile.name} build"
        return None
    if build.mtp is not MtpSupport.AVAILABLE or (
        build.spec_types and rule.spec_type not in build.spec_types
    ):
        return (
            f"this build cannot draft with MTP (its --spec-type has no {rule.spec_type}); "
            f"choose a newer {profile.name} build"
        )
    return None


def mtp_can_run(build: EngineBuild, model: ModelInfo | None) -> str | None:
    """Why MTP cannot run with this build and model (None: it can).

    With no model known, only the build is judged. An unprobed build is judged by its
    profile's documented flags.
    """
    profile = profile_for(build)
    if not build.accepted_flags:
        build = as_documented(build, profile)
    reason = build_mtp_blocker(build)
    if reason is not None or model is None:
        return reason
    return model_mtp_blocker(model, profile.memory, profile.name)


def model_mtp_blocker(
    model: ModelInfo, facts: EngineMemoryFacts, name: str | None = None
) -> str | None:
    """Why an engine with these memory facts cannot run this model's MTP (None: it can).

    The model half of ``mtp_can_run``; the budget asks it for a plan whose MTP is decided.
    """
    if not model.has_mtp:
        return "the model has no MTP (nextn) layer"
    architectures = facts.mtp_architectures
    if model.architecture not in architectures:
        return (
            f"{name or facts.flavour.value} runs MTP only for {', '.join(sorted(architectures))} "
            f"models, and this model is {model.architecture}"
        )
    return None


@dataclass(frozen=True)
class MtpDecision:
    """MTP, decided once for a plan, a build and a model.

    Attributes:
        requested: the command line asks for MTP (the plan's on, or auto decided on).
        active: the engine will draft with MTP (requested, and it can run here).
        reason: why it cannot run (None: it can).
        line: one sentence for people: on or off, and why.
    """

    requested: bool
    active: bool
    reason: str | None
    line: str

    def resolved(self, plan: Plan) -> Plan:
        """``plan`` with MTP auto replaced by this decision (unchanged when on or off)."""
        if plan.mtp.enabled is not None:
            return plan
        mtp = plan.mtp.model_copy(update={"enabled": self.requested})
        return plan.model_copy(update={"mtp": mtp})


def decide_mtp(plan: Plan, build: EngineBuild, model: ModelInfo | None) -> MtpDecision:
    """MTP for ``plan`` on ``build`` with ``model`` (auto: on exactly where it can run)."""
    enabled = plan.mtp.enabled
    name = profile_for(build).name
    if enabled is False:
        return MtpDecision(False, False, None, "MTP off (as asked).")
    if enabled is None and plan.draft.path is not None:
        line = f"MTP auto: off (the draft model {plan.draft.path.name} drafts instead)."
        return MtpDecision(False, False, None, line)
    reason = mtp_can_run(build, model)
    if enabled is True:
        line = (
            "MTP on (as asked)."
            if reason is None
            else (f"MTP on as asked, but it cannot run: {reason}.")
        )
        return MtpDecision(True, reason is None, reason, line)
    if reason is None:
        line = f"MTP auto: on (the model has an MTP layer and {name} can run it)."
        if model is None:
            line = f"MTP auto: on ({name} can run it)."
        return MtpDecision(True, True, None, line)
    return MtpDecision(False, False, reason, f"MTP auto: off ({reason}).")


def mtp_support(build: EngineBuild) -> MtpSupport:
    """What detection records for a probed build: MTP available, decided at load, or absent."""
    profile = profile_for(build)
    rule = profile.mtp
    if rule.request is MtpRequest.SWITCH:
        if SpecBuilder(profile.spellings, build).accepts(Option.MTP):
            return MtpSupport.UNKNOWN_UNTIL_LAUNCH
        return MtpSupport.UNAVAILABLE
    wanted = rule.params.probe if rule.params is not None else rule.spec_type
    return MtpSupport.AVAILABLE if wanted in build.spec_types else MtpSupport.UNAVAILABLE
