"""The window stands alone (issue 34 item 5): an engine picked or built from the window, `gui
--model`, a server started elsewhere attached to or stopped from the Launch page, a waiting
benchmark that shows how long it waits and for what, a cancelled one that stores nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication
from pytestqt.qtbot import QtBot
from support.plans import cpu_plan

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.bench.results import BenchReport, BenchSettings
from mtpstudio.core.bench.target import BenchProgress
from mtpstudio.core.plan.io import plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.state import load_states
from mtpstudio.core.usecases.bench import conclude
from mtpstudio.ui.pages.launch_bench import BenchTab
from mtpstudio.ui.widgets.common import Tone
from mtpstudio.ui.wizard import PageId

from .conftest import WizardFactory, go_to, no_gpu_report

pytestmark = pytest.mark.usefixtures("no_server_left")

CLI_ONLY = ("--engine", "MTPSTUDIO_ENGINES", "mtpstudio detect", "--root")


def test_an_engine_is_picked_from_the_window(
    make_wizard: WizardFactory, engine: Callable[[str], Path], tiny_model: Callable[..., Path]
) -> None:
    plan = plan_with(Plan(), {"model.path": str(tiny_model("dense")), "model.card": None})
    wizard = make_wizard(plan, report=no_gpu_report())  # detection found no engine
    go_to(wizard, PageId.ENGINE)
    page = wizard.engine_page
    assert not wizard.state.build().probed
    picker = page.picker
    picker.ask_path = lambda: Path("/bin/true")  # type: ignore[method-assign]
    picker.browse_button.click()
    assert wizard.tasks.wait_idle(60)
    assert page.notice.tone is Tone.BAD and "llama-server" in page.notice.text()
    binary = engine("upstream")
    picker.ask_path = lambda: binary  # type: ignore[method-assign]
    picker.browse_button.click()
    assert wizard.tasks.wait_idle(60)
    assert page.notice.tone is Tone.GOOD, page.notice.text()
    assert wizard.plan.engine.binary == binary.absolute()
    using = wizard.state.build()
    assert using.probed and using.build.binary == binary
    picker.build_button.click()
    assert picker.steps.isVisibleTo(page)
    assert "cmake --build ~/llama.cpp/build -j --target llama-server" in picker.steps.text()


def test_the_launch_page_offers_the_picker_not_the_command_line(
    make_wizard: WizardFactory, tiny_model: Callable[..., Path]
) -> None:
    plan = plan_with(Plan(), {"model.path": str(tiny_model("dense")), "model.card": None})
    wizard = make_wizard(plan, report=no_gpu_report(), remember=False)
    go_to(wizard, PageId.LAUNCH)
    page = wizard.launch_page
    assert page.picker.isVisibleTo(page)
    page.start_button.click()
    assert wizard.tasks.wait_idle(60)
    said = page.problem.sentence
    assert "No upstream llama-server was found on this computer: Browse…" in said, said
    assert not any(word in said for word in CLI_ONLY), said


def test_gui_model_opens_a_plan_for_the_file(
    tmp_path: Path, tiny_model: Callable[..., Path]
) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    missing = subprocess.run([sys.executable, "-m", "mtpstudio", "gui", "--model",
                              str(tmp_path / "nope.gguf")], capture_output=True, text=True,
                             env=env, timeout=120, check=False)  # fmt: skip
    assert missing.returncode == 2 and "is not a file" in missing.stderr
    shots = subprocess.run([sys.executable, "-m", "mtpstudio", "gui", "--model",
                            str(tiny_model("dense")), "--screenshots", str(tmp_path / "s")],
                           capture_output=True, text=True, env=env, timeout=300,
                           check=False)  # fmt: skip
    assert shots.returncode == 0, shots.stderr
    assert len(list((tmp_path / "s").glob("*.png"))) == 7


@pytest.mark.engine
def test_a_server_started_elsewhere_is_attached_benchmarked_and_stopped(
    qtbot: QtBot,
    make_wizard: WizardFactory,
    engine: Callable[[str], Path],
    tiny_model: Callable[..., Path],
    tmp_path: Path,
) -> None:
    plan = cpu_plan(engine("upstream"), tiny_model("dense"))
    plan_file = tmp_path / "tiny.json"
    save_plan(plan, plan_file)
    launched = subprocess.run([sys.executable, "-m", "mtpstudio", "launch", "--plan",
                               str(plan_file), "--json"], capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    pid = json.loads(launched.stdout)["pid"]
    wizard = make_wizard(plan, remember=False)
    go_to(wizard, PageId.LAUNCH)
    page = wizard.launch_page
    assert wizard.tasks.wait_idle(30)
    assert page.elsewhere_row.isVisibleTo(page)
    assert f"port {plan.server.port} (pid {pid}" in page.elsewhere_label.text()
    assert "the port this plan uses" in page.elsewhere_label.text()
    page.attach_button.click()
    assert page.bench_tab.bench_button.isEnabled()
    page.bench_tab.n_predict.setValue(8)
    assert page.run_benchmark(["code_python"])
    assert wizard.tasks.wait_idle(120)
    outcome = page.bench_outcome
    assert outcome is not None and outcome.report.n_requests >= 1, page.problem.sentence
    page.stop_elsewhere_button.click()
    assert wizard.tasks.wait_idle(60)
    assert "stopped" in page.note.text() or "killed" in page.note.text(), page.note.text()
    assert not page.elsewhere_row.isVisibleTo(page)
    assert all(s.pid != pid for s in load_states())


def test_a_waiting_benchmark_says_what_it_waits_for_and_how_long(qtbot: QtBot) -> None:
    tab = BenchTab()
    qtbot.addWidget(tab)
    tab.start_progress(9)
    assert tab.progress_label.text().startswith("warm-up: waiting for the server's first answer")
    assert "· 0 s (0 s in all)" in tab.progress_label.text()
    deadline = time.monotonic() + 3
    while "· 1 s" not in tab.progress_label.text() and time.monotonic() < deadline:
        QCoreApplication.processEvents()
        time.sleep(0.05)
    assert "· 1 s (1 s in all)" in tab.progress_label.text()  # it ticks while nothing arrives
    tab.show_progress(BenchProgress("A", "measure", "code_python", 1, 9))
    assert tab.progress_label.text().startswith(
        "measure: code_python, waiting for its answer · 0 s"
    )
    tab.stop_progress()


def test_a_benchmark_cancelled_before_its_first_category_stores_nothing(tmp_path: Path) -> None:
    history = BenchHistory(tmp_path / "history.sqlite")
    report = BenchReport("A", "upstream", "http://127.0.0.1:1", "/completion",
                         BenchSettings(), "2026-11-27T00:00:00")  # fmt: skip
    report.cancelled = True
    report.error = "cancelled; the finished categories are kept"
    outcome = conclude(report, None, history)
    assert outcome.run_id is None and outcome.history_error is None
    assert history.entries() == []
