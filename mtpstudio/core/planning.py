"""One evaluation of a Plan: target, budget, engine command line and warnings (GUI and CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from mtpstudio.core.engines.base import LaunchSpec, build_launch_spec, documented_build
from mtpstudio.core.memory.budget import Budget, compute_budget
from mtpstudio.core.memory.draft import with_draft
from mtpstudio.core.memory.engine_facts import memory_facts
from mtpstudio.core.memory.fit import FitSuggestion, fewest_cpu_expert_layers, largest_context
from mtpstudio.core.memory.machine import MachineFacts
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.memory.targets import ResolvedTarget, resolve_target
from mtpstudio.core.model.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import Plan


@dataclass
class PlanningContext:
    """What stays fixed while a user edits options: the machine and the model.

    Build it once (detection and header reading are the slow parts); ``evaluate`` is then
    cheap enough to follow a slider. Not thread-safe: use one per thread.
    """

    machine: MachineFacts
    model: ModelInfo
    draft_model: ModelInfo | None = None
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


def launch_spec_for(
    plan: Plan, ctx: PlanningContext, api_key_file: Path | None = None
) -> tuple[LaunchSpec, list[str]]:
    """The engine command line from the probed build (or the documented flags, said plainly)."""
    probed = ctx.machine.build_for(plan)
    build = probed or documented_build(plan.engine.flavour, plan.engine.binary)
    notes: list[str] = []
    if probed is None:
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
        build,
        ctx.model,
        model_path=model_path,
        assume_documented=probed is None,
        api_key_file=api_key_file,
    )
    return spec, notes


def evaluate(plan: Plan, ctx: PlanningContext, *, suggest: bool = True) -> PlanResult:
    """Budget, command line and warnings for ``plan``; fit suggestions when it does not fit."""
    target = resolve_for(plan, ctx.machine)
    facts = memory_facts(plan.engine.flavour)
    budget = compute_budget(plan, ctx.model, target.device, facts, target.host, ctx.weights)
    if ctx.draft_model is not None and plan.draft.path is not None:
        budget = with_draft(budget, plan, ctx.draft_model, facts)
    spec, notes = launch_spec_for(plan, ctx)
    warnings = list(budget.warnings) + list(spec.warnings) + notes
    if suggest and budget.fits is False and target.device.is_gpu:
        warnings += [f"Fit: {s.message}" for s in fit_suggestions(plan, ctx, target)]
    return PlanResult(plan, target, budget, spec, tuple(warnings))


def fit_suggestions(
    plan: Plan, ctx: PlanningContext, target: ResolvedTarget | None = None
) -> list[FitSuggestion]:
    """The planner's two answers: fewest CPU expert layers here, then the largest context there."""
    target = target or resolve_for(plan, ctx.machine)
    facts = memory_facts(plan.engine.flavour)
    dev, host, w = target.device, target.host, ctx.weights
    offload = fewest_cpu_expert_layers(plan, ctx.model, dev, facts, host, w)
    base = offload.plan if offload.fits else plan
    return [offload, largest_context(base, ctx.model, dev, facts, host, w)]
