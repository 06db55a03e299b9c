"""The one entry point for evaluating a Plan: target, budget, engine command line and warnings.

The GUI and the CLI reach the memory model and the engine adapters only through this module;
the plain data types they get back (``Budget``, ``LaunchSpec``, ``EngineBuild`` …) are
re-exported here so callers need not import the modules that compute them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.engines.base import LaunchSpec
from mtpstudio.core.engines.caps import EngineBuild
from mtpstudio.core.engines.registry import build_launch_spec, documented_build
from mtpstudio.core.memory.budget import Budget, DeviceBudget, HostBudget, compute_budget
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.memory.draft import with_draft
from mtpstudio.core.memory.engine_facts import memory_facts
from mtpstudio.core.memory.fit import FitSuggestion, fewest_cpu_expert_layers, largest_context
from mtpstudio.core.memory.machine import DESKTOP_CATEGORIES, MachineFacts, machine_facts
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.memory.targets import ResolvedTarget, resolve_target
from mtpstudio.core.model.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import EngineFlavour, Plan
from mtpstudio.core.server.reconcile import Reconciliation, build_key, measured_segments

__all__ = [
    "DESKTOP_CATEGORIES",
    "Budget",
    "BuildChoice",
    "DeviceBudget",
    "EngineBuild",
    "FitSuggestion",
    "HostBudget",
    "LaunchSpec",
    "MachineFacts",
    "PlanResult",
    "PlanningContext",
    "ResolvedTarget",
    "budget_for",
    "build_choices",
    "effective_build",
    "evaluate",
    "fit_suggestions",
    "launch_spec_for",
    "machine_for",
    "resolve_for",
]


@dataclass
class PlanningContext:
    """What stays fixed while a user edits options: the machine and the model.

    Build it once (detection and header reading are the slow parts); ``evaluate`` is then
    cheap enough to follow a slider. Not thread-safe: use one per thread. ``measurements``
    holds the stored launches by (build key, device) (``reconcile.load_measurements``); the
    budget marks the figures they confirm as measured.
    """

    machine: MachineFacts
    model: ModelInfo
    draft_model: ModelInfo | None = None
    measurements: Mapping[tuple[str, str], Reconciliation] = field(default_factory=dict)
    weights: ModelWeights = field(init=False)

    def __post_init__(self) -> None:
        self.weights = ModelWeights.from_model(self.model)


@dataclass(frozen=True)
class PlanResult:
    """Everything the budget page and ``mtpstudio plan`` show for one Plan."""

    plan: Plan
    target: ResolvedTarget
    budget: Budget
    spec: LaunchSpec
    warnings: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        return list(self.spec.argv)


@dataclass(frozen=True)
class BuildChoice:
    """A build a plan can run on: a probed one, or a flavour's documented flags."""

    flavour: EngineFlavour
    build: EngineBuild
    probed: bool

    @property
    def binary(self) -> str | None:
        """The binary a plan names for this choice (None: the flavour's default search)."""
        return str(self.build.binary) if self.probed else None


def machine_for(report: DetectionReport | None) -> MachineFacts:
    """The machine as the planner sees it (no GPU, no builds until detection answers)."""
    if report is None:
        return MachineFacts(HostSpec(), (), ())
    return machine_facts(report)


def effective_build(plan: Plan, machine: MachineFacts) -> BuildChoice:
    """The build the plan runs on: the probed one, else the documented flags of its flavour."""
    probed = machine.build_for(plan)
    if probed is not None:
        return BuildChoice(probed.flavour, probed, True)
    flavour = plan.engine.flavour
    return BuildChoice(flavour, documented_build(flavour, plan.engine.binary), False)


def build_choices(machine: MachineFacts) -> list[BuildChoice]:
    """Every probed build, then each flavour without one as its documented flags."""
    choices = [BuildChoice(b.flavour, b, True) for b in machine.builds]
    for flavour in EngineFlavour:
        if not any(c.flavour is flavour for c in choices):
            choices.append(BuildChoice(flavour, documented_build(flavour), False))
    return choices


def resolve_for(plan: Plan, machine: MachineFacts) -> ResolvedTarget:
    """The target device; a demo-card plan with no GPU found plans for the demo GPU card."""
    resolved = resolve_target(plan, machine.host, list(machine.gpus))
    demo = plan.model.path is None
    if demo and plan.device == "auto" and not resolved.device.is_gpu:
        resolved = resolve_target(
            plan.model_copy(update={"device": DEFAULT_GPU_CARD}), machine.host, list(machine.gpus)
        )
        resolved = replace(
            resolved, source=f"no GPU detected: the demo plans for the {resolved.source}"
        )
    return resolved


def budget_for(plan: Plan, pctx: PlanningContext) -> tuple[ResolvedTarget, Budget]:
    """The target and the memory budget alone (what is left when the command line fails)."""
    target = resolve_for(plan, pctx.machine)
    facts = memory_facts(plan.engine.flavour)
    budget = compute_budget(plan, pctx.model, target.device, facts, target.host, pctx.weights)
    if pctx.draft_model is not None and plan.draft.path is not None:
        budget = with_draft(budget, plan, pctx.draft_model, facts)
    build = pctx.machine.build_for(plan) if pctx.measurements else None
    if build is not None:
        stored = pctx.measurements.get((build_key(build), target.device.id))
        if stored is not None:
            budget = replace(budget, measured=measured_segments(stored, budget, facts))
    return target, budget


def launch_spec_for(
    plan: Plan, pctx: PlanningContext, api_key_file: Path | None = None
) -> tuple[LaunchSpec, list[str]]:
    """The engine command line from the probed build (or the documented flags, said plainly)."""
    choice = effective_build(plan, pctx.machine)
    notes: list[str] = []
    if not choice.probed:
        notes.append(
            f"no {plan.engine.flavour.value} llama-server was found: the command line uses the "
            "documented flags (run `mtpstudio detect` to see what was searched)"
        )
    model_path = plan.model.path
    if model_path is None:
        model_path = Path(f"{plan.model.card}.gguf")
        notes.append(f"the demo card has no file: put your GGUF's path in place of {model_path}")
    spec = build_launch_spec(
        plan,
        choice.build,
        pctx.model,
        model_path=model_path,
        assume_documented=not choice.probed,
        api_key_file=api_key_file,
    )
    return spec, notes


def evaluate(plan: Plan, pctx: PlanningContext, *, suggest: bool = True) -> PlanResult:
    """Budget, command line and warnings for ``plan``; fit suggestions when it does not fit."""
    target, budget = budget_for(plan, pctx)
    spec, notes = launch_spec_for(plan, pctx)
    warnings = list(budget.warnings) + list(spec.warnings) + notes
    if suggest and budget.fits is False and target.device.is_gpu:
        warnings += [f"Fit: {s.message}" for s in fit_suggestions(plan, pctx, target)]
    return PlanResult(plan, target, budget, spec, tuple(warnings))


def fit_suggestions(
    plan: Plan, pctx: PlanningContext, target: ResolvedTarget | None = None
) -> list[FitSuggestion]:
    """The planner's two answers: fewest CPU expert layers here, then the largest context there."""
    target = target or resolve_for(plan, pctx.machine)
    facts = memory_facts(plan.engine.flavour)
    dev, host, w = target.device, target.host, pctx.weights
    offload = fewest_cpu_expert_layers(plan, pctx.model, dev, facts, host, w)
    base = offload.plan if offload.fits else plan
    return [offload, largest_context(base, pctx.model, dev, facts, host, w)]
