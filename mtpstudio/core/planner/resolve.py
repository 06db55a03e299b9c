"""The one entry point for planning: ``resolve`` a Plan once, then budget, argv, fit and files.

``resolve(plan, pctx)`` decides, once, everything the rest reads: the target device, the build
(probed, or the flavour's documented flags), its engine profile and MTP (with its one-line
reason), as a ``ResolvedPlan``. ``budget_for``, ``launch_spec_for`` and
``fit_suggestions`` take that ``ResolvedPlan``; ``evaluate`` does all of it for one Plan. The GUI,
the CLI and the use cases reach the memory model and the engines only through this module; the
plain data types they get back (``Budget``, ``LaunchSpec``, ``EngineBuild`` …) are re-exported
here so callers need not import the modules that compute them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD, gpu_card
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.engines.argv import EngineDevices, build_launch_spec
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.mtp import MtpDecision, decide_mtp
from mtpstudio.core.engines.profiles.engine_profile import EngineProfile
from mtpstudio.core.engines.registry import documented_build, profile_for
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.engines.speed_facts import UPSTREAM_SPEED, EngineSpeedFacts
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.memory.budget import BudgetInputs, budget_of
from mtpstudio.core.memory.budget_types import Budget, DeviceBudget, HostBudget
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.draft import with_draft
from mtpstudio.core.memory.machine import DESKTOP_CATEGORIES, MachineFacts, machine_facts
from mtpstudio.core.memory.measured import Reconciliation, build_key, measured_segments
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.memory.targets import (
    ResolvedDevices,
    ResolvedTarget,
    check_reclaim,
    desktop_after_reclaim,
    reclaims_for,
    resolve_devices,
    resolve_target,
)
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import DesktopReclaim, EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner import levers
from mtpstudio.core.planner.advice import Standing, standing
from mtpstudio.core.planner.levers import FitSuggestion, LeverBench, PlanChange, evaluated
from mtpstudio.core.speed.acceptance import Acceptance, given_acceptance
from mtpstudio.core.speed.cards import card_rates, catalogue_card
from mtpstudio.core.speed.cpu_kernels import kernels_for
from mtpstudio.core.speed.estimate import (
    DEFAULT_DEPTH,
    DecodeShape,
    SpeedEstimate,
    SpeedRates,
    estimate,
)
from mtpstudio.core.speed.host_target import host_for
from mtpstudio.core.speed.inputs import SpeedInputs, model_key
from mtpstudio.core.speed.traffic import ModelCost
from mtpstudio.core.units import MIB

__all__ = [
    "DESKTOP_CATEGORIES",
    "Budget",
    "BuildChoice",
    "DesktopChoice",
    "DeviceBudget",
    "EngineBuild",
    "FitSuggestion",
    "HostBudget",
    "LaunchSpec",
    "MachineFacts",
    "PlanChange",
    "PlanResult",
    "PlanVerdict",
    "PlanningContext",
    "Reconciliation",
    "ResolvedPlan",
    "ResolvedTarget",
    "SpeedEstimate",
    "SpeedInputs",
    "budget_for",
    "build_choices",
    "desktop_choices",
    "effective_build",
    "evaluate",
    "fit_suggestions",
    "follows_published_setup",
    "launch_spec_for",
    "lever_bench",
    "machine_for",
    "offload_and_context",
    "published_demo_plan",
    "published_setup_text",
    "resolve",
    "speed_for",
    "target_for",
    "trunk_layers_on_cpu",
]


@dataclass
class PlanningContext:
    """What stays fixed while a user edits options: the machine and the model.

    Build it once (detection and header reading are the slow parts); ``evaluate`` is then
    cheap enough to follow a slider. Not thread-safe: use one per thread. ``measurements``
    holds the stored launches by (build key, device) (``reconcile.load_measurements``); the
    budget marks the figures they confirm as measured. ``speed`` holds the host's rates and
    the stored benchmark runs the speed estimate uses (``speed.inputs.load_speed_inputs``;
    the default assumes a desktop and knows no run).
    """

    machine: MachineFacts
    model: ModelInfo
    draft_model: ModelInfo | None = None
    measurements: Mapping[tuple[str, str], Reconciliation] = field(default_factory=dict)
    speed: SpeedInputs = field(default_factory=SpeedInputs)
    weights: ModelWeights = field(init=False)
    cost: ModelCost = field(init=False)
    mtp_auto: dict[str, tuple[float, float, bool, bool]] = field(init=False, default_factory=dict)
    _costs: dict[str, ModelCost] = field(init=False, default_factory=dict, repr=False)
    """MTP auto's estimates, with and without drafting, by plan (``auto_mtp_by_speed``)."""

    def __post_init__(self) -> None:
        self.weights = ModelWeights.from_model(self.model)
        self.cost = ModelCost.from_model(self.model, self.weights)
        self._costs = {_cost_key(UPSTREAM_SPEED): self.cost}

    def cost_for(self, speed: EngineSpeedFacts) -> ModelCost:
        """The model's cost with an engine's CPU kernels and graph (computed once each)."""
        key = _cost_key(speed)
        found = self._costs.get(key)
        if found is None:
            found = self._costs[key] = ModelCost.from_model(
                self.model, self.weights, kernels_for(speed.cpu_kernels), speed.fused_moe_graph
            )
        return found


