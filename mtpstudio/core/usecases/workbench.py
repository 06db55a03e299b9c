"""The workbench: what a plan is planned with while it is edited, and every answer about it.

One Qt-free object for both faces. It holds the machine (detection's report), the model and
its separate draft model, the stored measurements and speed inputs (``planning_context_for``:
the one recipe), and the evaluation of the last plan asked about (cached); it answers the
build a plan runs on, the plan resolved once (``planning.resolve``: target, build, MTP), its
levers (``core.levers`` through ``planning``) and the reasons a control is disabled. The GUI's
``WizardState`` is Qt signals over one workbench; ``mtpstudio plan`` prints what one answers.
Not thread-safe: the GUI uses it on its own thread and evaluates on a pool thread with
``evaluate_plan`` and the context it handed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD, gpu_card, gpu_cards
from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.detect.gather import DetectionReport, detect_for
from mtpstudio.core.detect.models import EngineInfo, GpuInfo
from mtpstudio.core.engines.availability import (
    build_capabilities,
    disabled_reasons,
    engine_name,
    mtp_reason,
)
from mtpstudio.core.errors import GgufError, MtpStudioError
from mtpstudio.core.model.file_state import require_whole_model
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.core.planner.advice import Standing, standing
from mtpstudio.core.planner.resolve import (
    Budget,
    BuildChoice,
    DesktopChoice,
    DeviceBudget,
    EngineBuild,
    FitSuggestion,
    HostBudget,
    LaunchSpec,
    MachineFacts,
    PlanningContext,
    PlanResult,
    Reconciliation,
    ResolvedPlan,
    ResolvedTarget,
    SpeedEstimate,
    SpeedInputs,
    budget_for,
    build_choices,
    desktop_choices,
    effective_build,
    evaluate,
    fit_suggestions,
    follows_published_setup,
    machine_for,
    offload_and_context,
    published_demo_plan,
    published_setup_text,
    resolve,
)
from mtpstudio.core.server.reconcile import last_measured_text
from mtpstudio.core.usecases.budget_controls import BudgetControls, ControlState, budget_controls
from mtpstudio.core.usecases.planning_context import planning_context_for
from mtpstudio.core.usecases.words import error_sentence

__all__ = [
    "DEFAULT_GPU_CARD",
    "Budget",
    "BudgetControls",
    "BuildChoice",
    "ControlState",
    "DesktopChoice",
    "DetectionReport",
    "DeviceBudget",
    "EngineBuild",
    "EngineInfo",
    "Evaluation",
    "FitSuggestion",
    "GpuInfo",
    "HostBudget",
    "LaunchSpec",
    "MachineFacts",
    "ModelInfo",
    "PlanResult",
    "PlanningContext",
    "Reconciliation",
    "ResolvedPlan",
    "ResolvedTarget",
    "SpeedEstimate",
    "SpeedInputs",
    "Standing",
    "Workbench",
    "build_capabilities",
    "catalogue_ids",
    "detect_for",
    "discrete_gpu_ids",
    "engine_name",
    "evaluate",
    "evaluate_plan",
    "fit_suggestions",
    "follows_published_setup",
    "gpu_card",
    "load_model_info",
    "machine_for",
    "mtp_reason",
    "published_setup_text",
    "rank_levers",
    "read_model_info",
    "replanned_for_model",
    "resolved_for",
]


def catalogue_ids() -> frozenset[str]:
    """The catalogue's GPU ids (a plan may name one instead of a detected device)."""
    return frozenset(card.id for card in gpu_cards())


def discrete_gpu_ids(report: DetectionReport | None) -> list[str]:
    """Detected GPUs a plan can target (integrated GPUs share system RAM and are not offered)."""
    if report is None:
        return []
    return [g.id for g in report.gpus if not g.integrated]


PLACEMENT_FIELDS = ("moe", "n_cpu_moe", "n_gpu_layers")
"""What a model change plans anew (layer counts and expert placement belong to one model)."""


def replanned_for_model(plan: Plan, choice: ModelChoice) -> Plan:
    """``plan`` for another model: the model, and the default placement for it."""
    fresh = Plan().runtime
    runtime = plan.runtime.model_copy(update={f: getattr(fresh, f) for f in PLACEMENT_FIELDS})
    return plan.model_copy(update={"model": choice, "runtime": runtime})


@dataclass(frozen=True)
class Evaluation:
    """One Plan evaluated: the full result, or at least the budget, or only the error."""

    plan: Plan
    result: PlanResult | None
    budget: Budget | None
    target: ResolvedTarget | None
    error: str | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        if self.result is not None:
            return self.result.warnings
        return self.budget.warnings if self.budget is not None else ()

    @property
    def argv(self) -> list[str] | None:
        return self.result.argv if self.result is not None else None

    @property
    def resolved(self) -> ResolvedPlan | None:
        """The plan resolved once: what the budget, the command and the files were made from."""
        return self.result.resolved if self.result is not None else None


