"""Model page: open a GGUF (dialog or drag-and-drop) or pick a demo card; what the header says."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from PySide6.QtCore import Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import describe_validation_error
from mtpstudio.core.plan.schema import ModelChoice
from mtpstudio.core.usecases.model_cards import card_weight_bytes, model_cards_by_model
from mtpstudio.core.usecases.model_files import ctx_for_model, file_state_text
from mtpstudio.core.usecases.plan_text import model_summary_lines
from mtpstudio.ui.formatting import gb_gib
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.widgets.common import BusyIndicator, Notice, Tone

INFO_ROWS = (
    ("source", "Model"),
    ("architecture", "Architecture"),
    ("layers", "Layers"),
    ("attention", "Attention"),
    ("experts", "Experts"),
    ("quant_mix", "Quant mix"),
    ("size", "Size"),
    ("context", "Native context"),
)


def model_facts(info: ModelInfo, choice: ModelChoice | None) -> dict[str, str]:
    """The page's rows for one model header (plain text, keyed like INFO_ROWS)."""
    facts: dict[str, str] = {}
    if choice is not None and choice.path is not None:
        facts["source"] = f"{info.name or Path(choice.path).name} — {choice.path}"
    else:
        card = choice.card if choice is not None else None
        facts["source"] = f"{info.name or info.architecture} — demo card {card}"
    arch = info.architecture
    if info.file_type:
        arch += f" · {info.file_type}"
    facts["architecture"] = arch
    layers = f"{info.n_layer} trunk"
    layers += f" + {info.n_nextn_layer} MTP (nextn)" if info.n_nextn_layer else ", no MTP layer"
    facts["layers"] = layers
    attention = (
        f"{info.n_head} query / {info.n_head_kv} KV heads, head size {info.key_length}, "
        f"embedding {info.n_embd}"
    )
    if info.recurrent_layers:
        every = (
            f" (full attention every {info.full_attention_interval})"
            if info.full_attention_interval
            else ""
        )
        attention = (
            f"{len(info.attention_layers)} attention layers{every}, "
            f"{len(info.recurrent_layers)} recurrent; " + attention
        )
    facts["attention"] = attention
    if info.is_moe:
        experts = f"{info.n_expert} routed, {info.n_expert_used} used per token"
        if info.expert_ffn_length:
            experts += f", expert FFN {info.expert_ffn_length}"
        if info.shared_expert_ffn_length:
            experts += " + a shared expert"
        facts["experts"] = experts
    else:
        facts["experts"] = "none (dense model)"
    if info.quant_mix and info.tensor_bytes:
        mix = sorted(info.quant_mix.items(), key=lambda kv: -kv[1])
        facts["quant_mix"] = ", ".join(
            f"{name} {100 * n / info.tensor_bytes:.1f}%" for name, n in mix[:6]
        )
    else:
        facts["quant_mix"] = "unknown"
    size = f"{gb_gib(info.tensor_bytes)} of weights, {info.bits_per_weight:.2f} bits per weight"
    if choice is not None and choice.path is not None and info.file_size:
        size += f"; file {gb_gib(info.file_size)}"
        note = file_state_text(info)
        if note:
            size += f", {note}"
    facts["size"] = size
    facts["context"] = f"{info.context_length:,} tokens"
    return facts


