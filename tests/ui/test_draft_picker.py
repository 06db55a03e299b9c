"""The draft-model picker on the Engine page: the header read in the background, the Plan's
draft settings, the draft segments on the budget's bars, and bad files in one sentence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytestqt.qtbot import QtBot

from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_FLAGS as UPSTREAM_FLAGS
from mtpstudio.core.memory.draft import DRAFT_SEGMENTS
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.pages.engine import EnginePage
from mtpstudio.ui.widgets.vram_bar import DRAFT_SEGMENT_KEYS, SEGMENT_STYLES
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import WizardFactory, go_to, gpu_report, upstream_engine

TinyModel = Callable[..., Path]
# the canned build with the draft-model flags a current upstream build has
DRAFT_FLAGS = frozenset({"-md", "--spec-draft-model", "-ngld", "--spec-draft-ngl"})


def engine_page(
    make_wizard: WizardFactory, tiny_model: TinyModel, **changes: object
) -> tuple[MtpWizard, EnginePage]:
    plan = plan_with(
        Plan(),
        {"model.path": str(tiny_model("hybrid-mtp")), "model.card": None, **changes},
    )
    report = gpu_report([upstream_engine(UPSTREAM_FLAGS | DRAFT_FLAGS)])
    wizard = make_wizard(plan, report=report, remember=False)
    go_to(wizard, PageId.ENGINE)
    assert wizard.state.model_info is not None
    return wizard, wizard.engine_page


def pick(wizard: MtpWizard, page: EnginePage, path: Path) -> None:
    page.ask_draft_path = lambda: path  # type: ignore[method-assign]
    page.draft_choose.click()
    assert wizard.tasks.wait_idle(30)


def draft_bytes(wizard: MtpWizard) -> dict[str, int]:
    page = wizard.budget_page
    totals = dict.fromkeys(DRAFT_SEGMENT_KEYS, 0)
    for row in page.bar.rows:
        for seg in row.segments:
            if seg.key in totals:
                totals[seg.key] += seg.n_bytes
    return totals


def test_the_bar_knows_every_draft_segment_of_the_budget() -> None:
    assert DRAFT_SEGMENT_KEYS == DRAFT_SEGMENTS
    assert all(key in SEGMENT_STYLES for key in DRAFT_SEGMENT_KEYS)


def test_picking_a_draft_model_puts_it_in_the_plan_and_on_the_budget(
    qtbot: QtBot, make_wizard: WizardFactory, tiny_model: TinyModel
) -> None:
    wizard, page = engine_page(make_wizard, tiny_model)
    assert wizard.state.plan.mtp.enabled is None  # auto
    assert not page.draft_clear.isEnabled() and not page.draft_gpu_layers.isEnabled()
    draft = tiny_model("draft")
    pick(wizard, page, draft)
    plan = wizard.state.plan
    assert plan.draft.path == draft
    assert page.draft_file.text() == str(draft)
    assert "layers, drafting instead of MTP" in page.draft_note.text()
    assert page.draft_clear.isEnabled() and page.draft_gpu_layers.isEnabled()
    # MTP on auto resolves off when a draft model drafts; the draft knobs stay usable
    ev = wizard.state.evaluation()
    assert ev is not None and ev.error is None, ev.error
    assert "off" in page.mtp_state.text().lower()
    assert page.draft_max.isEnabled() and page.draft_p_min.isEnabled()
    page.draft_gpu_layers.setValue(3)
    assert wizard.state.plan.draft.gpu_layers == 3

    # the budget counts the draft model: its own segments, colours and legend entries
    go_to(wizard, PageId.BUDGET)
    sizes = draft_bytes(wizard)
    assert sizes["draft_weights"] > 0 and sizes["draft_kv_cache"] > 0
    evaluation = wizard.state.evaluation()
    assert evaluation is not None and evaluation.budget is not None
    parts = evaluation.budget.parts
    assert sum(sizes.values()) == sum(parts[k] for k in DRAFT_SEGMENTS)
    legend = " ".join(wizard.budget_page.bar.legend_entries())
    assert "draft model" in legend and "draft KV cache" in legend

    # Clear: no draft model, and the budget has no draft segments again
    wizard.back()
    page.draft_clear.click()
    assert wizard.state.plan.draft.path is None and wizard.state.plan.draft.gpu_layers is None
    assert page.draft_file.text() == ""
    go_to(wizard, PageId.BUDGET)
    assert sum(draft_bytes(wizard).values()) == 0


def test_a_broken_draft_file_is_one_sentence_and_the_plan_stays(
    make_wizard: WizardFactory, tiny_model: TinyModel, tmp_path: Path
) -> None:
    wizard, page = engine_page(make_wizard, tiny_model)
    before = wizard.state.plan
    broken = tmp_path / "not a model.gguf"
    broken.write_bytes(b"GGUF\x03\x00\x00\x00 truncated")
    pick(wizard, page, broken)
    assert wizard.state.plan == before
    sentence = page.draft_note.text()
    assert sentence and "\n" not in sentence and "Traceback" not in sentence
    assert sentence.startswith("The draft model cannot be used: ")
    assert "not a model.gguf" in sentence
    assert page.draft_file.text() == str(broken)  # what the user chose stays in view
    assert not page.draft_clear.isEnabled()


def test_mtp_explicitly_on_refuses_a_draft_model_in_one_sentence(
    make_wizard: WizardFactory, tiny_model: TinyModel
) -> None:
    wizard, page = engine_page(make_wizard, tiny_model, **{"mtp.enabled": True})
    before = wizard.state.plan
    draft = tiny_model("draft")
    pick(wizard, page, draft)
    assert wizard.state.plan == before  # MTP stays on, no draft model
    sentence = page.draft_note.text()
    assert sentence.startswith("MTP is set to on") and "auto or off" in sentence
    assert "\n" not in sentence
    assert page.draft_file.text() == str(draft)  # the choice is kept in view
    # turning MTP off and choosing again takes it
    page.mtp_enabled.setCurrentIndex(page.mtp_enabled.findData("off"))
    assert wizard.state.plan.mtp.enabled is False
    pick(wizard, page, draft)
    assert wizard.state.plan.draft.path == draft
    assert "drafting instead of MTP" in page.draft_note.text()