def evaluate_plan(plan: Plan, pctx: PlanningContext) -> Evaluation:
    """``planning.evaluate`` without fit suggestions; a command-line error keeps the budget.

    Pure: safe on a pool thread with a context no one changes meanwhile.
    """
    try:
        result = evaluate(plan, pctx, suggest=False)
    except MtpStudioError as exc:
        message = error_sentence(exc)
        try:
            resolved = resolve(plan, pctx)
            target, budget = resolved.target, budget_for(resolved)
        except MtpStudioError:
            return Evaluation(plan, None, None, None, message)
        return Evaluation(plan, None, budget, target, message)
    return Evaluation(plan, result, result.budget, result.target)


def rank_levers(resolved: ResolvedPlan) -> list[FitSuggestion]:
    """Every lever's answer for a resolved plan, ranked (tens of budgets; pure: safe on a pool
    thread). The workbench keeps the result (``Workbench.keep_levers``)."""
    return fit_suggestions(resolved)


def resolved_for(plan: Plan, report: DetectionReport | None) -> ResolvedPlan:
    """``plan`` resolved once for what detection found, its model and draft model read from
    its files (what ``render``, ``export-unit`` and ``apply unit`` write files from).

    Raises:
        MtpStudioError: a model file cannot be read, or the plan cannot be resolved.
    """
    return resolve(plan, planning_context_for(plan, machine_for(report)))