class ModelPage(PlanPage):
    """Choose the model and show what its GGUF header says."""

    slug = "model"

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("Model")
        self.setSubTitle(
            "Open a GGUF file (drop it here), choose one on Hugging Face, or pick a demo card. "
            "Only the header is read."
        )
        self.setAcceptDrops(True)
        self._pending: Path | None = None
        self.open_button = QPushButton("Open GGUF…", self)
        self.hub_button = QPushButton("From Hugging Face…", self)
        self.hub_button.setToolTip(
            "Every GGUF of a repository planned for your card from its header, then download one"
        )
        self.card_combo = QComboBox(self)
        self.card_combo.addItem("Choose a demo card…", None)
        for cards in model_cards_by_model().values():
            self.card_combo.insertSeparator(self.card_combo.count())
            for card in cards:
                size = card_weight_bytes(card.card_id) / 1e9
                self.card_combo.addItem(f"{card.title} · {size:.1f} GB", card.card_id)
        self.drop_hint = QLabel("…or drop a .gguf file anywhere on this page.", self)
        self.drop_hint.setStyleSheet("color: #6b7280;")
        self.busy = BusyIndicator("Reading the GGUF header…", self)
        self.error = Notice(self)

        self.info_box = QGroupBox("What the header says", self)
        form = QFormLayout(self.info_box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.info_labels: dict[str, QLabel] = {}
        for key, title in INFO_ROWS:
            label = QLabel("—", self.info_box)
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.info_labels[key] = label
            form.addRow(title, label)

        row = QHBoxLayout()
        row.addWidget(self.open_button)
        row.addWidget(self.hub_button)
        row.addSpacing(12)
        row.addWidget(QLabel("or a demo card:", self))
        row.addWidget(self.card_combo, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.drop_hint)
        layout.addWidget(self.busy)
        layout.addWidget(self.error)
        layout.addWidget(self.info_box, 1)

        self.open_button.clicked.connect(self._on_open_clicked)
        self.hub_button.clicked.connect(self.open_hub_dialog)
        self.card_combo.currentIndexChanged.connect(self._on_card_chosen)
        state.model_changed.connect(self._on_model_changed)
        state.model_failed.connect(self._on_model_failed)
        state.activity_changed.connect(self._on_activity_changed)

    # -- QWizardPage ------------------------------------------------------------------------------

    def isComplete(self) -> bool:
        return self.state.model_info is not None and not self.state.loading_model

    # -- filling ----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        plan = self.state.plan
        index = self.card_combo.findData(plan.model.card) if plan.model.path is None else 0
        self.card_combo.setCurrentIndex(max(0, index))
        self.busy.set_busy(self.state.loading_model)
        info = self.state.model_info
        if info is None:
            for label in self.info_labels.values():
                label.setText("—")
            self.info_box.setToolTip("")
        else:
            for key, text in model_facts(info, self.state.model_choice).items():
                self.info_labels[key].setText(text)
            self.info_box.setToolTip("\n".join(line.strip() for line in model_summary_lines(info)))
        if self.state.model_error and info is None:
            self.error.show_text(
                f"{plan.model.label} cannot be read: {self.state.model_error}", Tone.BAD
            )
        note = file_state_text(info) if info is not None and plan.model.path else None
        if note:
            self.error.show_text(
                f"This file is {note}. Planning works; Launch, Export and Install need the "
                "whole file.",
                Tone.WARN,
            )

    # -- actions ----------------------------------------------------------------------------------

    def ask_gguf_path(self) -> Path | None:
        """The file dialog (tests replace this method)."""
        name, _ = QFileDialog.getOpenFileName(
            self, "Open a GGUF model", str(Path.home()), "GGUF models (*.gguf);;All files (*)"
        )
        return Path(name) if name else None

    def open_path(self, path: Path) -> None:
        """Read ``path``'s header in the background; the plan takes it only if it reads."""
        try:
            choice = ModelChoice.model_validate({"path": str(path), "card": None})
        except ValidationError as exc:
            self.error.show_text(
                f"{path.name} cannot be used: {describe_validation_error(exc)}", Tone.BAD
            )
            return
        self.error.show_text(None)
        self._pending = path
        self.state.load_model(choice)

    def open_hub_dialog(self) -> QDialog:
        """The Hugging Face dialog (its own module), window-modal over the wizard."""
        from mtpstudio.ui.pages.hub_dialog import HubModelsDialog

        dialog = HubModelsDialog(self.state, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def choose_card(self, card_id: str) -> None:
        self.error.show_text(None)
        self._pending = None
        self.state.load_model(ModelChoice(path=None, card=card_id))

    def _on_open_clicked(self) -> None:
        path = self.ask_gguf_path()
        if path is not None:
            self.open_path(path)

    def _on_card_chosen(self, index: int) -> None:
        card = self.card_combo.itemData(index)
        if self._refreshing or not isinstance(card, str):
            return
        self.choose_card(card)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.open_path(paths[0])

    # -- state events -----------------------------------------------------------------------------

    def _on_model_changed(self, info: object) -> None:
        if info is not None:
            self.error.show_text(None)
        if isinstance(info, ModelInfo) and self._pending is not None:  # the user opened it
            self._pending = None
            ctx = ctx_for_model(self.state.plan.runtime.ctx, info)
            if ctx != self.state.plan.runtime.ctx:
                self.apply({"runtime.ctx": ctx})
        self.refresh()
        self.completeChanged.emit()

    def _on_model_failed(self, sentence: str) -> None:
        pending = self._pending
        if pending is not None:
            text = f"{pending.name} is not a usable GGUF file: {sentence}"
        else:
            text = f"{self.state.plan.model.label} cannot be read: {sentence}"
        if self.state.model_info is not None and pending is not None:
            text += f" The plan keeps {self.state.plan.model.label}."
        self.error.show_text(text, Tone.BAD)
        self.refresh()
        self.completeChanged.emit()

    def _on_activity_changed(self) -> None:
        self.busy.set_busy(self.state.loading_model)
        self.completeChanged.emit()