def _cost_key(speed: EngineSpeedFacts) -> str:
    """What a model's cost depends on of an engine: its CPU kernels and its graph."""
    return f"{speed.cpu_kernels}:{speed.fused_moe_graph}"


@dataclass(frozen=True)
class PlanVerdict:
    """Will the plan run as planned, and does it fit; what works instead when it will not."""

    fits: bool | None
    blockers: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """``fits``, ``does_not_fit``, ``will_not_run`` or ``unknown`` (device size unknown)."""
        if self.blockers:
            return "will_not_run"
        return {True: "fits", False: "does_not_fit", None: "unknown"}[self.fits]

    @property
    def ok(self) -> bool:
        """It fits and nothing stops the engine from running it as planned."""
        return self.status == "fits"

    def lines(self) -> list[str]:
        """``Verdict: …`` and, when it will not run, why and what works instead."""
        fit = {True: "fits", False: "does NOT fit", None: "unknown (device size unknown)"}
        if not self.blockers:
            return [f"Verdict: {fit[self.fits]}"]
        out = [f"Verdict: will NOT run as planned (memory: {fit[self.fits]})"]
        out += [f"  - {b}" for b in self.blockers]
        out += [f"  Instead: {a}" for a in self.alternatives]
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "fits": self.fits,
            "blockers": list(self.blockers),
            "instead": list(self.alternatives),
        }


@dataclass(frozen=True)
class PlanResult:
    """Everything the budget page and ``mtpstudio plan`` show for one Plan.

    ``plan`` is the plan as given; ``effective`` the one the engine runs (MTP auto decided);
    ``resolved`` what both were planned from.
    """

    plan: Plan
    target: ResolvedTarget
    budget: Budget
    spec: LaunchSpec
    warnings: tuple[str, ...]
    effective: Plan | None = None
    mtp_line: str = ""
    resolved: ResolvedPlan | None = None
    speed: SpeedEstimate | None = None

    @property
    def argv(self) -> list[str]:
        return list(self.spec.argv)

    @property
    def verdict(self) -> PlanVerdict:
        return PlanVerdict(self.budget.fits, self.spec.blockers, self.spec.alternatives)


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


def target_for(plan: Plan, machine: MachineFacts) -> ResolvedTarget:
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
    check_reclaim(plan.desktop, resolved.device)
    return resolved


@dataclass(frozen=True)
class ResolvedPlan:
    """A Plan resolved once for a machine and a model: what budget, argv, fit and files read.

    Attributes:
        plan: the plan as given.
        effective: the plan the engine runs (MTP auto decided).
        target: the device planned for, the host, and how the device was chosen.
        build: the build it runs on (probed, or the flavour's documented flags).
        profile: the engine profile that describes that build.
        mtp: MTP decided once (``mtp.line`` says on or off and why).
        pctx: the machine and the model it was resolved for.
        devices: for a plan split over several devices, all of them in the engine's order
            (None: one device, ``target.device``).
    """

    plan: Plan
    effective: Plan
    target: ResolvedTarget
    build: BuildChoice
    profile: EngineProfile
    mtp: MtpDecision
    pctx: PlanningContext
    devices: ResolvedDevices | None = None

    @property
    def model(self) -> ModelInfo:
        return self.pctx.model

    @property
    def cpu_only(self) -> bool:
        """The target is the CPU and no RPC device: every layer stays there and the engine's
        fit is not used."""
        return not self.target.device.is_gpu and self.devices is None

    def with_changes(self, changes: Mapping[str, object]) -> ResolvedPlan:
        """The plan with dotted-path ``changes`` (``plan_with``), resolved the same way."""
        return resolve(plan_with(self.plan, dict(changes)), self.pctx)


