"""The Launch & benchmark page without an engine: stored runs, findings, charts, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.samples import report as sample_report
from pytestqt.qtbot import QtBot

from mtpstudio.core.bench.doctor import diagnose
from mtpstudio.core.bench.history import BenchHistory, export_entry
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.pages.launch import BenchOutcome, LaunchPage
from mtpstudio.ui.server_process import ServerPhase
from mtpstudio.ui.widgets.charts import BarChart, Series, nice_max
from mtpstudio.ui.widgets.common import Tone
from mtpstudio.ui.wizard import PageId

from .conftest import WizardFactory, go_to


@pytest.fixture
def page(make_wizard: WizardFactory, tmp_path: Path) -> LaunchPage:
    wizard = make_wizard(remember=False)
    go_to(wizard, PageId.LAUNCH)
    wizard.launch_page.history = BenchHistory(tmp_path / "history.sqlite3")
    return wizard.launch_page


def outcome_for(page: LaunchPage, **kw: object) -> BenchOutcome:
    report = sample_report(**kw)  # type: ignore[arg-type]
    report.plan_json = page.state.plan.to_json()  # a run of the wizard's plan
    run_id = page.history.add_report(report, "bench")
    runs = tuple(e for e in page.history.entries() if e.kind == "bench")
    return BenchOutcome(report, tuple(diagnose(report, None)), run_id, runs)


def test_a_stored_run_fills_the_table_charts_and_history(page: LaunchPage, tmp_path: Path) -> None:
    first = outcome_for(page, label="A", rows=[[(16, 12, 9, 100.0)], [(16, 10, 4, 80.0)]])
    second = outcome_for(page, label="B", rows=[[(16, 12, 11, 120.0)], [(16, 10, 8, 90.0)]])
    assert first.run_id is not None and second.run_id is not None
    page.show_bench(second)
    assert page.bench_tab.results.rowCount() == 2
    assert [page.bench_tab.results.item(r, 2).text() for r in range(2)] == ["120.0", "90.0"]
    assert page.bench_tab.results.item(0, 7).text() == "92 %"  # 11 of 12 drafts accepted
    assert page.bench_tab.tok_chart.series[0].values == (120.0, 90.0)
    assert page.bench_tab.accept_chart.series[0].values[1] == pytest.approx(80.0)
    # history over time: both runs; A/B: the latest against the one chosen (the other run)
    assert len(page.compare_tab.history_chart.series[0].values) == 2
    compare = page.compare_tab.compare_with
    assert compare.count() == 1 and compare.currentData() == first.run_id
    names = [s.name for s in page.compare_tab.ab_chart.series]
    assert names == [f"run {second.run_id}", f"run {first.run_id}"]
    assert page.compare_tab.ab_chart.series[1].values == (100.0, 80.0)
    assert f"stored as run {second.run_id}" in page.bench_tab.summary.text()
    out = tmp_path / "run.csv"
    assert page.export_results("csv", out)
    assert out.read_text() == export_entry(page.history.get(second.run_id), "csv")


def test_drafting_requested_but_no_drafts_is_shown_in_red(page: LaunchPage) -> None:
    outcome = outcome_for(page, rows=[[(16, 0, 0, 100.0)]], drafting_requested=True)
    page.show_bench(outcome)
    codes = [f.code for f in outcome.findings]
    assert "drafting-off" in codes
    notice = page.bench_tab.finding_notices[codes.index("drafting-off")]
    assert notice.tone is Tone.BAD and "DRAFTING IS OFF" in notice.text()


def test_a_refused_start_is_one_sentence_and_starts_nothing(
    page: LaunchPage, qtbot: QtBot, tmp_path: Path
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    plan = plan_with(
        Plan(),
        {
            "device": "cpu",
            "model.path": str(model),
            "model.card": None,
            "engine.binary": str(tmp_path / "no engine" / "llama-server"),
        },
    )
    page.state.set_plan(plan)
    page.refresh()
    with qtbot.waitSignal(page.server.start_refused, timeout=30_000):
        page.start_button.click()
    assert page.server.phase is ServerPhase.FAILED and page.server.process is None
    sentence = page.problem.sentence
    assert "no engine" in sentence and "\n" not in sentence
    assert page.start_button.isEnabled() and not page.bench_tab.bench_button.isEnabled()


def test_details_are_behind_a_toggle(page: LaunchPage) -> None:
    page.problem.show_problem("It broke.", "line 1\nline 2")
    assert page.problem.sentence == "It broke." and page.problem.details.isHidden()
    page.problem.toggle.click()
    assert not page.problem.details.isHidden()
    assert page.problem.details.toPlainText() == "line 1\nline 2"
    page.problem.show_problem(None)
    assert page.problem.sentence == ""


def test_charts_paint_their_data(qtbot: QtBot) -> None:
    chart = BarChart("speed", "tok/s")
    qtbot.addWidget(chart)
    chart.resize(400, 240)
    chart.set_data(["a", "b"], [Series("x", (10.0, None)), Series("y", (30.0, 5.0))])
    assert chart.y_max() == nice_max(30.0) == 50.0
    image = chart.grab().toImage()
    blue = sum(
        1
        for x in range(0, 400, 2)
        for y in range(0, 240, 2)
        if image.pixelColor(x, y).name() == "#2563eb"
    )
    assert blue > 0  # the first series' bar is drawn
    assert [nice_max(v) for v in (0.3, 1, 3.2, 47, 120)] == [0.5, 1.0, 5.0, 50.0, 200.0]


def test_the_page_opens_on_the_latest_stored_run(page: LaunchPage) -> None:
    outcome_for(page, label="older", rows=[[(16, 12, 9, 100.0)]])
    latest = outcome_for(page, label="latest", rows=[[(16, 0, 0, 70.0)], [(16, 0, 0, 60.0)]])
    page.bench_tab.results.setRowCount(0)
    page.load_history()
    assert page.tasks.wait_idle(10)
    assert page.bench_outcome is None and page.bench_tab.results.rowCount() == 2
    assert f"Last stored run {latest.run_id} (latest" in page.bench_tab.summary.text()
    assert page.bench_tab.tok_chart.series[0].values == (70.0, 60.0)
    assert [n.tone for n in page.bench_tab.finding_notices] == [Tone.BAD]  # drafts asked, none came
    assert page.shown_run_id == latest.run_id and page.bench_tab.export_button.isEnabled()


def _stored(page: LaunchPage, label: str, plan: Plan) -> int:
    report = sample_report(label=label)
    report.plan_json = plan.to_json()
    return page.history.add_report(report, "bench")


def test_the_page_opens_on_this_plans_latest_run_never_another_plans(page: LaunchPage) -> None:
    """Issue 25 item 8: page 7 opened on the latest stored run, whatever plan it measured."""
    mine = page.state.plan
    other = plan_with(mine, {"runtime.ctx": 8192})
    assert other != mine
    first = _stored(page, "mine", mine)
    _stored(page, "other", other)  # the newest run is another plan's
    page.bench_tab.results.setRowCount(0)
    page.show_history(tuple(e for e in page.history.entries() if e.kind == "bench"))
    assert page.shown_run_id == first
    assert f"Last stored run {first} (mine," in page.bench_tab.summary.text()


def test_with_only_other_plans_runs_the_page_says_so_and_shows_none(page: LaunchPage) -> None:
    other = plan_with(page.state.plan, {"runtime.ctx": 8192})
    _stored(page, "other", other)
    _stored(page, "other 2", other)
    page.bench_tab.results.setRowCount(0)
    page.show_history(tuple(e for e in page.history.entries() if e.kind == "bench"))
    assert page.shown_run_id is None and page.bench_tab.results.rowCount() == 0
    text = page.bench_tab.summary.text()
    assert text.startswith("No stored run of this plan yet (2 runs of other plans under Compare")
    assert page.compare_tab.history_chart.series[0].values  # they stay listed there


def test_a_difference_that_rounds_to_zero_is_not_negative() -> None:
    """Issue 25 item 8: the Memory tab showed "-0.00" for a segment logged 0.004 MiB under."""
    from mtpstudio.core.memory.measured import ReconcileRow, Reconciliation
    from mtpstudio.ui.pages.launch_memory import MemoryTab

    tab = MemoryTab()
    rows = (
        ReconcileRow("weights", "CPU", 81.084, 81.080),
        ReconcileRow("kv_cache", "CPU", 4.0, 6.5),
    )
    tab.show_reconciliation(Reconciliation("b", "CPU", rows), None)
    cells = [tab.memory.item(r, 4).text() for r in range(tab.memory.rowCount())]
    assert cells == ["0.00", "+2.50", "+2.50"]
