"""Engine & options page: the builds found with capability badges, and the Plan's options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import SETTINGS, label_of, setting, value_choices
from mtpstudio.core.usecases.workbench import (
    BuildChoice,
    EngineBuild,
    LaunchSpec,
    build_capabilities,
    engine_name,
    mtp_reason,
)
from mtpstudio.ui.help_text import field_description, setting_tooltip
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.widgets.common import Badge, Notice, Tone
from mtpstudio.ui.widgets.engine_picker import EnginePicker
from mtpstudio.ui.widgets.number_box import NumberBox

_MTP_DATA = {None: "auto", True: "on", False: "off"}


def setting_name(key: str) -> str:
    """``runtime.moe=fit`` -> ``Experts (fit)``, for the 'not available' line."""
    path, _, choice = key.partition("=")
    name = (SETTINGS[path].label if path in SETTINGS else "") or path
    return f"{name} ({choice})" if choice else name


def plan_value(plan: Plan, path: str) -> Any:
    """The Plan's value at a dotted path, enums as their values."""
    node: Any = plan
    for name in path.split("."):
        node = getattr(node, name)
    if isinstance(node, Enum):
        return node.value
    if isinstance(node, Path):
        return str(node)
    return node


@dataclass
class Control:
    """A widget bound to a Plan path: how to read it and how to show a value."""

    path: str
    widget: QWidget
    read: Callable[[], Any]
    write: Callable[[Any], None]


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
        self.controls: dict[str, Control] = {}
        self.draft_picked: Path | None = None  # the last draft file the user chose
        self.draft_error: str | None = None
        self.choices: list[BuildChoice] = []
        self.picker = EnginePicker(state, self)
        self._badged_for: tuple[str, bool] | None = None  # the model the MTP badges speak of
        self.reasons: dict[str, str] = {}

        self.build_list = QListWidget(self)
        self.build_list.setSpacing(2)
        self.build_list.setSelectionMode(QListWidget.SelectionMode.SingleSelection)
        self.build_list.setStyleSheet(
            "QListWidget::item:selected { background: #dbeafe; border: 1px solid #3b82f6; "
            "border-radius: 4px; }"
        )
        self.notice = Notice(self)
        self.unavailable_label = QLabel(self)
        self.unavailable_label.setWordWrap(True)
        self.unavailable_label.setStyleSheet("color: #6b7280;")

        context = QGroupBox("Context && cache", self)
        cf = QFormLayout(context)
        self.ctx = self._spin("runtime.ctx", " tokens", kind="tokens")
        cf.addRow(label_of("runtime.ctx"), self.ctx)
        self.cache_k = self._combo("runtime.cache_type_k")
        self.cache_v = self._combo("runtime.cache_type_v")
        cf.addRow(label_of("runtime.cache_type_k"), self.cache_k)
        cf.addRow(label_of("runtime.cache_type_v"), self.cache_v)
        self.flash_attn = self._combo("runtime.flash_attn")
        cf.addRow(label_of("runtime.flash_attn"), self.flash_attn)
        self.batch = self._spin("runtime.batch")
        self.ubatch = self._spin("runtime.ubatch")
        for box in (self.batch, self.ubatch):
            box.size_for(65536)  # side by side: as wide as a five-digit batch, not 4 Mi
        cf.addRow("Batch / ubatch", self._pair(self.batch, self.ubatch))

        server = QGroupBox("Server", self)
        sf = QFormLayout(server)
        self.host = self._line("server.host")
        self.port = self._spin("server.port")
        self.port.setGroupSeparatorShown(False)
        self.api_key_file = self._line("server.api_key_file", optional=True)
        self.api_key_file.setPlaceholderText("none")
        sf.addRow(label_of("server.host"), self.host)
        sf.addRow(label_of("server.port"), self.port)
        sf.addRow(label_of("server.api_key_file"), self.api_key_file)

        mtp = QGroupBox("Drafting: MTP or a draft model", self)
        mf = QFormLayout(mtp)
        self.mtp_enabled = self._tristate("mtp.enabled")
        mf.addRow(label_of("mtp.enabled"), self.mtp_enabled)
        self.mtp_state = QLabel(self)
        self.mtp_state.setWordWrap(True)
        self.mtp_state.setStyleSheet("color: #374151;")
        mf.addRow(self.mtp_state)
        self.draft_max = self._spin("mtp.draft_max")
        mf.addRow(label_of("mtp.draft_max"), self.draft_max)
        self.draft_min = self._spin("mtp.draft_min")
        mf.addRow(label_of("mtp.draft_min"), self.draft_min)
        self.draft_p_min = self._double("mtp.draft_p_min")
        mf.addRow(label_of("mtp.draft_p_min"), self.draft_p_min)
        self.acceptance = self._double("mtp.acceptance")
        self.acceptance.setToolTip(field_description("mtp.acceptance"))
        mf.addRow(label_of("mtp.acceptance"), self.acceptance)
        self.draft_cache_k = self._combo("mtp.cache_type_k")
        self.draft_cache_v = self._combo("mtp.cache_type_v")
        mf.addRow("Draft K / V cache", self._pair(self.draft_cache_k, self.draft_cache_v))
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
        mf.addRow(label_of("draft.path"), self.draft_file)
        mf.addRow("", draft_buttons)
        self.draft_gpu_layers = self._spin("draft.gpu_layers")
        mf.addRow(label_of("draft.gpu_layers"), self.draft_gpu_layers)
        self.draft_note = QLabel(self)
        self.draft_note.setWordWrap(True)
        mf.addRow(self.draft_note)

        placement = QGroupBox("Placement && threads", self)
        pf = QFormLayout(placement)
        self.moe = self._combo("runtime.moe")
        pf.addRow(label_of("runtime.moe"), self.moe)
        self.n_cpu_moe = self._spin("runtime.n_cpu_moe", " layers")
        pf.addRow(label_of("runtime.n_cpu_moe"), self.n_cpu_moe)
        self.margin = self._spin("runtime.fit_margin_mib", " MiB", kind="mib")
        self.margin.size_for(16384)  # as wide as 16 GiB, not the 1 TiB the Plan allows
        pf.addRow(label_of("runtime.fit_margin_mib"), self.margin)
        self.moe_cache = self._spin("runtime.moe_cache_mib", " MiB", kind="mib")
        self.moe_cache.size_for(16384)
        self.moe_cache.setToolTip(
            "A GPU cache for the experts kept in RAM (--moe-cache-mib; upstream llama.cpp "
            "b11549 and newer, on a GPU): 0 is off. The budget shows what it takes, the "
            "estimate what it does for speed."
        )
        pf.addRow(label_of("runtime.moe_cache_mib"), self.moe_cache)
        self.gpu_layers = self._spin("runtime.n_gpu_layers")
        pf.addRow(label_of("runtime.n_gpu_layers"), self.gpu_layers)
        self.load_mode = self._combo("runtime.load_mode")
        pf.addRow(label_of("runtime.load_mode"), self.load_mode)
        self.threads = self._spin("runtime.threads")
        pf.addRow(label_of("runtime.threads"), self.threads)
        self.parallel = self._spin("runtime.parallel")
        pf.addRow(label_of("runtime.parallel"), self.parallel)

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

    # -- control factories ------------------------------------------------------------------------

    def _register(self, control: Control, signal: Any) -> None:
        self.controls[control.path] = control
        signal.connect(lambda *_: self._on_control_changed(control.path))

    def _spin(self, path: str, suffix: str = "", kind: str = "count") -> NumberBox:
        """A spin box over the setting's declared range and step; where None is a choice (the
        engine's own), one step below the range, shown as the setting's ``none_label``."""
        special = setting(path).none_label
        low, high, step = setting(path).whole_range()
        none = low - 1 if special is not None else None
        spin = NumberBox(kind, self)
        spin.setRange(low if none is None else none, high)
        spin.setSingleStep(step)
        spin.setSuffix(suffix)
        spin.setKeyboardTracking(False)
        spin.setGroupSeparatorShown(True)
        if special is not None:
            spin.setSpecialValueText(special)

        def read() -> Any:
            value = spin.value()
            return None if none is not None and value == none else value

        def write(value: Any) -> None:
            spin.setValue(none if value is None and none is not None else int(value))

        self._register(Control(path, spin, read, write), spin.valueChanged)
        return spin

    def _double(self, path: str) -> QDoubleSpinBox:
        """A spin box over the setting's declared range; where None is a choice, one step below
        the range, shown as the setting's ``none_label``."""
        declared = setting(path)
        special = declared.none_label
        spin = QDoubleSpinBox(self)
        low, step = float(declared.low or 0.0), float(declared.step)
        none = low - step if special is not None else None
        spin.setRange(low if none is None else none, float(declared.high or 0.0))
        spin.setSingleStep(step)
        spin.setDecimals(2)
        spin.setKeyboardTracking(False)
        if special is not None:
            spin.setSpecialValueText(special)

        def read() -> Any:
            value = spin.value()
            return None if none is not None and value <= none + step / 2 else value

        def write(value: Any) -> None:
            spin.setValue(none if value is None and none is not None else float(value))

        self._register(Control(path, spin, read, write), spin.valueChanged)
        return spin

    def _combo(self, path: str) -> QComboBox:
        """A combo over the setting's values, in its declared words."""
        combo = QComboBox(self)
        for value, label in value_choices(path):
            combo.addItem(label, value.value)

        def write(value: Any) -> None:
            combo.setCurrentIndex(max(0, combo.findData(value)))

        self._register(Control(path, combo, combo.currentData, write), combo.currentIndexChanged)
        return combo

    def _tristate(self, path: str) -> QComboBox:
        """A combo for auto (None) / on (True) / off (False), in the setting's words."""
        combo = QComboBox(self)
        for value, label in setting(path).labels:
            combo.addItem(label, _MTP_DATA[value])
        by_data = {data: value for value, data in _MTP_DATA.items()}

        def read() -> Any:
            return by_data.get(combo.currentData())

        def write(value: Any) -> None:
            combo.setCurrentIndex(max(0, combo.findData(_MTP_DATA.get(value, "auto"))))

        self._register(Control(path, combo, read, write), combo.currentIndexChanged)
        return combo

    def _check(self, path: str, text: str) -> QCheckBox:
        box = QCheckBox(text, self)
        self._register(
            Control(path, box, box.isChecked, lambda v: box.setChecked(bool(v))), box.toggled
        )
        return box

    def _line(self, path: str, optional: bool = False) -> QLineEdit:
        edit = QLineEdit(self)

        def read() -> Any:
            text = edit.text().strip()
            return None if optional and not text else text

        self._register(
            Control(path, edit, read, lambda v: edit.setText("" if v is None else str(v))),
            edit.editingFinished,
        )
        return edit

    def _pair(self, first: QWidget, second: QWidget) -> QWidget:
        box = QWidget(self)
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(first)
        row.addWidget(second)
        return box

    # -- builds ------------------------------------------------------------------------------------

    def build_choices(self) -> list[BuildChoice]:
        """Every probed build, then each flavour without one as its documented flags."""
        return self.state.workbench.build_choices()

    def current_build(self) -> EngineBuild:
        """The probed build the plan uses, else the documented flags of its flavour."""
        return self.state.build().build

    def _build_item_widget(self, choice: BuildChoice) -> QWidget:
        build = choice.build
        box = QWidget(self.build_list)
        layout = QVBoxLayout(box)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        backends = ", ".join(b.value for b in build.backends)
        if choice.probed:
            title = f"<b>{engine_name(choice.flavour)}</b> · version {build.version} · {backends}"
            where = str(build.binary)
        else:
            title = f"<b>{engine_name(choice.flavour)}</b> · not found on this computer"
            where = (
                "Planned with the documented flags of this engine; install a build and press "
                "Refresh on the Hardware page to use its own answers."
            )
        head = QLabel(title, box)
        path = QLabel(where, box)
        path.setStyleSheet("color: #6b7280;")
        badges = QHBoxLayout()
        badges.setSpacing(4)
        info = self.state.model_info
        for cap in build_capabilities(build):
            if cap.name == "MTP" and cap.available and info is not None:
                why_not = mtp_reason(build, info)  # the build may draft, but not this model
                if why_not is not None:
                    cap = replace(cap, available=False, detail=f"For this model: {why_not}.")
            tone = Tone.GOOD if cap.available else Tone.OFF
            if cap.available and cap.uncertain:
                tone = Tone.WARN
            mark = "✓" if cap.available else "✗"
            badges.addWidget(Badge(f"{mark} {cap.name}", tone, cap.detail, box))
        if choice.probed:
            accepted = sorted(build.accepted_flags)
            rejected = sorted(build.rejected_flags)
            tip = f"Accepted: {' '.join(accepted) or 'none'}"
            if rejected:
                tip += f"\nRejected: {' '.join(rejected)}"
            badges.addWidget(Badge(f"{len(accepted)} flags probed", Tone.INFO, tip, box))
        else:
            badges.addWidget(
                Badge("documented flags", Tone.WARN, "Not probed: no binary was found.", box)
            )
        badges.addStretch()
        layout.addWidget(head)
        layout.addWidget(path)
        layout.addLayout(badges)
        return box

    def _fill_builds(self) -> None:
        choices = self.build_choices()
        info = self.state.model_info
        model = (info.architecture, info.has_mtp) if info is not None else None
        if choices != self.choices or model != self._badged_for:  # detection or model changed
            self.choices = choices
            self._badged_for = model
            self.build_list.clear()
            for choice in choices:
                item = QListWidgetItem(self.build_list)
                widget = self._build_item_widget(choice)
                item.setSizeHint(widget.sizeHint())
                self.build_list.setItemWidget(item, widget)
            rows = sum(self.build_list.sizeHintForRow(i) + 6 for i in range(len(choices)))
            self.build_list.setFixedHeight(min(max(rows, 60), 220))
        plan = self.state.plan
        using = self.state.build()
        selected = 0
        for row, choice in enumerate(self.choices):
            if (choice.probed and using.probed and choice.build.binary == using.build.binary) or (
                not choice.probed and not using.probed and choice.flavour is plan.engine.flavour
            ):
                selected = row
        if self.build_list.currentRow() != selected:
            self.build_list.setCurrentRow(selected)

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
        build = self.current_build()
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
        self._disable_choices("mtp.enabled", self.mtp_enabled, _MTP_DATA[plan.mtp.enabled])
        result = evaluation.result if evaluation is not None else None
        self.mtp_state.setText(result.mtp_line if result is not None else "")
        lines = []
        for key, reason in self.reasons.items():
            if reason == "MTP is off" or reason.startswith("MTP cannot be used"):
                continue  # said once, for MTP itself
            if key == "mtp.enabled=on" or key == "draft.gpu_layers":
                continue
            lines.append(f"{setting_name(key)}: {reason}")
        self.unavailable_label.setText(
            "Not available with this build and model — " + "; ".join(lines) if lines else ""
        )
        self.unavailable_label.setVisible(bool(lines))
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
            value = combo.itemData(row)
            reason = self.reasons.get(f"{path}={value}")
            item = model.item(row)
            enabled = reason is None or value == current
            item.setEnabled(enabled)
            item.setToolTip(f"Not available: {reason}." if reason else "")

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
