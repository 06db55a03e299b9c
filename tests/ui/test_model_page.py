"""Model page: demo cards, opening and dropping GGUF files, and unusable files said plainly."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from pytestqt.qtbot import QtBot

from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_path
from mtpstudio.core.plan.schema import Plan

from .conftest import WizardFactory, go_to


def test_demo_card_header_is_shown(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 1)
    page = wizard.model_page
    assert page.isComplete()
    facts = {key: label.text() for key, label in page.info_labels.items()}
    assert facts["source"] == f"Qwen3.6 35B A3B — demo card {DEFAULT_MODEL_CARD}"
    assert facts["architecture"] == "qwen35moe · IQ4_XS"
    assert facts["layers"] == "40 trunk + 1 MTP (nextn)"
    assert facts["attention"].startswith(
        "10 attention layers (full attention every 4), 30 recurrent"
    )
    assert facts["experts"].startswith("256 routed, 8 used per token")
    assert facts["quant_mix"].startswith("IQ4_XS ")
    assert "bits per weight" in facts["size"]
    assert facts["context"] == "262,144 tokens"
    assert page.card_combo.currentData() == DEFAULT_MODEL_CARD
    assert page.error.isHidden()


def test_choosing_another_card_changes_the_plan(make_wizard: WizardFactory, qtbot: QtBot) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 1)
    page = wizard.model_page
    page.card_combo.setCurrentIndex(page.card_combo.findData("qwen3.6-27b-iq4_xs"))
    assert wizard.tasks.wait_idle(30)
    assert wizard.plan.model.card == "qwen3.6-27b-iq4_xs"
    assert page.info_labels["experts"].text() == "none (dense model)"
    assert page.info_labels["layers"].text() == "64 trunk + 1 MTP (nextn)"


def test_the_demo_picker_offers_every_quant_by_model_with_its_size(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 1)
    combo = wizard.model_page.card_combo
    texts = [combo.itemText(i) for i in range(combo.count())]
    ids = [combo.itemData(i) for i in range(combo.count())]
    assert ids[0] is None and texts[0] == "Choose a demo card…"
    separators = [i for i in range(1, combo.count()) if ids[i] is None]
    assert len(separators) == 2  # one before each model's quants
    q4 = texts[ids.index("qwen3.6-27b-q4_k_m")]
    assert q4 == "Qwen3.6-27B Q4_K_M (demo card) · 16.8 GB", q4
    assert texts[ids.index("qwen3.6-35b-a3b-iq4_ks")].startswith(
        "Qwen3.6-35B-A3B IQ4_KS (ik_llama.cpp demo card) · "
    )
    combo.setCurrentIndex(ids.index("qwen3.6-27b-q4_k_m"))
    assert wizard.tasks.wait_idle(30)
    assert wizard.plan.model.card == "qwen3.6-27b-q4_k_m"
    assert wizard.model_page.info_labels["quant_mix"].text().startswith("Q4_K ")


def test_an_unusable_file_is_explained_and_the_plan_keeps_its_model(
    make_wizard: WizardFactory, tmp_path: Path
) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 1)
    page = wizard.model_page
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"nope, not a model")
    page.ask_gguf_path = lambda: broken  # type: ignore[method-assign]
    page.open_button.click()
    assert wizard.tasks.wait_idle(30)
    assert not page.error.isHidden()
    text = page.error.text()
    assert text.startswith("broken.gguf is not a usable GGUF file: ")
    assert "Traceback" not in text
    assert text.endswith(f"The plan keeps demo card {DEFAULT_MODEL_CARD}.")
    assert wizard.plan.model.card == DEFAULT_MODEL_CARD and wizard.plan.model.path is None
    assert page.isComplete()  # the previous model is still there to plan with


def test_a_plan_whose_model_cannot_be_read_blocks_next(
    make_wizard: WizardFactory, tmp_path: Path
) -> None:
    missing = tmp_path / "gone.gguf"
    wizard = make_wizard(Plan.model_validate({"model": {"path": str(missing), "card": None}}))
    go_to(wizard, 1)
    page = wizard.model_page
    assert not page.isComplete()
    assert page.error.text().startswith(f"{missing} cannot be read: ")
    page.choose_card(DEFAULT_MODEL_CARD)
    assert wizard.tasks.wait_idle(30)
    assert page.isComplete()
    assert wizard.plan.model.path is None


def test_opening_and_dropping_a_gguf_file(make_wizard: WizardFactory, tmp_path: Path) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 1)
    page = wizard.model_page
    source = model_card_path("qwen3.6-27b-iq4_xs")  # a real GGUF header written by the catalogue
    mine = tmp_path / "Qwen3.6-27B-IQ4_XS.gguf"
    mine.write_bytes(source.read_bytes())
    page.ask_gguf_path = lambda: mine  # type: ignore[method-assign]
    page.open_button.click()
    assert wizard.tasks.wait_idle(30)
    assert wizard.plan.model.path == mine and wizard.plan.model.card is None
    assert page.info_labels["source"].text().endswith(str(mine))
    assert page.card_combo.currentIndex() == 0  # "Choose a demo card…"

    dropped = tmp_path / "dropped.gguf"
    dropped.write_bytes(model_card_path(DEFAULT_MODEL_CARD).read_bytes())
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(dropped))])
    event = QDropEvent(
        QPointF(20, 20),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    page.dropEvent(event)
    assert wizard.tasks.wait_idle(30)
    assert wizard.plan.model.path == dropped
    assert page.info_labels["architecture"].text().startswith("qwen35moe")


def test_an_unfinished_download_is_said_to_be_incomplete(
    make_wizard: WizardFactory, tmp_path: Path
) -> None:
    """Issue 25 item 5: an unfinished download planned as 'fits' without a word."""
    from devkit.zero_gguf import zero_gguf_for_card
    from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD as CARD
    from mtpstudio.ui.widgets.common import Tone

    partial = zero_gguf_for_card(CARD, tmp_path / "Downloads" / "Qwen3.6-35B-A3B-IQ4_XS.gguf")
    os.truncate(partial, 9 * 1024**3)
    wizard = make_wizard(Plan())
    go_to(wizard, 1)
    page = wizard.model_page
    page.open_path(partial)
    assert wizard.tasks.wait_idle(30)
    assert wizard.plan.model.path == partial  # planning works ...
    assert page.error.tone is Tone.WARN  # ... and the page says what the file is
    assert page.error.text().startswith("This file is incomplete: 9.00 of 17.86 GiB")
    assert "Launch, Export and Install need the whole file" in page.error.text()
    assert "incomplete: 9.00 of 17.86 GiB" in page.info_labels["size"].text()