def resolve(plan: Plan, pctx: PlanningContext) -> ResolvedPlan:
    """Decide, once, the target, the build and its profile, and MTP.

    Raises:
        MtpStudioError: the plan names a device that is neither detected nor a catalogue card,
            or a desktop reclamation that does not apply to the target.
    """
    target = target_for(plan, pctx.machine)
    choice = effective_build(plan, pctx.machine)
    profile = profile_for(choice.build)
    mtp = decide_mtp(plan, choice.build, pctx.model)
    effective = mtp.resolved(plan)
    devices = None
    if plan.is_split:
        devices = resolve_devices(plan, target.device, list(pctx.machine.gpus))
    resolved = ResolvedPlan(plan, effective, target, choice, profile, mtp, pctx, devices)
    if plan.mtp.enabled is None and mtp.active and devices is None:
        return auto_mtp_by_speed(resolved)
    return resolved


def auto_mtp_by_speed(resolved: ResolvedPlan) -> ResolvedPlan:
    """MTP auto, where it can run, stays on only where the plan with it fits as well as the plan
    without it and the estimate says drafting is faster (each with its own budget: without
    MTP the experts get the draft's VRAM). Decided once per plan and context
    (``PlanningContext.mtp_auto``)."""
    pctx = resolved.pctx
    key = resolved.plan.to_json()
    found = pctx.mtp_auto.get(key)
    if found is None:
        on_budget = budget_for(resolved)
        off_plan = plan_with(resolved.plan, {"mtp.enabled": False})
        off = replace(resolved, effective=off_plan, mtp=_MTP_OFF)
        off_budget = budget_for(off)
        found = pctx.mtp_auto[key] = (
            speed_for(resolved, on_budget).decode_tok_s,
            speed_for(off, off_budget).decode_tok_s,
            _fits_all(on_budget),
            _fits_all(off_budget),
        )
    with_mtp, without, fits_on, fits_off = found
    if fits_off and not fits_on:
        line = "MTP auto: off (the plan fits only without the draft's memory)."
    elif fits_on == fits_off and with_mtp < without:
        line = (
            f"MTP auto: off (the estimate is {without:.1f} tok/s without MTP and "
            f"{with_mtp:.1f} with it: the draft's memory and verification cost more than it "
            "gains here)."
        )
    else:
        return resolved
    decision = MtpDecision(False, False, None, line)
    return replace(resolved, effective=decision.resolved(resolved.plan), mtp=decision)


def _fits_all(budget: Budget) -> bool:
    return all(d.fits is not False for d in budget.devices)


_MTP_OFF = MtpDecision(False, False, None, "MTP off (as asked).")


def budget_for(resolved: ResolvedPlan) -> Budget:
    """The memory budget of a resolved plan (the draft model and stored measurements counted);
    MTP as ``resolve`` decided it."""
    plan, pctx, target = resolved.effective, resolved.pctx, resolved.target
    facts = resolved.profile.memory
    inputs = budget_inputs(resolved)
    if resolved.devices is not None:  # the split's model loads only for a split plan
        from mtpstudio.core.memory.split_budget import compute_split_budget

        budget = compute_split_budget(
            plan,
            pctx.model,
            resolved.devices.devices,
            facts,
            target.host,
            inputs.weights,
            mtp_active=resolved.mtp.active,
        )
    else:
        budget = budget_of(inputs)
    if pctx.draft_model is not None and plan.draft.path is not None:
        budget = with_draft(budget, plan, pctx.draft_model, facts)
    if pctx.measurements and resolved.build.probed:
        stored = pctx.measurements.get((build_key(resolved.build.build), target.device.id))
        if stored is not None:
            budget = replace(budget, measured=measured_segments(stored, budget, facts))
    return budget