class Workbench:
    """The facts a plan is planned with, and the answers about a plan (one thread only).

    Args:
        speed: the rates and stored runs of the speed estimate (default: an assumed desktop,
            no runs, until ``set_speed``).
    """

    def __init__(self, speed: SpeedInputs | None = None) -> None:
        self.report: DetectionReport | None = None
        self.model: ModelInfo | None = None
        self.draft: ModelInfo | None = None
        self.draft_path: Path | None = None  # the file ``draft`` was read from
        self.speed = speed if speed is not None else SpeedInputs()
        self._context: PlanningContext | None = None
        self._evaluation: Evaluation | None = None
        self._levers: tuple[Plan, tuple[FitSuggestion, ...]] | None = None

    # -- the facts (each change plans anew) ------------------------------------------------------

    def _forget(self) -> None:
        self._context = None
        self._evaluation = None
        self._levers = None

    def set_report(self, report: DetectionReport | None) -> None:
        """Plan for what this detection found (None: no GPU, no builds known)."""
        self.report = report
        self._forget()

    def set_model(self, model: ModelInfo | None) -> None:
        """Plan with this model header (None: nothing to plan with yet)."""
        self.model = model
        self._forget()

    def set_draft(self, draft: ModelInfo | None, path: Path | None) -> None:
        """The separate draft model's header and the file it was read from."""
        self.draft, self.draft_path = draft, path
        self._forget()

    def set_speed(self, speed: SpeedInputs) -> None:
        """Estimate speeds with these rates and stored runs from now on."""
        self.speed = speed
        self._forget()

    def machine(self) -> MachineFacts:
        """The machine as the planner sees it (no GPU, no builds until detection answers)."""
        return machine_for(self.report)

    def context(self, plan: Plan) -> PlanningContext | None:
        """The machine, the model, the plan's draft model (when it names the one read), the
        stored measurements and the speed inputs; built once per set of facts; None until the
        model is read."""
        if self.model is None:
            return None
        wanted = plan.draft.path
        draft = self.draft if wanted is not None and wanted == self.draft_path else None
        if self._context is None or self._context.draft_model is not draft:
            self._context = planning_context_for(
                plan, self.machine(), self.model, draft=draft, speed=self.speed
            )
        return self._context

    # -- one plan --------------------------------------------------------------------------------

    def cached(self, plan: Plan) -> Evaluation | None:
        """The evaluation of exactly this Plan object, when it was kept; else None."""
        evaluation = self._evaluation
        return evaluation if evaluation is not None and evaluation.plan is plan else None

    def keep(self, evaluation: Evaluation) -> None:
        """Keep an evaluation made elsewhere (a pool thread) as the answer for its plan."""
        self._evaluation = evaluation

    def evaluation(self, plan: Plan) -> Evaluation | None:
        """Budget, command line and warnings of ``plan`` (kept for the last plan asked)."""
        kept = self.cached(plan)
        if kept is not None:
            return kept
        pctx = self.context(plan)
        if pctx is None:
            return None
        self._evaluation = evaluate_plan(plan, pctx)
        return self._evaluation

    def resolved(self, plan: Plan) -> ResolvedPlan | None:
        """``plan`` resolved once on these facts: the one the budget, the command line, the
        files and the launch use (None until the model is read).

        Raises:
            MtpStudioError: the plan cannot be resolved (an unknown device …).
        """
        evaluation = self.cached(plan)
        if evaluation is not None and evaluation.resolved is not None:
            return evaluation.resolved
        pctx = self.context(plan)
        return resolve(plan, pctx) if pctx is not None else None

    def result(self, plan: Plan) -> PlanResult | None:
        """Everything ``mtpstudio plan`` prints for ``plan``, the ranked fit suggestions among
        the warnings (None until the model is read).

        Raises:
            MtpStudioError: the plan cannot be resolved or has no command line.
        """
        pctx = self.context(plan)
        return evaluate(plan, pctx) if pctx is not None else None

    def build(self, plan: Plan) -> BuildChoice:
        """The build ``plan`` runs on: the probed one, else its flavour's documented flags."""
        pctx = self.context(plan)
        machine = pctx.machine if pctx is not None else self.machine()
        return effective_build(plan, machine)

    def unloadable_files(self, plan: Plan) -> list[str]:
        """Sentences for the plan's model files the engine cannot load (header only,
        incomplete), as read into this workbench."""
        draft = self.draft if plan.draft.path == self.draft_path else None
        out = []
        for path, facts, role in (
            (plan.model.path, self.model, "model"),
            (plan.draft.path, draft, "draft model"),
        ):
            if path is None or facts is None:
                continue
            try:
                require_whole_model(facts, path, role)
            except GgufError as exc:
                said = str(exc)
                refused = "launch, apply unit and export-unit refuse it"
                out.append(f"{said[:1].upper()}{said[1:]}; {refused}. {exc.hint}")
        return out

    def last_measured(self, plan: Plan, device: str) -> str | None:
        """'Last measured …': the stored launch of the build ``plan`` runs on, on ``device``."""
        return last_measured_text(self.machine().build_for(plan), device)

    def build_choices(self) -> list[BuildChoice]:
        """Every probed build, then each flavour without one as its documented flags."""
        return build_choices(self.machine())

    def demo_defaults(self, plan: Plan, given: frozenset[str]) -> tuple[Plan, str]:
        """The demo's published setup where it fits (``planning.published_demo_plan``); the
        plan unchanged when the model is not read."""
        pctx = self.context(plan)
        return published_demo_plan(plan, pctx, given) if pctx is not None else (plan, "")

    def desktop_choices(self, plan: Plan) -> list[DesktopChoice]:
        """Each desktop reclamation the target allows, with the VRAM it gives back."""
        pctx = self.context(plan)
        return desktop_choices(plan, pctx) if pctx is not None else []

    # -- levers and controls ---------------------------------------------------------------------

    def levers(self, plan: Plan) -> list[FitSuggestion]:
        """Every lever's answer for ``plan``, ranked (``planning.fit_suggestions``): ranked once
        per plan and set of facts, then kept (the Budget page, its menu and the Desktop page
        read the same ranking)."""
        kept = self.kept_levers(plan)
        if kept is not None:
            return kept
        resolved = self.resolved(plan)
        if resolved is None:
            return []
        ranked = rank_levers(resolved)
        self.keep_levers(resolved, ranked)
        return ranked

    def kept_levers(self, plan: Plan) -> list[FitSuggestion] | None:
        """The ranking kept for a plan equal to ``plan`` on these facts (None: not ranked)."""
        kept = self._levers
        return list(kept[1]) if kept is not None and kept[0] == plan else None

    def keep_levers(self, resolved: ResolvedPlan, ranked: list[FitSuggestion]) -> None:
        """Keep a ranking made elsewhere (a pool thread, ``rank_levers``) for its plan; one
        made on facts this workbench has since replaced is dropped."""
        if resolved.pctx is self._context:
            self._levers = (resolved.plan, tuple(ranked))

    def fit_answers(self, plan: Plan) -> list[FitSuggestion]:
        """The two Fit buttons' answers: fewest layers on the CPU, then the largest context."""
        resolved = self.resolved(plan)
        return offload_and_context(resolved) if resolved is not None else []

    def standing(self, evaluation: Evaluation) -> Standing | None:
        """Where the evaluated plan's weights run and whether it drafts (None: no result)."""
        resolved = evaluation.resolved
        if resolved is None or evaluation.budget is None:
            return None
        return standing(evaluation.budget, resolved.model, resolved.mtp.active)

    def budget_controls(self, plan: Plan, evaluation: Evaluation | None) -> BudgetControls:
        """The Budget page's controls for ``plan`` (its evaluation, when there is one)."""
        return budget_controls(
            plan,
            self.build(plan).build,
            self.model,
            evaluation.target if evaluation is not None else None,
            evaluated=evaluation is not None,
            planned=self.context(plan) is not None,
        )

    def disabled_reasons(self, plan: Plan, build: EngineBuild) -> dict[str, str]:
        """The settings ``plan`` cannot use on ``build`` with this model, and why: keys are Plan
        paths, ``path=value`` keys one choice of a setting. With a draft model the draft
        settings drive it, so MTP's reasons do not grey them out; without one its GPU layers
        mean nothing."""
        reasons = disabled_reasons(build, self.model, plan)
        if plan.draft.path is not None:  # the draft settings drive the draft model too
            for key in ("mtp.draft_max", "mtp.draft_min", "mtp.draft_p_min",
                        "mtp.cache_type_k", "mtp.cache_type_v"):  # fmt: skip
                if reasons.get(key, "").startswith("MTP"):
                    del reasons[key]
        else:
            reasons["draft.gpu_layers"] = "no draft model is chosen"
        mtp = reasons.get("mtp.enabled")
        if mtp is not None:
            reasons["mtp.enabled=on"] = mtp
        return reasons
