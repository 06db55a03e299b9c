"""VRAM budget page: the stacked bar per device, live sliders, Fit buttons, the command line."""

from __future__ import annotations

import re
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import native_context, setting
from mtpstudio.core.planner.levers import FitSuggestion
from mtpstudio.core.planner.text import TRUST_LEGEND
from mtpstudio.core.usecases.budget_controls import ControlState
from mtpstudio.core.usecases.budget_words import (
    faster_line,
    fit_line,
    host_line,
    speed_line,
    target_line,
    verdict,
)
from mtpstudio.core.usecases.workbench import follows_published_setup
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.help_text import field_description
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import Evaluation, WizardState
from mtpstudio.ui.widgets.command_box import CommandBox
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.number_box import NumberBox
from mtpstudio.ui.widgets.vram_bar import VramBar

NO_MODEL_CTX_TOP = 262144
"""The context slider's top before a model names its native context."""
LEVERS_KEY = "budget-levers"


_COMPACT = (
    (re.compile(r"(\d+) more (expert )?(layers?) on the GPU"), r"+\1 \2\3 on GPU"),
    (re.compile(r"(\d+) fewer (expert )?(layers?) on the GPU"), r"-\1 \2\3 on GPU"),
    (re.compile(r"fits with (\d+) layers? on the CPU"), r"fits, \1 on CPU"),
    (re.compile(r"the same (expert )?layers on the GPU"), "no layer moved"),
)


def lever_entry(s: FitSuggestion) -> str:
    """A menu line: the change and what it does to speed, then (a right-aligned second
    column) what memory it leaves; compact, the whole sentence is the entry's tooltip."""
    head = f"{s.label}: {s.buys}" if s.buys else s.label
    tail = s.outcome()
    for pattern, short in _COMPACT:
        head, tail = pattern.sub(short, head), pattern.sub(short, tail)
    return f"{head}\t{tail}"


@dataclass
class SliderRow:
    """A slider and a spin box that edit the same Plan setting; ``unit`` maps slider steps."""

    path: str
    slider: QSlider
    spin: QSpinBox
    unit: int
    note: QLabel