def budget_inputs(resolved: ResolvedPlan) -> BudgetInputs:
    """The frozen inputs of a single-device plan's budget: the plan the engine runs, its
    target and host, the build's memory facts, the model's tensors, MTP as decided."""
    pctx, facts = resolved.pctx, resolved.profile.memory
    weights = pctx.weights
    if weights.mapped_in_ranges != facts.maps_in_ranges:
        weights = replace(weights, mapped_in_ranges=facts.maps_in_ranges)  # the era's mmap
    return BudgetInputs(
        resolved.effective,
        pctx.model,
        resolved.target.device,
        facts,
        resolved.target.host,
        weights,
        mtp_active=resolved.mtp.active,
    )


def launch_spec_for(
    resolved: ResolvedPlan,
    api_key_file: Path | None = None,
    *,
    for_mtpstudio_launch: bool = False,
    model_path: Path | None = None,
) -> tuple[LaunchSpec, list[str]]:
    """The engine command line from the probed build (or the documented flags, said plainly).

    ``model_path`` overrides the plan's file; ``for_mtpstudio_launch`` asks for the log lines
    mtpstudio reads when it starts the server itself.
    """
    plan, choice = resolved.effective, resolved.build
    notes: list[str] = []
    if not choice.probed:
        notes.append(
            f"no {plan.engine.flavour.value} llama-server was found: the command line uses the "
            "documented flags (run `mtpstudio detect` to see what was searched)"
        )
    model_path = model_path or plan.model.path
    if model_path is None:
        model_path = Path(f"{plan.model.card}.gguf")
        notes.append(f"the demo card has no file: put your GGUF's path in place of {model_path}")
    spec = build_launch_spec(
        plan,
        choice.build,
        resolved.model,
        model_path=model_path,
        assume_documented=not choice.probed,
        api_key_file=api_key_file,
        for_mtpstudio_launch=for_mtpstudio_launch,
        cpu_only=resolved.cpu_only,
        mtp=resolved.mtp,
        devices=None
        if resolved.devices is None
        else EngineDevices(
            resolved.devices.names, resolved.devices.kinds, resolved.devices.restrict
        ),
    )
    return spec, notes


SHOWN_SUGGESTIONS = 5
"""How many ranked fit suggestions ``evaluate`` puts among the warnings."""


def evaluate(plan: Plan, pctx: PlanningContext, *, suggest: bool = True) -> PlanResult:
    """Budget, command line and warnings for ``plan``; the ranked fit suggestions when it does
    not fit, or fits only with whole layers on the CPU."""
    resolved = resolve(plan, pctx)
    budget = budget_for(resolved)
    spec, notes = launch_spec_for(resolved)
    warnings = list(budget.warnings) + list(spec.warnings) + notes
    layers_off = not resolved.cpu_only and trunk_layers_on_cpu(budget, resolved.model) > 0
    if suggest and not resolved.cpu_only:
        ranked = fit_suggestions(resolved, budget)
        if budget.fits is not False and not layers_off:  # it runs: only what makes it faster
            ranked = [s for s in ranked if s.faster and s.fits]
        warnings += [f"Fit: {s.message}" for s in ranked[:SHOWN_SUGGESTIONS]]
    return PlanResult(
        plan,
        resolved.target,
        budget,
        spec,
        tuple(warnings),
        resolved.effective,
        resolved.mtp.line,
        resolved,
        speed_for(resolved, budget),
    )


