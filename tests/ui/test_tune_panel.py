"""The Tune tab of the Launch page against the real upstream build and a tiny MTP model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from support.plans import cpu_plan

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.target import BenchCancelled
from mtpstudio.core.bench.tune import BASELINE_LABEL, RowStatus
from mtpstudio.core.bench.tune_text import TUNE_KIND
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.state import Liveness, load_states
from mtpstudio.ui.pages.tune_panel import TABLE_COLUMNS, LinkedCancel, TunePanel
from mtpstudio.ui.tasks import CancelToken
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import WizardFactory, go_to

pytestmark = pytest.mark.usefixtures("no_server_left")

CATEGORIES = ("code_python", "translation")
TUNE_WAIT_MS = 240_000


@pytest.fixture
def mtp_plan(engine: Callable[[str], Path], tiny_model: Callable[..., Path]) -> Plan:
    # A starting plan that drafts 16 tokens a step that a tiny random model never accepts:
    # the first candidates (draft depth 1 and 2) waste far less, so the best is a candidate.
    return cpu_plan(engine("upstream"), tiny_model("hybrid-mtp", dtype="q8_0"),
                     **{"mtp.enabled": True, "mtp.draft_max": 16,
                        "mtp.draft_p_min": 0.0})  # fmt: skip


def tune_tab(make_wizard: WizardFactory, plan: Plan, history: Path) -> tuple[MtpWizard, TunePanel]:
    wizard = make_wizard(plan, remember=False)
    go_to(wizard, PageId.LAUNCH)
    page = wizard.launch_page
    titles = [page.tabs.tabText(i) for i in range(page.tabs.count())]
    assert "Tune" in titles
    page.tabs.setCurrentIndex(titles.index("Tune"))
    panel = page.tune
    panel.history = BenchHistory(history)  # this test's own (the session shares the default)
    panel.n_predict.setValue(8)
    panel.skip_slower.setChecked(False)  # these tests are about the search, not the estimate
    return wizard, panel


def cells(panel: TunePanel) -> list[list[str]]:
    t = panel.table
    return [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]


@pytest.mark.engine
def test_a_tiny_tuning_run_fills_the_table_and_use_the_best_changes_the_plan(
    qtbot: QtBot, make_wizard: WizardFactory, mtp_plan: Plan, tmp_path: Path
) -> None:
    wizard, panel = tune_tab(make_wizard, mtp_plan, tmp_path / "history.sqlite")
    panel.max_candidates.setValue(2)
    live: list[int] = []
    panel._relay.progressed.connect(lambda _: live.append(panel.table.rowCount()))
    assert panel.start_button.isEnabled() and not panel.use_best_button.isEnabled()
    assert panel.start_tuning(CATEGORIES)
    assert panel.cancel_button.isEnabled() and not panel.start_button.isEnabled()
    with qtbot.waitSignal(panel.finished, timeout=TUNE_WAIT_MS):
        pass
    # rows appeared one by one while the search ran: baseline, then the two candidates
    assert live == [1, 2, 3]
    assert panel.outcome is not None
    result = panel.outcome.result
    assert panel.outcome.history_error is None
    assert not result.cancelled
    rows = cells(panel)
    assert len(rows) == len(result.rows) + 1 > 3  # the untried candidates are listed too
    assert rows[0][:2] == [BASELINE_LABEL, "yes"] and float(rows[0][2]) > 0
    measured = [r for r in rows[1:] if r[2] != "–"]
    estimates = [float(r[3]) for r in rows[1:]]
    assert estimates == sorted(estimates, reverse=True)  # the speed model ordered them
    assert measured == rows[1:3]  # the two the estimate calls fastest were launched
    assert all(r[0].startswith("dmax=") for r in measured)
    assert all(r[6] == "final" and r[1] == "yes" for r in measured)
    assert all("candidate limit" in r[8] for r in rows[1:] if r not in measured)
    assert len(rows[0]) == len(TABLE_COLUMNS)
    # the best is what measured fastest on every category, whichever that was: on a tiny model
    # the plans differ by noise, and a loaded machine may put the starting plan first
    finals = [result.baseline, *(r for r in result.rows if r.full is not None)]
    fastest = max(finals, key=lambda r: r.full.tok_s or 0.0 if r.full else 0.0)
    best = result.best
    assert best is fastest and best.status is RowStatus.BEST
    assert "Finished" in panel.progress_label.text() and not panel.progress.isVisible()
    stored = [e for e in panel.history.entries() if e.kind == TUNE_KIND]
    assert [e.id for e in stored] == [result.history_id]
    before = wizard.state.plan
    if best is result.baseline:
        assert rows[0][6:8] == ["baseline", "best"]
        assert sorted(r[7] for r in measured) == ["finalist", "finalist"]
        assert "no candidate beat the starting plan" in result.note
        assert not panel.use_best_button.isEnabled()  # nothing to change
        assert wizard.state.plan == before
        return
    assert rows[0][6:8] == ["baseline", "measured"]
    assert sorted(r[7] for r in measured) == ["best", "finalist"]
    assert best.changes
    assert panel.summary.text().startswith(f"Best: {best.label} (")
    assert "over the starting plan" in panel.summary.text() and result.gain is not None

    # Use the best: the wizard's Plan takes the best row's changes, and the tab says so
    assert panel.use_best_button.isEnabled()
    with qtbot.waitSignal(wizard.state.plan_changed, timeout=5000):
        panel.use_best_button.click()
    plan = wizard.state.plan
    assert best.plan is not None and plan.mtp == best.plan.mtp != before.mtp
    assert all(k.startswith("mtp.") and getattr(plan.mtp, k[4:]) == v
               for k, v in best.changes.items())  # fmt: skip
    assert plan.model_copy(update={"mtp": before.mtp}) == before  # nothing else changed
    assert panel.applied == ", ".join(f"{k} = {v}" for k, v in best.changes.items())
    assert best.label in panel.note.text()


@pytest.mark.engine
def test_cancel_keeps_the_rows_measured_so_far(
    qtbot: QtBot, make_wizard: WizardFactory, mtp_plan: Plan, tmp_path: Path
) -> None:
    _, panel = tune_tab(make_wizard, mtp_plan, tmp_path / "history.sqlite")
    panel.max_candidates.setValue(3)
    steps: list[str] = []

    def cancel_after_first_candidate(step: object) -> None:
        steps.append(getattr(step, "label", ""))
        if len(steps) == 2:
            panel.cancel_button.click()

    panel._relay.progressed.connect(cancel_after_first_candidate)
    assert panel.start_tuning(CATEGORIES)
    with qtbot.waitSignal(panel.finished, timeout=TUNE_WAIT_MS):
        pass
    assert panel.outcome is not None
    result = panel.outcome.result
    assert result.cancelled
    assert "Cancelled" in panel.progress_label.text()
    rows = cells(panel)
    assert rows[0][0] == BASELINE_LABEL and float(rows[0][2]) > 0
    kept = [r for r in rows[1:] if r[2] != "–"]
    # the candidate measured before Cancel stays (one in flight may add a partial row)
    assert [r[0] for r in kept][:1] == [steps[1]] and float(kept[0][2]) > 0
    assert all(r[7] == "cancelled" for r in kept[1:])
    untried = [r for r in rows[1:] if r[2] == "–"]
    assert untried and all("cancelled" in r[8] or "candidate limit" in r[8] for r in untried)
    assert not panel.cancel_button.isEnabled() and panel.start_button.isEnabled()


@pytest.mark.usefixtures("qtbot")
def test_an_engine_that_cannot_start_is_one_sentence_and_changes_nothing(
    make_wizard: WizardFactory, tiny_model: Callable[..., Path], tmp_path: Path
) -> None:
    missing = tmp_path / "no such dir" / "llama-server"
    plan = cpu_plan(missing, tiny_model("dense"))
    wizard, panel = tune_tab(make_wizard, plan, tmp_path / "history.sqlite")
    assert panel.start_tuning(CATEGORIES)
    assert wizard.tasks.wait_idle(30)
    sentence = panel.problem.sentence
    assert sentence.startswith("The tuner stopped: ") and "\n" not in sentence
    assert "llama-server" in sentence, sentence
    assert panel.outcome is None and wizard.state.plan == plan
    assert panel.start_button.isEnabled() and not panel.cancel_button.isEnabled()
    assert not panel.use_best_button.isEnabled()


def test_the_tuner_stops_when_the_task_manager_cancels_its_task() -> None:
    """Closing the window cancels every task: the tuner's own token follows (servers reaped)."""
    tune_token, task_token = LinkedCancel(), CancelToken()
    tune_token.task = task_token
    assert not tune_token.cancelled
    tune_token.raise_if_cancelled()
    task_token.cancel()
    assert tune_token.cancelled
    with pytest.raises(BenchCancelled):
        tune_token.raise_if_cancelled()


@pytest.mark.engine
def test_closing_the_window_mid_search_stops_the_tuner_and_its_servers(
    qtbot: QtBot, make_wizard: WizardFactory, mtp_plan: Plan, tmp_path: Path
) -> None:
    wizard, panel = tune_tab(make_wizard, mtp_plan, tmp_path / "history.sqlite")
    panel.max_candidates.setValue(4)
    token = None
    with qtbot.waitSignal(panel._relay.progressed, timeout=TUNE_WAIT_MS):
        assert panel.start_tuning(CATEGORIES)
        token = panel.cancel_token
    assert token is not None and not token.cancelled
    wizard.tasks.shutdown(timeout_ms=30_000)  # what closing the window does
    assert token.cancelled
    assert wizard.tasks.wait_idle(30)
    assert [s for s in load_states() if s.liveness() is Liveness.RUNNING] == []
