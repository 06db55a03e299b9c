"""The engines' entry points: the profile of a build, its command line, its documented stand-in.

The profiles themselves are data under ``engines/profiles/`` (``profile_for`` picks one by what
a build answered); ``build_launch_spec`` is the one argv builder (``engines.argv``).
"""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.engines.argv import build_launch_spec
from mtpstudio.core.engines.build import Backend, EngineBuild
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.engines.profiles import (
    PROFILES,
    documented_profile,
    profile_for,
    profiles_of,
)
from mtpstudio.core.engines.spec import DEFAULT_BINARY
from mtpstudio.core.plan.choices import EngineFlavour

__all__ = [
    "PROFILES",
    "build_launch_spec",
    "describe_build",
    "documented_build",
    "memory_facts",
    "probe_candidates",
    "profile_for",
]


def describe_build(build: EngineBuild) -> str:
    """A short name for a build in messages, e.g. 'the upstream llama.cpp build 0.6.0 at /x'."""
    return profile_for(build).describe(build)


def memory_facts(build: EngineBuild | EngineFlavour) -> EngineMemoryFacts:
    """The memory rules of a build's profile (or of a flavour's base era)."""
    return profile_for(build).memory


def documented_build(flavour: EngineFlavour, binary: Path | None = None) -> EngineBuild:
    """A stand-in EngineBuild carrying the documented flags of ``flavour`` (engines.md §3).

    For catalogue/demo planning where no binary exists; LaunchSpecs built from it carry
    ``assumed_documented=True`` and a warning.
    """
    profile = documented_profile(flavour)
    return EngineBuild(
        binary=binary or DEFAULT_BINARY,
        flavour=flavour,
        version="documented",
        backends=(Backend.CUDA, Backend.CPU),
        accepted_flags=profile.documented_flags,
        spec_types=profile.documented_spec_types,
        mtp=profile.documented_mtp,
    )


def probe_candidates(flavour: EngineFlavour) -> tuple[tuple[str, str | None], ...]:
    """Every spelling the profiles of ``flavour`` may emit, with a value its parser accepts.

    For the ``<flag> <value> --version`` probe: a build's ``accepted_flags`` should hold the
    result for each of these.
    """
    seen: dict[str, str | None] = {}
    for profile in profiles_of(flavour):
        for table in (profile.spellings, profile.draft.spellings):
            for entry in table.values():
                for spelling in entry.spellings:
                    seen.setdefault(spelling, entry.probe_value)
    return tuple(seen.items())