def speed_for(
    resolved: ResolvedPlan,
    budget: Budget | None = None,
    *,
    acceptance: Acceptance | None = None,
    context: int = DEFAULT_DEPTH,
) -> SpeedEstimate:
    """The decode and prefill estimate of a resolved plan (``core.speed``): its placement, the
    devices' rates, and MTP with this model's measured acceptance on this engine (or the
    default; ``acceptance`` overrides it), at ``context`` tokens filled; measured when a stored
    benchmark ran this very plan."""
    budget = budget if budget is not None else budget_for(resolved)
    plan, pctx = resolved.effective, resolved.pctx
    inputs = pctx.speed
    gpus = [resolved.target.device] if resolved.target.device.is_gpu else []
    cards = {d.id: card_rates(d) for d in gpus}  # one entry per GPU the budget plans
    mtp = resolved.mtp.active
    if mtp and acceptance is None and plan.mtp.acceptance is not None:
        acceptance = given_acceptance(plan.mtp.acceptance, plan.mtp.draft_max, plan.mtp.draft_p_min)
    if mtp and acceptance is None:
        acceptance = inputs.acceptance_for(
            model_key(resolved.plan), plan.engine.flavour.value, resolved.profile.speed
        )
    host = host_for(inputs.host, plan.host.cpu, plan.host.ram)
    shape = DecodeShape(
        gpu=gpus[0].id if gpus else None,
        threads=plan.runtime.threads or host.cores,
        cache_types=(plan.runtime.cache_type_k.value, plan.runtime.cache_type_v.value),
        mtp=mtp,
        depth=plan.mtp.draft_max,
        p_min=plan.mtp.draft_p_min,
        ubatch=min(plan.runtime.ubatch, plan.runtime.batch),
        op_offload=plan.runtime.op_offload,
        flash_attn=budget.effective.flash_attn,
    )
    rates = SpeedRates(host, cards)
    speed = estimate(
        pctx.model,
        pctx.cost_for(resolved.profile.speed),
        budget.placement,
        shape,
        rates,
        acceptance if mtp else None,
        context=context,
        moe_cache=budget.moe_cache,
        rules=resolved.profile.speed,
    )
    run = inputs.measured_for([resolved.plan, resolved.effective])
    if run is not None:
        speed = speed.with_measurement(
            run.tok_s, f"benchmark run {run.run_id} ({run.when[:10]}) of this plan"
        )
    return speed


def lever_bench(resolved: ResolvedPlan, budget: Budget | None = None) -> LeverBench:
    """The plan on the levers' bench (``core.levers``): every change evaluated the one way,
    ``budget_for`` of the changed plan resolved as this one is (``budget``: the plan's own,
    when the caller has it).

    The levers' searches ask for the same plan more than once (a bisection's last probe, the
    answer evaluated again, two changes that make the same plan): each plan's budget is
    computed once per bench, keyed by the plan it makes (``budget_for`` is a pure function
    of the resolved plan, and every change here resolves with this plan's context).
    """
    budgets: dict[str, Budget] = {}

    held = held_mtp(resolved)

    def evaluate(change: PlanChange) -> FitSuggestion:
        other = resolved.with_changes({**held, **change.changes})
        key = other.plan.to_json()
        found = budgets.get(key)
        if found is None:
            found = budgets[key] = budget_for(other)
        # the suggestion is the user's plan with the change (MTP auto stays auto)
        return evaluated(change, plan_with(resolved.plan, dict(change.changes)), found)

    reclaims = []
    device = resolved.target.device
    for choice in desktop_choices(resolved.plan, resolved.pctx):
        if choice.reclaim is resolved.plan.desktop or choice.reclaim is DesktopReclaim.NONE:
            continue
        if choice.desktop_bytes < device.desktop_bytes:
            reclaims.append(choice.reclaim)
    return LeverBench(
        plan=resolved.plan,
        effective=resolved.effective,
        model=resolved.model,
        budget=budget if budget is not None else budget_for(resolved),
        mtp_active=resolved.mtp.active,
        split=resolved.devices is not None,
        evaluate=evaluate,
        reclaims=tuple(reclaims),
        moe_cache=resolved.profile.memory.moe_cache,
    )


def offload_and_context(resolved: ResolvedPlan) -> list[FitSuggestion]:
    """The budget page's two Fit buttons (``levers.offload_and_context``): the fewest expert
    layers (or whole layers) on the CPU here, then the largest context there."""
    return levers.offload_and_context(lever_bench(resolved))


def plan_standing(resolved: ResolvedPlan, budget: Budget | None = None) -> Standing:
    """Where the resolved plan's weights run, whether it drafts, and its estimated tokens per
    second (``core.advice``; ``budget``: the plan's, when the caller has it)."""
    budget = budget if budget is not None else budget_for(resolved)
    speed = speed_for(resolved, budget).decode_tok_s
    return standing(budget, resolved.model, resolved.mtp.active, speed)


