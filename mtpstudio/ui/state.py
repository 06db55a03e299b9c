"""The wizard's shared state: one Plan, and Qt signals over the workbench that plans it.

Pages read ``state.plan`` and write their slice through ``state.update({...})``; every change
replaces the Plan (Plans are immutable) and emits ``plan_changed``. What the plan is planned
with and every answer about it live in ``state.workbench`` (``core.usecases.workbench``, Qt-free):
the machine, the model and draft model, measurements, the evaluation cache, the levers and
the reasons a control is disabled. This object only runs detection, GGUF reading and the
evaluation as background tasks (``ui.tasks``), hands their results to the workbench on the GUI
thread and announces them (``report_changed`` / ``model_changed`` / ``evaluated`` …).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.detect.models import DetectionReport, EngineInfo
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.memory.machine import MachineFacts
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.core.planner.levers import FitSuggestion
from mtpstudio.core.planner.resolve import BuildChoice, PlanningContext, ResolvedPlan
from mtpstudio.core.speed.inputs import SpeedInputs
from mtpstudio.core.usecases.workbench import (
    Evaluation,
    Workbench,
    catalogue_ids,
    discrete_gpu_ids,
    evaluate_plan,
    gpu_card,
    load_model_info,
    rank_levers,
    read_model_info,
    replanned_for_model,
)
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.tasks import CancelToken, TaskManager

Detector = Callable[[], DetectionReport]
ModelLoader = Callable[[ModelChoice], ModelInfo]
SpeedLoader = Callable[[], SpeedInputs]

DETECT_KEY = "detect"
MODEL_KEY = "model"
DRAFT_KEY = "draft-model"
EVALUATE_KEY = "evaluate"
SPEED_KEY = "speed-inputs"


__all__ = [
    "Evaluation",
    "WizardState",
    "catalogue_ids",
    "discrete_gpu_ids",
    "evaluate_plan",
    "replanned_for_model",
]


class WizardState(QObject):
    """The Plan being edited plus what detection and the GGUF header said (GUI thread only)."""

    plan_changed = Signal(object)  # Plan
    report_changed = Signal(object)  # DetectionReport | None
    model_changed = Signal(object)  # ModelInfo | None
    model_failed = Signal(str)  # one sentence: why the chosen file cannot be used
    draft_changed = Signal(object)  # ModelInfo | None: the draft model's header (planning uses it)
    draft_failed = Signal(str)  # one sentence: why the chosen draft file cannot be used
    activity_changed = Signal()  # detecting / loading_model flipped
    evaluated = Signal()  # a background evaluation of the current Plan landed
    speed_inputs_changed = Signal()  # the host's probed rates or the stored runs were read

    def __init__(
        self,
        plan: Plan,
        tasks: TaskManager,
        detector: Detector,
        model_loader: ModelLoader = load_model_info,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._plan = plan
        self._tasks = tasks
        self._detector = detector
        self._model_loader = model_loader
        self.workbench = Workbench()
        self.detection_error: str | None = None
        self.device_notice: str | None = None
        self.model_choice: ModelChoice | None = None  # the choice model_info was read from
        self.model_error: str | None = None
        self._loading_choice: ModelChoice | None = None
        self._failed_choice: ModelChoice | None = None
        self.draft_error: str | None = None
        self._draft_tried: Path | None = None  # the plan's draft file being read or unreadable
        self._last_evaluation: Evaluation | None = None  # the newest, of any Plan

    # -- the workbench's facts ------------------------------------------------------------------

    @property
    def report(self) -> DetectionReport | None:
        """What detection found (None: not yet, or it failed)."""
        return self.workbench.report

    @property
    def model_info(self) -> ModelInfo | None:
        """The plan's model header (None until it is read)."""
        return self.workbench.model

    @property
    def draft_info(self) -> ModelInfo | None:
        """The separate draft model's header (None: none read)."""
        return self.workbench.draft

    @property
    def draft_path(self) -> Path | None:
        """The file ``draft_info`` was read from."""
        return self.workbench.draft_path

    @property
    def speed_inputs(self) -> SpeedInputs:
        """The rates and stored runs speeds are estimated with (an assumed desktop until the
        probe's rates land)."""
        return self.workbench.speed

    # -- the Plan -----------------------------------------------------------------------------

    @property
    def tasks(self) -> TaskManager:
        """The wizard's task manager (pages run their long actions through it)."""
        return self._tasks

    @property
    def plan(self) -> Plan:
        return self._plan

    def set_plan(self, plan: Plan) -> None:
        """Replace the Plan; reads the model again when the plan names another one."""
        if plan == self._plan:
            return
        self._plan = plan
        if plan.model not in (self.model_choice, self._loading_choice, self._failed_choice):
            self._start_model_load(plan.model, commit=False)
        draft = plan.draft.path
        if draft is not None and draft not in (self.draft_path, self._draft_tried):
            self._start_draft_load(draft, commit=False)
        self.plan_changed.emit(plan)

    def update(self, changes: dict[str, Any]) -> Plan:
        """Apply dotted-path changes to the Plan (raises PlanError when invalid)."""
        plan = plan_with(self._plan, changes)
        self.set_plan(plan)
        return plan

    # -- detection ------------------------------------------------------------------------------

    @property
    def detecting(self) -> bool:
        return self._tasks.is_running(DETECT_KEY)

    def refresh_detection(self) -> None:
        """Run the detector in the background; ``report_changed`` announces the answer."""
        detector = self._detector

        def job(token: CancelToken) -> DetectionReport:
            return detector()

        self._tasks.run(job, self._on_detected, self._on_detection_failed, key=DETECT_KEY)
        self.activity_changed.emit()

    def set_report(self, report: DetectionReport | None) -> None:
        """Use this report (tests and the screenshot command may set one directly)."""
        self.workbench.set_report(report)
        self.normalize_device()
        self.report_changed.emit(report)
        self.activity_changed.emit()

    def add_engine(self, info: EngineInfo) -> None:
        """A build the user picked (probed): detection's answer plus this one."""
        if self.report is None:
            return
        kept = [e for e in self.report.engines if e.real_path != info.real_path]
        self.set_report(self.report.model_copy(update={"engines": [*kept, info]}))

    def _on_detected(self, report: DetectionReport) -> None:
        self.detection_error = None
        self.set_report(report)

    def _on_detection_failed(self, exc: BaseException) -> None:
        self.detection_error = f"Detection failed: {error_sentence(exc)}"
        self.set_report(None)

    def normalize_device(self) -> None:
        """Point the plan at something that exists: a detected GPU, the CPU or a catalogue card.

        ``auto`` with no GPU detected means what ``planning.resolve`` makes of it, as for
        ``mtpstudio plan``: the demo card plans for the catalogue card (which the plan then
        names), a real model file for the CPU (the plan keeps ``auto``).
        """
        self.device_notice = None
        if self.report is None:
            return
        device = self._plan.device
        gpus = discrete_gpu_ids(self.report)
        if device == "cpu" or device in catalogue_ids():
            return
        if device == "auto":
            if gpus:
                return
            if self._plan.model.path is not None:
                self.device_notice = (
                    "No GPU was detected, so the plan is for the CPU; choose a catalogue card "
                    "below to plan for one."
                )
                return
            card = gpu_card(DEFAULT_GPU_CARD)
            self.device_notice = (
                f"No GPU was detected, so the plan is for the catalogue {card.label}; choose "
                "another card or the CPU below."
            )
            self.update({"device": DEFAULT_GPU_CARD})
            return
        if device.lower() in (g.lower() for g in gpus):
            return
        replacement = "auto" if gpus else DEFAULT_GPU_CARD
        self.device_notice = (
            f"The plan's device {device} was not detected on this computer; planning for "
            f"{'the detected GPU' if gpus else 'the catalogue ' + gpu_card(DEFAULT_GPU_CARD).label}"
            " instead."
        )
        self.update({"device": replacement})

    # -- the model ------------------------------------------------------------------------------

    @property
    def loading_model(self) -> bool:
        return self._tasks.is_running(MODEL_KEY)

    def load_model(self, choice: ModelChoice | None = None) -> None:
        """Read the plan's model (or ``choice``, kept only if it reads) in the background."""
        if choice is None:
            self._start_model_load(self._plan.model, commit=False)
            draft = self._plan.draft.path  # and the draft model the plan names, read once
            if draft is not None and draft not in (self.draft_path, self._draft_tried):
                self._start_draft_load(draft, commit=False)
        else:
            self._start_model_load(choice, commit=True)

    def _start_model_load(self, choice: ModelChoice, *, commit: bool) -> None:
        loader = self._model_loader
        self._loading_choice = choice

        def job(token: CancelToken) -> ModelInfo:
            return loader(choice)

        def done(info: ModelInfo) -> None:
            self._loading_choice = self._failed_choice = None
            self.model_choice, self.model_error = choice, None
            self.workbench.set_model(info)
            if commit and self._plan.model != choice:
                # another model: its placement is planned anew (the engine's fit, every layer
                # offered to the GPU), not carried over from the model before
                self.set_plan(replanned_for_model(self._plan, choice))
            self.model_changed.emit(info)
            self.activity_changed.emit()

        def failed(exc: BaseException) -> None:
            self._loading_choice = None
            self.model_error = error_sentence(exc)
            if not commit:  # the plan's own model cannot be read: nothing to plan with
                self._failed_choice = choice
                self.model_choice = None
                self.workbench.set_model(None)
                self.model_changed.emit(None)
            self.model_failed.emit(self.model_error)
            self.activity_changed.emit()

        self._tasks.run(job, done, failed, key=MODEL_KEY)
        self.activity_changed.emit()

    # -- the draft model --------------------------------------------------------------------------

    @property
    def loading_draft(self) -> bool:
        return self._tasks.is_running(DRAFT_KEY)

    def load_draft(self, path: Path) -> None:
        """Read a draft GGUF's header in the background; put it in the Plan only if it reads
        and the Plan takes it (``draft_failed`` says why not; the Plan stays as it was)."""
        self._start_draft_load(path, commit=True)

    def clear_draft(self) -> Plan:
        """No draft model in the Plan (MTP, when on or auto, drafts again)."""
        return self.update({"draft.path": None, "draft.gpu_layers": None})

    def _start_draft_load(self, path: Path, *, commit: bool) -> None:
        self._draft_tried = path

        def job(token: CancelToken) -> ModelInfo:
            return read_model_info(path)

        def done(info: ModelInfo) -> None:
            self._draft_tried = None
            self.draft_error = None
            self.workbench.set_draft(info, path)
            if commit and self._plan.draft.path != path:
                try:
                    self.update({"draft.path": str(path)})
                except MtpStudioError as exc:
                    self.draft_error = (
                        "MTP is set to on, and a plan drafts with MTP or with a draft model, "
                        "not both: set MTP to auto or off, then choose the draft model again."
                        if self._plan.mtp.enabled
                        else f"The plan did not take the draft model: {error_sentence(exc)}"
                    )
                    self.draft_failed.emit(self.draft_error)
            self.draft_changed.emit(info)
            self.activity_changed.emit()

        def failed(exc: BaseException) -> None:
            if commit:
                self._draft_tried = None
            self.draft_error = f"The draft model cannot be used: {error_sentence(exc)}"
            self.draft_failed.emit(self.draft_error)
            self.activity_changed.emit()

        self._tasks.run(job, done, failed, key=DRAFT_KEY)
        self.activity_changed.emit()

    # -- planning ---------------------------------------------------------------------------------

    def machine(self) -> MachineFacts:
        """The machine as the planner sees it (no GPU, no builds until detection answers)."""
        return self.workbench.machine()

    def context(self) -> PlanningContext | None:
        """What the current Plan is planned with (``Workbench.context``); None until the model
        is read."""
        return self.workbench.context(self._plan)

    def set_speed_inputs(self, inputs: SpeedInputs) -> None:
        """Plan speeds with this computer's rates and stored runs from now on."""
        if inputs == self.workbench.speed:
            return
        self.workbench.set_speed(inputs)
        self.speed_inputs_changed.emit()

    def load_speed_inputs(self, loader: SpeedLoader | None = None) -> None:
        """Read this computer's rates (probing it once, about a second) and the stored runs in
        the background (``loader``: another source); ``speed_inputs_changed`` announces them."""
        from mtpstudio.core.usecases.speed import load_speed_inputs

        read = loader or load_speed_inputs

        def job(token: CancelToken) -> SpeedInputs:
            return read()

        self._tasks.run(job, self.set_speed_inputs, lambda exc: None, key=SPEED_KEY)

    def build(self) -> BuildChoice:
        """The build the plan uses: the probed one, else its flavour's documented flags."""
        return self.workbench.build(self._plan)

    def resolved(self) -> ResolvedPlan | None:
        """The current Plan resolved once, as the pages show it (the evaluation's, when there
        is one): what Start launches. None until the model is read.

        Raises:
            MtpStudioError: the plan cannot be resolved.
        """
        return self.workbench.resolved(self._plan)

    def with_levers(
        self,
        resolved: ResolvedPlan,
        show: Callable[[list[FitSuggestion]], None],
        key: str,
    ) -> None:
        """Every lever's ranking for ``resolved`` handed to ``show``: the workbench's kept one
        at once, else ranked on a pool thread and kept (one ranking per plan for every page);
        ``show([])`` when the ranking fails."""
        kept = self.workbench.kept_levers(resolved.plan)
        if kept is not None:
            show(kept)
            return

        def work(token: CancelToken) -> list[FitSuggestion]:
            return rank_levers(resolved)

        def ranked(answers: list[FitSuggestion]) -> None:
            self.workbench.keep_levers(resolved, answers)
            show(answers)

        self.tasks.run(work, ranked, lambda _: show([]), key=key)

    def evaluation(self, *, background: bool = False) -> Evaluation | None:
        """Budget, command line and warnings of the current Plan (cached per Plan).

        ``background``: do not wait for it; while a slider is dragged the engine's fit and
        the CUDA replays (tens of milliseconds on a CPU-offload plan) run on a pool thread,
        one at a time, always for the newest Plan, and ``evaluated`` is emitted when one for
        the current Plan lands. Meanwhile the newest finished evaluation (of an earlier
        Plan) is returned, or None.
        """
        kept = self.workbench.cached(self._plan)
        if kept is not None:
            return kept
        pctx = self.context()
        if pctx is None:
            return None
        if background:
            self._evaluate_in_background(pctx)
            return self._last_evaluation
        self._last_evaluation = self.workbench.evaluation(self._plan)
        return self._last_evaluation

    def _evaluate_in_background(self, pctx: PlanningContext) -> None:
        if self._tasks.is_running(EVALUATE_KEY):
            return  # when it lands, the newest Plan is evaluated next
        plan = self._plan

        def job(token: CancelToken) -> Evaluation:
            return evaluate_plan(plan, pctx)

        def done(evaluation: Evaluation) -> None:
            self._last_evaluation = evaluation
            if plan is self._plan and self.context() is pctx:
                self.workbench.keep(evaluation)
                self.evaluated.emit()
            else:
                current = self.context()
                if current is not None:
                    self._evaluate_in_background(current)

        self._tasks.run(job, done, lambda exc: None, key=EVALUATE_KEY)