class BudgetPage(PlanPage):
    """The memory budget of the Plan, following every slider step."""

    slug = "vram-budget"

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("VRAM budget")
        self.setSubTitle(
            "Where the memory goes, per device. Drag a slider and the bars follow; "
            "the Fit buttons ask the planner for a plan that fits."
        )
        self.last_suggestion: FitSuggestion | None = None
        self.last_message = ""  # what the last Fit button said, shown while its plan stands
        self._refreshing = True  # setting ranges below must not write into the Plan
        self.target_label = QLabel(self)
        self.target_label.setWordWrap(True)
        self.bar = VramBar(self)
        self.speed_label = QLabel(self)  # the plan's tokens/s beside the bar (core.speed)
        self.speed_label.setWordWrap(True)
        self.speed_label.setFixedHeight(2 * self.speed_label.fontMetrics().lineSpacing() + 4)
        self.speed_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.trust_label = QLabel(f"How sure each figure in the legend is — {TRUST_LEGEND}.", self)
        self.trust_label.setWordWrap(True)
        self.trust_label.setStyleSheet("color: #4b5563;")
        self.verdict = Notice(self)

        self.rows: dict[str, SliderRow] = {}
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        self.ctx = self._row(grid, 0, "Context", "runtime.ctx", " tokens")
        self.draft = self._row(grid, 1, "Draft depth", "mtp.draft_max", "")
        self.cpu_layers = self._row(grid, 2, "CPU expert layers", "runtime.n_cpu_moe", "")
        self.margin = self._row(grid, 3, "Margin", "runtime.fit_margin_mib", " MiB")

        self.fit_offload_button = QPushButton("Fit: fewest CPU expert layers", self)
        self.fit_offload_button.setToolTip(
            "Keep this context and move the fewest layers' experts to system RAM so it fits."
        )
        self.fit_context_button = QPushButton("Fit: largest context", self)
        self.fit_context_button.setToolTip(
            "Keep (or first find) the expert placement and grow the context as far as it fits."
        )
        self.levers_menu = QMenu(self)
        self.levers_button = QPushButton("Every lever…", self)
        self.levers_button.setToolTip(
            "What each lever buys, best first: the desktop reclaims, draft depth, cache types, "
            "context, experts or layers on the CPU. Pick one to apply it."
        )
        self.levers_button.setMenu(self.levers_menu)
        self.fit_label = QLabel(self)
        self.fit_label.setWordWrap(True)
        self.fit_label.setFixedHeight(2 * self.fit_label.fontMetrics().lineSpacing() + 4)
        fit_row = QHBoxLayout()
        fit_row.addWidget(self.fit_offload_button)
        fit_row.addWidget(self.fit_context_button)
        fit_row.addWidget(self.levers_button)
        fit_row.addWidget(self.fit_label, 1)

        self.faster_label = QLabel(self)  # the levers that make this plan faster, ranked
        self.faster_label.setWordWrap(True)
        # heights that do not follow the width: a wrap that grows the page would toggle the
        # scroll bar, whose width rewraps the text, and so on (a relayout storm)
        lines = self.faster_label.fontMetrics().lineSpacing()
        self.faster_label.setFixedHeight(3 * lines + 4)
        self.faster_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.faster_label.setStyleSheet("color: #166534;")
        self.faster_label.setVisible(False)
        self._levers_for: Plan | None = None
        self.faster: list[FitSuggestion] = []

        self.host_label = QLabel(self)
        self.host_label.setWordWrap(True)
        self.warnings_label = QLabel(self)
        self.warnings_label.setWordWrap(True)
        self.warnings_label.setStyleSheet("color: #92400e;")

        self.command = CommandBox(self)
        self.command.setFixedHeight(84)
        self.copy_button = QPushButton("Copy", self)
        self.copy_button.setToolTip("Copy the command line to the clipboard.")
        command_row = QHBoxLayout()
        command_row.addWidget(self.command, 1)
        command_row.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)

        layout = QVBoxLayout(self)
        layout.addWidget(self.target_label)
        layout.addWidget(self.bar)
        layout.addWidget(self.speed_label)
        layout.addWidget(self.trust_label)
        layout.addWidget(self.verdict)
        layout.addWidget(self.host_label)
        layout.addLayout(grid)
        layout.addLayout(fit_row)
        layout.addWidget(self.faster_label)
        layout.addWidget(self.warnings_label)
        layout.addWidget(QLabel("<b>Command line</b>", self))
        layout.addLayout(command_row)
        layout.addStretch()

        self.fit_offload_button.clicked.connect(self._on_fit_offload_clicked)
        self.fit_context_button.clicked.connect(self._on_fit_context_clicked)
        self.levers_menu.aboutToShow.connect(self.fill_levers_menu)
        self.copy_button.clicked.connect(self._on_copy_clicked)
        state.model_changed.connect(self._on_inputs_changed)
        state.report_changed.connect(self._on_inputs_changed)
        state.evaluated.connect(self._update_view)
        state.speed_inputs_changed.connect(self._on_speed_inputs_changed)
        self._refreshing = False

    def _row(self, grid: QGridLayout, row: int, title: str, path: str, suffix: str) -> SliderRow:
        """A slider and a spin box over the setting's declared range, one step a slider
        notch (a declared ``slider_high`` tops the slider where the range is too wide)."""
        declared = setting(path)
        low, high, unit = declared.whole_range()
        slider = QSlider(Qt.Orientation.Horizontal, self)
        slider.setRange(low // unit, int(declared.slider_high or high) // unit)
        slider.setTracking(True)  # valueChanged while dragging: the bar follows the hand
        kind = {"runtime.ctx": "tokens", "runtime.fit_margin_mib": "mib"}.get(path, "count")
        spin = NumberBox(kind, self)
        spin.setRange(low, high)
        spin.setSuffix(suffix)
        spin.setSingleStep(unit)
        spin.setGroupSeparatorShown(True)
        spin.setKeyboardTracking(False)
        spin.setMinimumWidth(130)
        note = QLabel(self)
        note.setStyleSheet("color: #6b7280;")
        tip = field_description(path)
        for widget in (slider, spin):
            widget.setToolTip(tip)
        label = QLabel(title, self)
        label.setToolTip(tip)
        grid.addWidget(label, row, 0)
        grid.addWidget(slider, row, 1)
        grid.addWidget(spin, row, 2)
        grid.addWidget(note, row, 3)
        entry = SliderRow(path, slider, spin, unit, note)
        self.rows[path] = entry
        slider.valueChanged.connect(lambda v: self._on_value_changed(entry, v * entry.unit))
        slider.sliderReleased.connect(self._update_view)  # the dragged value, evaluated
        spin.valueChanged.connect(lambda v: self._on_value_changed(entry, v))
        return entry

    # -- filling ----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        plan = self.state.plan
        info = self.state.model_info
        low, high, step = setting("runtime.ctx").whole_range()
        native = NO_MODEL_CTX_TOP if info is None else native_context(info.context_length) or low
        ctx_top = min(max(native, plan.runtime.ctx), high)
        self.ctx.slider.setRange(low // step, ctx_top // step)
        n_layer = info.n_layer if info is not None else 0
        self.cpu_layers.slider.setRange(0, max(n_layer, plan.runtime.n_cpu_moe))
        self.cpu_layers.spin.setRange(0, max(n_layer, plan.runtime.n_cpu_moe))
        self._update_view()

    def _show_values(self, plan: Plan, budget: Budget | None) -> None:
        cpu_layers = plan.runtime.n_cpu_moe
        info = self.state.model_info
        if budget is not None and plan.runtime.moe is not MoePlacement.N_CPU_MOE:
            trunk = info.n_layer if info is not None else None  # the MTP block is not a layer
            cpu_layers = len(
                [n for n in budget.effective.cpu_expert_layers if trunk is None or n < trunk]
            )
        values = {
            "runtime.ctx": plan.runtime.ctx,
            "mtp.draft_max": plan.mtp.draft_max,
            "runtime.n_cpu_moe": cpu_layers,
            "runtime.fit_margin_mib": plan.runtime.fit_margin_mib,
        }
        for path, value in values.items():
            row = self.rows[path]
            if row.spin.value() != value:
                row.spin.setValue(value)
            slider_value = round(value / row.unit)
            if row.slider.value() != slider_value and not row.slider.isSliderDown():
                row.slider.setValue(slider_value)

    def _update_view(self) -> None:
        """Evaluate the Plan and show bar, verdict, host, command."""
        plan = self.state.plan
        # while a slider is dragged the evaluation runs in the background and the bar shows
        # the newest one that landed (a CPU-offload plan replays the engine's fit: ~50 ms)
        dragging = any(row.slider.isSliderDown() for row in self.rows.values())
        evaluation = self.state.evaluation(background=dragging)
        budget = evaluation.budget if evaluation is not None else None
        was = self._refreshing
        self._refreshing = True
        try:
            self._show_values(plan, budget)
        finally:
            self._refreshing = was
        self._update_enabled(plan, evaluation)
        if evaluation is None or budget is None:
            self.bar.set_rows([])
            waiting = self.state.model_error or "Waiting for the model header…"
            self.verdict.show_text(
                evaluation.error if evaluation is not None and evaluation.error else waiting,
                Tone.INFO,
            )
            self.target_label.setText("")
            self.speed_label.setText("")
            self.host_label.setText("")
            self.command.set_argv(None)
            self.warnings_label.setText("")
            return
        self.bar.set_budget(budget)
        target = evaluation.target.source if evaluation.target else None
        published = plan.model.path is None and follows_published_setup(plan)
        self.target_label.setText(target_line(target, published, budget))
        self._show_verdict(budget, evaluation)
        self._show_speed(evaluation)
        self._show_host(budget)
        self._show_command(evaluation)
        self._show_fit_label(evaluation)
        self._start_levers(evaluation)

    def _update_enabled(self, plan: Plan, evaluation: Evaluation | None) -> None:
        """Paint the controls as the workbench decided them for this plan."""
        controls = self.state.workbench.budget_controls(plan, evaluation)
        for row, state in (
            (self.draft, controls.draft),
            (self.cpu_layers, controls.cpu_layers),
            (self.margin, controls.margin),
        ):
            self._enable(row, state)
        self.fit_offload_button.setText(controls.fit_offload_text)
        self.fit_offload_button.setToolTip(controls.fit_offload_tip)
        self.ctx.note.setText(controls.ctx_note)
        if self.title() != controls.title:  # setting it relays out the wizard's header: 2-3 ms
            self.setTitle(controls.title)
        for button in (self.fit_offload_button, self.fit_context_button, self.levers_button):
            button.setEnabled(controls.fit_enabled)
        if controls.fit_note is not None:
            self.fit_label.setText(controls.fit_note)

    def _enable(self, row: SliderRow, state: ControlState) -> None:
        tip = field_description(row.path)
        reason = state.reason
        for widget in (row.slider, row.spin):
            widget.setEnabled(reason is None)
            widget.setToolTip(f"Not available: {reason}.\n\n{tip}" if reason else tip)
        if state.note is not None:
            row.note.setText(state.note)

    def _show_verdict(self, budget: Budget, evaluation: Evaluation | None = None) -> None:
        info = self.state.model_info
        result = evaluation.result if evaluation is not None else None
        said = verdict(budget, result, info is not None and info.is_moe)
        self.verdict.show_text(said.text, Tone(said.tone))

    def _show_fit_label(self, evaluation: Evaluation | None) -> None:
        """The text beside the Fit buttons: always the current plan's placement and spare,
        after what the last lever or Fit button did while its plan still stands."""
        if evaluation is None or evaluation.budget is None or evaluation.result is None:
            return
        if evaluation.target is None or not evaluation.target.device.is_gpu:
            return
        now = self.state.workbench.standing(evaluation)
        if now is None:
            return
        applied = self.last_suggestion
        said_before = None
        if applied is not None and applied.plan == self.state.plan:
            said_before = self.last_message or f"Applied {applied.message}."
        else:
            self.last_suggestion, self.last_message = None, ""
        said = fit_line(now, said_before)
        self.fit_label.setText(said.text)
        self.fit_label.setToolTip(said.text)
        self.fit_label.setStyleSheet("color: #991b1b;" if said.tone == "bad" else "")

    def _start_levers(self, evaluation: Evaluation) -> None:
        """Rank every lever for this plan in the background (tens of budgets, ~0.1 s) and show
        the ones that make it faster: a reclaim that moves a layer is always said."""
        plan = self.state.plan
        on_gpu = evaluation.target is not None and evaluation.target.device.is_gpu
        if plan == self._levers_for or evaluation.plan is not plan:
            return  # (an earlier plan's: the current one's starts them when it lands)
        self._levers_for = plan
        try:
            resolved = self.state.resolved()  # the plan the page shows, resolved once
        except MtpStudioError:
            resolved = None
        if resolved is None or not on_gpu:
            self._show_faster([])
            return
        self.state.with_levers(
            resolved, lambda ranked: self._show_faster([s for s in ranked if s.faster]), LEVERS_KEY
        )

    def _show_faster(self, faster: list[FitSuggestion]) -> None:
        self.faster = faster
        text = faster_line(faster)
        self.faster_label.setText(text)
        self.faster_label.setToolTip(text)
        self.faster_label.setVisible(bool(text))

    def _show_speed(self, evaluation: Evaluation) -> None:
        """The plan's estimated tokens/s beside the bar; what it rests on in the tooltip."""
        line, tip = speed_line(evaluation.result.speed if evaluation.result is not None else None)
        self.speed_label.setText(line)
        self.speed_label.setToolTip(tip)

    def _on_speed_inputs_changed(self) -> None:
        self._levers_for = None  # the levers' gains are re-estimated too
        if self.is_current():
            self.refresh()

    def _show_host(self, budget: Budget) -> None:
        said = host_line(budget)
        self.host_label.setStyleSheet("color: #991b1b;" if said.tone == "bad" else "")
        self.host_label.setText(said.text)

    def _show_command(self, evaluation: Evaluation) -> None:
        argv = evaluation.argv
        if argv is None:
            self.command.set_message(f"No command line: {evaluation.error}")
            self.copy_button.setEnabled(False)
        else:
            self.command.set_argv(argv)
            self.copy_button.setEnabled(True)
        warnings = [w for w in evaluation.warnings if "short:" not in w]
        self.warnings_label.setText("\n".join(f"• {w}" for w in warnings))
        self.warnings_label.setVisible(bool(warnings))

    # -- events ------------------------------------------------------------------------------------

    def _on_value_changed(self, row: SliderRow, value: int) -> None:
        if self._refreshing:
            return
        changes: dict[str, object] = {row.path: value}
        plan = self.state.plan
        if row.path == "runtime.n_cpu_moe":
            if plan.runtime.moe is MoePlacement.N_CPU_MOE and plan.runtime.n_cpu_moe == value:
                return
            changes["runtime.moe"] = MoePlacement.N_CPU_MOE.value
        elif row.path == "runtime.ctx" and plan.runtime.ctx == value:
            return
        self.apply(changes)

    def _after_apply(self, plan: Plan) -> None:
        self._update_view()

    def plan_refused(self, sentence: str | None) -> None:
        if sentence:
            self.verdict.show_text(sentence, Tone.BAD)

    def _on_inputs_changed(self, _: object) -> None:
        if self.is_current():
            self.refresh()

    def suggestions(self) -> list[FitSuggestion]:
        """The planner's two answers for the current Plan (a few milliseconds)."""
        return self.state.workbench.fit_answers(self.state.plan)

    def apply_suggestion(self, index: int) -> FitSuggestion | None:
        """Apply the planner's answer ``index`` (0: fewest experts or layers on the CPU, 1: the
        largest ctx)."""
        try:
            suggestions = self.suggestions()
        except MtpStudioError as exc:
            self.fit_label.setText(error_sentence(exc))
            return None
        if not suggestions:
            return None
        suggestion = suggestions[index]
        self.last_suggestion = suggestion
        self.state.set_plan(suggestion.plan)
        self.refresh()  # also when the page is driven while not shown
        message = suggestion.message[:1].upper() + suggestion.message[1:] + "."
        if index > 0 and "suggested above" in message:  # the page shows one answer: say which
            first = suggestions[0].message
            message = message.replace(
                "with the offload suggested above", f"with the offload of the other Fit ({first})"
            )
        self.last_message = message if suggestion.fits else f"{message} It still does not fit."
        self._show_fit_label(self.state.evaluation())
        return suggestion

    def fill_levers_menu(self) -> list[FitSuggestion]:
        """The ranked answers of every lever, one menu entry each (computed when the menu opens:
        a few dozen budgets, too many for every slider step)."""
        self.levers_menu.clear()
        try:
            ranked = self.state.workbench.levers(self.state.plan)
        except MtpStudioError as exc:
            self.levers_menu.addAction(error_sentence(exc)).setEnabled(False)
            return []
        self.levers_menu.setToolTipsVisible(True)
        for suggestion in ranked:
            # the change and what it does to speed; memory spare as the second column
            action = self.levers_menu.addAction(lever_entry(suggestion))
            action.setToolTip(suggestion.message)
            action.triggered.connect(lambda _=False, s=suggestion: self.apply_lever(s))
        if not ranked:
            self.levers_menu.addAction("No lever changes this plan.").setEnabled(False)
        return ranked

    def apply_lever(self, suggestion: FitSuggestion) -> None:
        """Apply one lever's answer from the menu and say what it gives."""
        self.last_suggestion = suggestion
        self.state.set_plan(suggestion.plan)
        self.refresh()

    def _on_fit_offload_clicked(self) -> None:
        self.apply_suggestion(0)

    def _on_fit_context_clicked(self) -> None:
        self.apply_suggestion(1)

    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.command.command_line())

    def command_line(self) -> str:
        return self.command.command_line()