def held_mtp(resolved: ResolvedPlan) -> dict[str, object]:
    """The levers compare plans at this plan's MTP decision: MTP auto, decided by the estimate
    for each plan apart, would move the draft's memory between the steps of a search (a lever
    that changes MTP itself says so in its own changes)."""
    return {"mtp.enabled": resolved.mtp.requested} if resolved.plan.mtp.enabled is None else {}


def suggestion_standing(s: FitSuggestion, resolved: ResolvedPlan) -> Standing:
    """The same for a lever's answer, MTP as the levers held it (``held_mtp``)."""
    other = resolve(plan_with(s.plan, {**held_mtp(resolved), **s.changes}), resolved.pctx)
    speed = speed_for(other, s.budget).decode_tok_s
    return standing(s.budget, resolved.model, other.mtp.active, speed)


def fit_suggestions(resolved: ResolvedPlan, budget: Budget | None = None) -> list[FitSuggestion]:
    """Every lever's smallest change toward a plan that fits with every layer on the GPU, ranked.

    The levers are ``core.levers.fit_levers``. Ranked (``levers.rank_key``): the changes that
    fit first, fastest first, then the most memory spare, cheapest lever first; then those that
    do not fit, closest first. Each message says ``<change>: <what it buys> — fits, N MiB
    spare`` / ``fits with K layers on the CPU`` / ``still N MiB short``. Empty for a CPU target.
    ``budget``: the plan's own (``budget_for``), when the caller has it.
    """
    if resolved.cpu_only:
        return []
    bench = lever_bench(resolved, budget)
    out = levers.fit_levers(bench)
    now = plan_standing(resolved, bench.budget)
    ranked = []
    for s in out:
        then = suggestion_standing(s, resolved)
        ranked.append((levers.rank_key(s, then), levers.with_gain(s, now, then)))
    shown: list[FitSuggestion] = []
    for _, s in sorted(ranked, key=lambda pair: pair[0]):
        if s.lever == "draft" and any(t.lever == "draft" for t in shown):
            continue  # one draft change: the best ranked (a shallower draft or MTP off)
        shown.append(s)
    return shown


LLVMPIPE_DESKTOP_BYTES = 130 * MIB
"""A software-rendered (llvmpipe) KDE session keeps about 130 MB on the card (design.md §1;
the catalogue's ``llvmpipe_desktop_vram_mib``)."""


@dataclass(frozen=True)
class DesktopChoice:
    """One desktop reclamation that applies to the target: the desktop's VRAM after it."""

    reclaim: DesktopReclaim
    desktop_bytes: int
    saves_bytes: int

    def to_json(self) -> dict[str, object]:
        return {
            "option": self.reclaim.value,
            "desktop_bytes": self.desktop_bytes,
            "saves_bytes": self.saves_bytes,
        }


def desktop_choices(plan: Plan, pctx: PlanningContext) -> list[DesktopChoice]:
    """Each reclamation the target's vendor allows, with the VRAM it would give back.

    Catalogue cards use their typical desktop figures; a detected GPU starts from what its
    desktop holds now (the llvmpipe figure is the catalogue's for the same vendor).
    """
    target = target_for(plan.model_copy(update={"desktop": DesktopReclaim.NONE}), pctx.machine)
    device = target.device
    if not device.is_gpu:
        return []
    now = device.desktop_bytes
    llvmpipe = LLVMPIPE_DESKTOP_BYTES
    try:
        card = gpu_card(plan.device)
        now, llvmpipe = card.desktop_vram_bytes, card.llvmpipe_desktop_vram_bytes
    except MtpStudioError:
        pass
    out = []
    for reclaim in reclaims_for(device.vendor):
        after = desktop_after_reclaim(now, min(llvmpipe, now), reclaim)
        out.append(DesktopChoice(reclaim, after, now - after))
    return out


PUBLISHED_SETUP: dict[str, object] = {
    "runtime.ctx": 131072,
    "mtp.draft_max": 3,
    "mtp.draft_p_min": 0.75,
    "mtp.cache_type_k": "q8_0",
    "mtp.cache_type_v": "q8_0",
}
"""The published Qwen3.6-35B-A3B MTP setup the demo follows where it fits: draft max 3 with a
q8_0 cache (llama.cpp PR #22673, reference/peers.md §4.1), a 131072 context (club-3090#390,
peers.md §4.1), p-min 0.75 (ik_llama.cpp's default, reference/engines.md §3)."""


