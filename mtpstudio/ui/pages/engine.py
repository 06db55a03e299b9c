"""Engine & options page: the builds found with capability badges, and the Plan's options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import BuildChoice
from mtpstudio.core.usecases.engine_controls import (
    choice_state,
    chosen_row,
    unavailable_line,
    unplaced,
)
from mtpstudio.ui.help_text import field_description, setting_tooltip
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.widgets.build_list import BuildList
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.engine_picker import EnginePicker
from mtpstudio.ui.widgets.setting_controls import SettingControls, plan_value, tristate_data


class EnginePage(PlanPage):
    """Pick a build; set context, caches, MTP, placement and server options."""

    slug = "engine"

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("Engine & options")
        self.setSubTitle(
            "The llama-server builds found and what each accepts; the options of the plan "
            "(hover an option to see what it does and the flag it becomes)."
        )
        self.factory = SettingControls(self, self._on_control_changed)
        self.controls = self.factory.by_path
        self.draft_picked: Path | None = None  # the last draft file the user chose
        self.draft_error: str | None = None
        self.picker = EnginePicker(state, self)
        self.reasons: dict[str, str] = {}

        self.build_list = BuildList(self)
        self.notice = Notice(self)
        self.unavailable_label = QLabel(self)
        self.unavailable_label.setWordWrap(True)
        self.unavailable_label.setStyleSheet("color: #6b7280;")

        context = QGroupBox("Context && cache", self)
        cf = QFormLayout(context)
        self.ctx = self.factory.spin("runtime.ctx", " tokens", kind="tokens")
        self.factory.row(cf, "runtime.ctx", self.ctx)
        self.cache_k = self.factory.combo("runtime.cache_type_k")
        self.cache_v = self.factory.combo("runtime.cache_type_v")
        self.factory.row(cf, "runtime.cache_type_k", self.cache_k)
        self.factory.row(cf, "runtime.cache_type_v", self.cache_v)
        self.flash_attn = self.factory.combo("runtime.flash_attn")
        self.factory.row(cf, "runtime.flash_attn", self.flash_attn)
        self.batch = self.factory.spin("runtime.batch")
        self.ubatch = self.factory.spin("runtime.ubatch")
        for box in (self.batch, self.ubatch):
            box.size_for(65536)  # side by side: as wide as a five-digit batch, not 4 Mi
        cf.addRow("Batch / ubatch", self.factory.pair(self.batch, self.ubatch))

        server = QGroupBox("Server", self)
        sf = QFormLayout(server)
        self.host = self.factory.line("server.host")
        self.port = self.factory.spin("server.port")
        self.port.setGroupSeparatorShown(False)
        self.api_key_file = self.factory.line("server.api_key_file", optional=True)
        self.api_key_file.setPlaceholderText("none")
        self.factory.row(sf, "server.host", self.host)
        self.factory.row(sf, "server.port", self.port)
        self.factory.row(sf, "server.api_key_file", self.api_key_file)

        mtp = QGroupBox("Drafting: MTP or a draft model", self)
        mf = QFormLayout(mtp)
        self.mtp_enabled = self.factory.tristate("mtp.enabled")
        self.factory.row(mf, "mtp.enabled", self.mtp_enabled)
        self.mtp_state = QLabel(self)
        self.mtp_state.setWordWrap(True)
        self.mtp_state.setStyleSheet("color: #374151;")
        mf.addRow(self.mtp_state)
        self.draft_max = self.factory.spin("mtp.draft_max")
        self.factory.row(mf, "mtp.draft_max", self.draft_max)
        self.draft_min = self.factory.spin("mtp.draft_min")
        self.factory.row(mf, "mtp.draft_min", self.draft_min)
        self.draft_p_min = self.factory.double("mtp.draft_p_min")
        self.factory.row(mf, "mtp.draft_p_min", self.draft_p_min)
        self.acceptance = self.factory.double("mtp.acceptance")
        self.factory.row(mf, "mtp.acceptance", self.acceptance)
        self.draft_cache_k = self.factory.combo("mtp.cache_type_k")
        self.draft_cache_v = self.factory.combo("mtp.cache_type_v")
        mf.addRow("Draft K / V cache", self.factory.pair(self.draft_cache_k, self.draft_cache_v))
        self.draft_file = QLineEdit(self)
        self.draft_file.setReadOnly(True)
        self.draft_file.setPlaceholderText("none")
        self.draft_file.setToolTip(field_description("draft.path"))
        self.draft_choose = QPushButton("Choose…", self)
        self.draft_choose.setToolTip("Pick a small GGUF that shares the model's vocabulary.")
        self.draft_clear = QPushButton("Clear", self)
        self.draft_clear.setToolTip("No draft model: MTP (on or auto) drafts instead.")
        draft_buttons = QHBoxLayout()
        draft_buttons.setContentsMargins(0, 0, 0, 0)
        draft_buttons.addWidget(self.draft_choose)
        draft_buttons.addWidget(self.draft_clear)
        draft_buttons.addStretch(1)
        self.factory.row(mf, "draft.path", self.draft_file)
        mf.addRow("", draft_buttons)
        self.draft_gpu_layers = self.factory.spin("draft.gpu_layers")
        self.factory.row(mf, "draft.gpu_layers", self.draft_gpu_layers)
        self.draft_note = QLabel(self)
        self.draft_note.setWordWrap(True)
        mf.addRow(self.draft_note)

        placement = QGroupBox("Placement && threads", self)
        pf = QFormLayout(placement)
        self.moe = self.factory.combo("runtime.moe")
        self.factory.row(pf, "runtime.moe", self.moe)
        self.n_cpu_moe = self.factory.spin("runtime.n_cpu_moe", " layers")
        self.factory.row(pf, "runtime.n_cpu_moe", self.n_cpu_moe)
        self.margin = self.factory.spin("runtime.fit_margin_mib", " MiB", kind="mib")
        self.margin.size_for(16384)  # as wide as 16 GiB, not the 1 TiB the Plan allows
        self.factory.row(pf, "runtime.fit_margin_mib", self.margin)
        self.moe_cache = self.factory.spin("runtime.moe_cache_mib", " MiB", kind="mib")
        self.moe_cache.size_for(16384)
        self.factory.row(pf, "runtime.moe_cache_mib", self.moe_cache)
        self.gpu_layers = self.factory.spin("runtime.n_gpu_layers")
        self.factory.row(pf, "runtime.n_gpu_layers", self.gpu_layers)
        self.load_mode = self.factory.combo("runtime.load_mode")
        self.factory.row(pf, "runtime.load_mode", self.load_mode)
        self.threads = self.factory.spin("runtime.threads")
        self.factory.row(pf, "runtime.threads", self.threads)
        self.parallel = self.factory.spin("runtime.parallel")
        self.factory.row(pf, "runtime.parallel", self.parallel)

        forms = {"context": cf, "server": sf, "drafting": mf, "placement": pf}
        for extra in unplaced(forms, self.controls):  # declared since: its kind's control
            self.factory.row(forms[extra.form], extra.path, self.factory.of_kind(extra.path))

        left = QVBoxLayout()
        left.addWidget(context)
        left.addWidget(server)
        left.addStretch()
        grid = QGridLayout()
        grid.addLayout(left, 0, 0)
        grid.addWidget(mtp, 0, 1, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(placement, 0, 2, Qt.AlignmentFlag.AlignTop)
        for column in range(3):
            grid.setColumnStretch(column, 1)

        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Engine build</b>", self))
        layout.addWidget(self.build_list)
        layout.addWidget(self.picker)
        layout.addWidget(self.notice)
        layout.addLayout(grid)
        layout.addWidget(self.unavailable_label)
        layout.addStretch()

        self.build_list.currentRowChanged.connect(self._on_build_chosen)
        self.picker.picked.connect(lambda text: self.notice.show_text(text, Tone.GOOD))
        self.picker.failed.connect(lambda text: self.notice.show_text(text, Tone.BAD))
        state.report_changed.connect(self._on_inputs_changed)
        state.model_changed.connect(self._on_inputs_changed)
        state.draft_changed.connect(self._on_inputs_changed)
        state.draft_failed.connect(self._on_draft_failed)
        state.activity_changed.connect(self._show_draft)
        self.draft_choose.clicked.connect(self._on_draft_choose_clicked)
        self.draft_clear.clicked.connect(self.clear_draft)

    # -- builds ------------------------------------------------------------------------------------

    @property
    def choices(self) -> list[BuildChoice]:
        """The builds listed, in their rows' order."""
        return self.build_list.choices

    def _fill_builds(self) -> None:
        self.build_list.fill(self.state.workbench.build_choices(), self.state.model_info)
        self.build_list.select(chosen_row(self.choices, self.state.build()))

    # -- filling -----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        self._fill_builds()
        plan = self.state.plan
        for control in self.controls.values():
            control.write(plan_value(plan, control.path))
        self._update_dynamic()

    def _update_dynamic(self) -> None:
        """Enabled states, reasons and tooltips for the current Plan and build."""
        plan = self.state.plan
        build = self.state.build().build  # the probed build, else its documented flags
        self.reasons = self.state.workbench.disabled_reasons(plan, build)
        evaluation = self.state.evaluation()
        spec: LaunchSpec | None = (
            evaluation.result.spec if evaluation and evaluation.result else None
        )
        for path, control in self.controls.items():
            reason = self.reasons.get(path)
            enabled = reason is None
            if path == "mtp.enabled":
                enabled = True  # auto and off are always there; "on" is greyed out below
            control.widget.setEnabled(enabled)
            control.widget.setToolTip(setting_tooltip(path, spec, reason))
        for path, combo in (("runtime.moe", self.moe), ("runtime.load_mode", self.load_mode)):
            self._disable_choices(path, combo, plan_value(plan, path))
        self._disable_choices("mtp.enabled", self.mtp_enabled, tristate_data(plan.mtp.enabled))
        result = evaluation.result if evaluation is not None else None
        self.mtp_state.setText(result.mtp_line if result is not None else "")
        line = unavailable_line(self.reasons)
        self.unavailable_label.setText(line)
        self.unavailable_label.setVisible(bool(line))
        self._show_draft()
        if self.last_refusal:  # the latest edit was refused: say that first
            self.notice.show_text(self.last_refusal, Tone.BAD)
        elif evaluation is not None and evaluation.error:
            self.notice.show_text(f"The engine cannot run this plan: {evaluation.error}", Tone.BAD)
        else:
            self.notice.show_text(None)

    def _disable_choices(self, path: str, combo: QComboBox, current: Any) -> None:
        model = combo.model()
        if not isinstance(model, QStandardItemModel):
            return
        for row in range(combo.count()):
            enabled, tip = choice_state(self.reasons, path, combo.itemData(row), current)
            model.item(row).setEnabled(enabled)
            model.item(row).setToolTip(tip)

    # -- events ------------------------------------------------------------------------------------

    def _on_control_changed(self, path: str) -> None:
        if self._refreshing:
            return
        value = self.controls[path].read()
        if value == plan_value(self.state.plan, path):
            return
        changes: dict[str, Any] = {path: value}
        if path == "runtime.n_cpu_moe":
            changes["runtime.moe"] = MoePlacement.N_CPU_MOE.value
        self.apply(changes)

    def _on_build_chosen(self, row: int) -> None:
        if self._refreshing or not 0 <= row < len(self.choices):
            return
        choice = self.choices[row]
        self.apply({"engine.flavour": choice.flavour.value, "engine.binary": choice.binary})

    def _after_apply(self, plan: Plan) -> None:
        self.refresh()

    def plan_refused(self, sentence: str | None) -> None:
        if sentence:
            self.notice.show_text(sentence, Tone.BAD)

    # -- the draft model ---------------------------------------------------------------------------

    def ask_draft_path(self) -> Path | None:
        """The file dialog (tests replace this)."""
        start = str(self.state.plan.draft.path or self.state.plan.model.path or Path.home())
        name, _ = QFileDialog.getOpenFileName(
            self, "Choose a draft model", start, "GGUF models (*.gguf);;All files (*)"
        )
        return Path(name) if name else None

    def choose_draft(self, path: Path) -> None:
        """Read the draft's header in the background; the Plan takes it once it reads."""
        self.draft_error = None
        self.draft_picked = path
        self.state.load_draft(path)
        self._show_draft()

    def clear_draft(self) -> None:
        self.draft_error = None
        self.draft_picked = None
        self.apply({"draft.path": None, "draft.gpu_layers": None})

    def _on_draft_choose_clicked(self) -> None:
        path = self.ask_draft_path()
        if path is not None:
            self.choose_draft(path)

    def _on_draft_failed(self, sentence: str) -> None:
        self.draft_error = sentence
        self._show_draft()

    def _show_draft(self) -> None:
        """The draft file (the plan's, or the one picked and refused) and its state."""
        plan_path = self.state.plan.draft.path
        picked = self.draft_picked
        shown = picked if picked is not None and (self.draft_error or plan_path is None) else None
        if self.state.loading_draft and picked is not None:
            shown = picked
        text = str(shown if shown is not None else plan_path or "")
        if self.draft_file.text() != text:
            self.draft_file.setText(text)
        self.draft_clear.setEnabled(plan_path is not None)
        info = self.state.draft_info
        if self.state.loading_draft:
            self.draft_note.setText("Reading the draft model's header…")
            self.draft_note.setStyleSheet("color: #374151;")
        elif self.draft_error:
            self.draft_note.setText(self.draft_error)
            self.draft_note.setStyleSheet("color: #991b1b;")
        elif plan_path is not None and info is not None and self.state.draft_path == plan_path:
            self.draft_note.setText(
                f"{info.name or plan_path.name}: {info.n_layer} layers, drafting instead of MTP."
            )
            self.draft_note.setStyleSheet("color: #374151;")
        else:
            self.draft_note.setText("")

    def _on_inputs_changed(self, _: object) -> None:
        if self.is_current():
            self.refresh()
