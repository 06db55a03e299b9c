"""One module per engine flavour (or era): its profile as data (``PROFILE``), and the lookups.

Each flavour's profiles are listed newest era first; a build gets the first whose era marker it
answered (``EngineProfile.matches``), else the flavour's base era. Adding a flavour or an era is
one module here plus its line in ``PROFILES``.
"""

from __future__ import annotations

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.profiles import (
    ik,
    ik_stages,
    upstream,
    upstream_moe_cache,
    upstream_ranges,
)
from mtpstudio.core.engines.profiles.engine_profile import EngineProfile
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.plan.choices import EngineFlavour

__all__ = [
    "PROFILES",
    "default_port_words",
    "documented_profile",
    "era_that_runs",
    "era_words",
    "profile_for",
    "profiles_of",
    "spec_type_candidates",
]

PROFILES: tuple[EngineProfile, ...] = (
    upstream_ranges.PROFILE,
    upstream_moe_cache.PROFILE,
    upstream.PROFILE,
    ik_stages.PROFILE,
    ik.PROFILE,
)
"""Every profile; within a flavour, newer eras first and the base era (no marker) last."""


def profiles_of(flavour: EngineFlavour) -> tuple[EngineProfile, ...]:
    """The profiles of ``flavour``, newest era first."""
    return tuple(p for p in PROFILES if p.flavour is flavour)


def _base(flavour: EngineFlavour) -> EngineProfile:
    found = [
        p
        for p in profiles_of(flavour)
        if p.era_marker is None and p.min_build is None and p.era_flag is None
    ]
    if not found:
        raise AdapterError(
            f"mtpstudio has no engine profile for {flavour.value}",
            hint="Choose upstream or ik as the plan's engine.",
        )
    return found[-1]


DOCUMENTED_ERAS = {EngineFlavour.IK: ik_stages.PROFILE}
"""The era a flavour is planned with where no build was detected, when not its base era:
today's ik_llama.cpp (8337e4c, the era that runs qwen35moe's MTP; the 0.1.5 sdist's is months
older). Upstream's stays the pinned b11434."""


def documented_profile(flavour: EngineFlavour) -> EngineProfile:
    """The profile a flavour is planned with when no build of it was found."""
    return DOCUMENTED_ERAS.get(flavour) or _base(flavour)


def profile_for(build: EngineBuild | EngineFlavour) -> EngineProfile:
    """The profile describing a build (by what it answered), or a flavour's base era."""
    if isinstance(build, EngineFlavour):
        return _base(build)
    return next((p for p in profiles_of(build.flavour) if p.matches(build)), _base(build.flavour))


def spec_type_candidates(base: tuple[str, ...]) -> tuple[str, ...]:
    """``base`` plus every ``--spec-type`` value syntax a profile asks builds about (its MTP
    stage, and the marker of its era)."""
    extra = [p.mtp.params.probe for p in PROFILES if p.mtp.params is not None]
    markers = [p.era_marker for p in PROFILES if p.era_marker is not None]
    return tuple(dict.fromkeys([*base, *extra, *markers]))


def era_that_runs(flavour: EngineFlavour, architecture: str) -> EngineProfile | None:
    """The newest era of ``flavour`` that loads a GGUF of ``architecture`` with its MTP block
    and drafts with it (None: no era of this flavour does)."""
    for profile in profiles_of(flavour):
        if profile.mtp.unloadable_with_nextn.get(architecture) is None and (
            architecture in profile.memory.mtp_architectures
        ):
            return profile
    return None


def era_words(profile: EngineProfile) -> str:
    """``ik_llama.cpp 8337e4c (2026-08-15)``: the era's first words (before its colon)."""
    return profile.era.split(":")[0]


def default_port_words() -> str:
    """Where a llama-server started without ``--port`` listens, per era, in words (``9931 from
    llama.cpp b11549 on; 8080 before it and in ik_llama.cpp``): a URL guessed from the older
    default finds nothing on a newer build."""
    newest = next(p for p in profiles_of(EngineFlavour.UPSTREAM) if p.era_flag is not None)
    base = _base(EngineFlavour.UPSTREAM)
    ik = _base(EngineFlavour.IK)
    since = era_words(newest).split(" (")[0]
    older = "in ik_llama.cpp" if ik.default_port == base.default_port else ""
    return f"{newest.default_port} from {since} on; {base.default_port} before it" + (
        f" and {older}" if older else ""
    )