_PUBLISHED_WORDS = {
    "runtime.ctx": lambda v: f"ctx {v:,}",
    "mtp.draft_max": lambda v: f"draft max {v}",
    "mtp.draft_p_min": lambda v: f"p-min {v}",
    "mtp.cache_type_k": lambda v: f"draft K cache {v}",
    "mtp.cache_type_v": lambda v: f"draft V cache {v}",
}


PUBLISHED_PC: dict[str, object] = {
    "host.cpu": "ryzen-7-9700x",
    "host.ram": "ddr5-6000x2",
    "runtime.threads": 8,
}
"""The PC of the published setup (reference/world-2026-12.md §1: an RTX 4070 SUPER beside a Ryzen
7 9700X with dual-channel DDR5-6000, ``-t 8``): the demo plans it when it plans that catalogue
card, so its speed is the published PC's, not this computer's."""


def published_setup_text() -> str:
    """The published setup in words: ``ctx 131,072, draft max 3, …``."""
    return ", ".join(_PUBLISHED_WORDS[k](v) for k, v in PUBLISHED_SETUP.items())


def follows_published_setup(plan: Plan) -> bool:
    """True when the plan uses every value of the published setup (the demo's defaults)."""
    data = plan.to_data()
    for dotted, value in PUBLISHED_SETUP.items():
        section, name = dotted.split(".")
        if data[section][name] != value:
            return False
    return True


def published_demo_plan(
    plan: Plan, pctx: PlanningContext, given: frozenset[str] = frozenset()
) -> tuple[Plan, str]:
    """The demo's defaults: the published setup when the memory model says it fits the target.

    Settings in ``given`` (dotted paths the user chose) are kept. Returns the plan and one
    sentence saying which defaults were used and why.
    """
    changes = {k: v for k, v in PUBLISHED_SETUP.items() if k not in given}
    if not changes:
        return plan, ""
    shown = ", ".join(_PUBLISHED_WORDS[k](v) for k, v in changes.items())
    pc = {k: v for k, v in PUBLISHED_PC.items() if k not in given}
    if _is_published_card(target_for(plan, pctx.machine).device) and "host.cpu" not in given:
        changes.update(pc)  # the published card: the published PC around it
        shown += ", on the published PC (Ryzen 7 9700X, DDR5-6000 × 2, 8 threads)"
    candidate = plan_with(plan, changes)
    resolved = resolve(candidate, pctx)
    target, budget = resolved.target, budget_for(resolved)
    # the card must hold it; RAM only counts when known (the GUI plans before detection)
    if all(d.fits for d in budget.devices) and budget.host.fits is not False:
        cpu_layers = trunk_layers_on_cpu(budget, resolved.model)
        if not cpu_layers or resolved.cpu_only:
            return candidate, (
                f"Demo defaults: the published setup ({shown}) fits {target.device.name}, so "
                "the demo uses it."
            )
        return plan, (
            f"Demo defaults: the published setup ({shown}) fits {target.device.name} only with "
            f"{cpu_layers} of {resolved.model.n_layer} layers on the CPU, so the demo keeps the "
            "plan's defaults."
        )
    short = max((-(d.free_bytes or 0) for d in budget.devices), default=0)
    return plan, (
        f"Demo defaults: the published setup ({shown}) does not fit {target.device.name} "
        f"({short / MIB:,.0f} MiB short), so the demo keeps the plan's defaults."
    )


def _is_published_card(device: TargetDevice) -> bool:
    """The target is the catalogue's published card (not a detected one)."""
    card = catalogue_card(device) if device.name.endswith("(catalogue)") else None
    return card is not None and card.id == DEFAULT_GPU_CARD


def trunk_layers_on_cpu(budget: Budget, model: ModelInfo) -> int:
    """How many trunk layers the budget's placement leaves on the CPU (whole layers)."""
    gpu = budget.placement.gpu_layers
    return sum(1 for i in range(model.n_layer) if i not in gpu)
