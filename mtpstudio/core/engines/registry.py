"""Which adapter serves a build, and the entry points that pick it (``adapter_for`` and friends).

The adapters import ``base``; this module imports the adapters, so ``base`` never imports its
own subclasses.
"""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.engines.base import DEFAULT_BINARY, EngineAdapter, LaunchSpec
from mtpstudio.core.engines.caps import Backend, EngineBuild
from mtpstudio.core.engines.ik import IkAdapter
from mtpstudio.core.engines.upstream import UpstreamAdapter
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import EngineFlavour, Plan

__all__ = [
    "adapter_for",
    "build_argv",
    "build_launch_spec",
    "documented_build",
    "probe_candidates",
]


def adapter_for(build: EngineBuild | EngineFlavour) -> EngineAdapter:
    """The adapter for a build's flavour (or for a flavour)."""
    flavour = build if isinstance(build, EngineFlavour) else build.flavour
    if flavour is EngineFlavour.UPSTREAM:
        return UpstreamAdapter()
    return IkAdapter()


def documented_build(flavour: EngineFlavour, binary: Path | None = None) -> EngineBuild:
    """A stand-in EngineBuild carrying the documented flags of ``flavour`` (engines.md §3).

    For catalogue/demo planning where no binary exists; LaunchSpecs built from it carry
    ``assumed_documented=True`` and a warning.
    """
    adapter = adapter_for(flavour)
    return EngineBuild(
        binary=binary or DEFAULT_BINARY,
        flavour=flavour,
        version="documented",
        backends=(Backend.CUDA, Backend.CPU),
        accepted_flags=adapter.documented_flags,
        spec_types=adapter.documented_spec_types,
        mtp=adapter.documented_mtp,
    )


def build_launch_spec(
    plan: Plan,
    build: EngineBuild,
    model: ModelInfo | None = None,
    *,
    for_mtpstudio_launch: bool = False,
    api_key_file: Path | None = None,
    model_path: Path | None = None,
    assume_documented: bool = False,
) -> LaunchSpec:
    """``adapter_for(build).build_launch_spec(...)``; see ``AdapterBase.build_launch_spec``."""
    spec = adapter_for(build).build_launch_spec(
        plan,
        build,
        model,
        for_mtpstudio_launch=for_mtpstudio_launch,
        api_key_file=api_key_file,
        model_path=model_path,
        assume_documented=assume_documented,
    )
    return spec


def build_argv(plan: Plan, build: EngineBuild, model: ModelInfo | None = None) -> tuple[str, ...]:
    """Just the command (binary first) for ``plan`` on a probed ``build``."""
    return build_launch_spec(plan, build, model).argv


def probe_candidates(flavour: EngineFlavour) -> tuple[tuple[str, str | None], ...]:
    """Each flag spelling the adapter of ``flavour`` may emit, with a value to probe it with."""
    return adapter_for(flavour).probe_candidates()
