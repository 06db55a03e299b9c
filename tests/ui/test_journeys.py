"""Journeys: the wizard driven as a user drives it, from a full-size GGUF to an exported unit.

Each journey starts in a fresh home folder holding what a user has: the real upstream
``llama-server`` built in ``~/llama.cpp/build/bin`` and a zero-weight copy of a full-size Qwen3.6
GGUF (the real header and tensor table, a sparse file of the real size) at
``~/models/<name>.gguf``. The wizard runs this machine's real detection, the user picks the
target on page 1, opens the file through the file dialog on page 2, picks the probed build on
page 3, looks at (and acts on) the budget on page 4, keeps the desktop on page 5, exports the
unit on page 6 and arrives on page 7. Then: the plan is what the user chose; the command line and
the exported unit are byte for byte what ``mtpstudio plan`` / ``mtpstudio render`` give for the
same plan in a real subprocess; and the event loop is idle (no busy relayout or timer loop).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QObject
from PySide6.QtWidgets import QFileDialog
from pytestqt.qtbot import QtBot

from mtpstudio.core.model.catalog.models import model_card_path
from mtpstudio.core.plan import MoePlacement, Plan, save_plan
from mtpstudio.testing.zero_gguf import write_zero_gguf
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.wizard import MtpWizard, PageId

MOE_FILE = "Qwen3.6-35B-A3B-IQ4_XS.gguf"
DENSE_FILE = "Qwen3.6-27B-IQ4_XS.gguf"
CARDS = {MOE_FILE: "qwen3.6-35b-a3b-iq4_xs", DENSE_FILE: "qwen3.6-27b-iq4_xs"}
IDLE_WINDOW_MS = 1500
IDLE_CPU_SHARE = 0.10
"""An idle Qt event loop uses next to no CPU; a relayout loop or a busy timer takes a core."""


@pytest.fixture(scope="session")
def fullsize_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two zero-weight full-size GGUFs, written once (sparse: a few MB on disk each)."""
    folder = tmp_path_factory.mktemp("fullsize")
    return {
        name: write_zero_gguf(model_card_path(card), folder / name) for name, card in CARDS.items()
    }


@dataclass(frozen=True)
class UserHome:
    """A user's home folder: the models and the engine build, and where exports go."""

    home: Path
    models: Path
    engine: Path

    def model(self, name: str) -> Path:
        return self.models / name


@pytest.fixture
def user_home(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fullsize_models: dict[str, Path],
    engine: Callable[[str], Path],
) -> UserHome:
    built = engine("upstream")  # found through the real cache before HOME moves
    home = tmp_path / "home"
    models = home / "models"
    models.mkdir(parents=True)
    for name, path in fullsize_models.items():
        os.link(path, models / name)  # the same sparse file under the realistic name
    bin_dir = home / "llama.cpp" / "build" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "llama-server").symlink_to(built)
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    return UserHome(home, models, bin_dir / "llama-server")


@pytest.fixture
def open_wizard(qtbot: QtBot, user_home: UserHome) -> Iterator[Callable[[], MtpWizard]]:
    """A first start: no remembered plan, this machine's real detection."""
    made: list[MtpWizard] = []

    def make() -> MtpWizard:
        wizard = MtpWizard(None, store=StateStore(user_home.home / ".config" / "mtpstudio"))
        qtbot.addWidget(wizard)
        wizard.resize(1366, 768)
        wizard.show()
        made.append(wizard)
        assert wizard.tasks.wait_idle(120)
        return wizard

    yield make
    for wizard in made:
        wizard.tasks.shutdown()


def settle(wizard: MtpWizard, qtbot: QtBot) -> None:
    assert wizard.tasks.wait_idle(60)
    qtbot.wait(50)  # queued signals and layouts


def press_next(wizard: MtpWizard, qtbot: QtBot, expect: PageId) -> None:
    button = wizard.button(wizard.WizardButton.NextButton)
    assert button.isEnabled(), f"Next is disabled on page {wizard.currentId()}"
    button.click()
    settle(wizard, qtbot)
    assert wizard.currentId() == expect


def pick_target(wizard: MtpWizard, qtbot: QtBot, device: str) -> None:
    """Page 1: a catalogue card from the list, or CPU only."""
    page = wizard.hardware_page
    assert wizard.currentId() == PageId.HARDWARE
    if device == "cpu":
        page.radio_cpu.click()
    else:
        page.radio_catalogue.click()
        page.catalogue_combo.setCurrentIndex(page.catalogue_combo.findData(device))
    settle(wizard, qtbot)
    assert wizard.plan.device == device


def open_model(
    wizard: MtpWizard, qtbot: QtBot, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Page 2: Open GGUF… and choose the file in the dialog."""
    page = wizard.model_page
    asked: list[str] = []

    def dialog(*args: object, **kw: object) -> tuple[str, str]:
        asked.append(str(args[2]) if len(args) > 2 else "")
        return str(path), "GGUF models (*.gguf)"

    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(dialog))
    page.open_button.click()
    settle(wizard, qtbot)
    assert asked == [str(Path.home())]  # the dialog opens in the home folder
    assert wizard.plan.model.path == path and wizard.plan.model.card is None
    assert page.isComplete() and wizard.state.model_info is not None


def pick_probed_build(wizard: MtpWizard, qtbot: QtBot, binary: Path) -> None:
    """Page 3: the build detection found in ~/llama.cpp/build/bin."""
    page = wizard.engine_page
    rows = [i for i, c in enumerate(page.choices) if c.probed and c.build.binary == binary]
    assert rows, [str(c.build.binary) for c in page.choices]
    page.build_list.setCurrentRow(rows[0])
    settle(wizard, qtbot)
    assert wizard.state.build().probed and wizard.state.build().build.binary == binary


def export_unit(
    wizard: MtpWizard, qtbot: QtBot, target: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Page 6: Export service file… and save it where the dialog says."""
    page = wizard.service_page
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(target), ""))
    )
    assert page.export_button.isEnabled()
    page.export_button.click()
    settle(wizard, qtbot)
    assert target.is_file(), page.action.outcome.text()
    return target.read_text()


class EventCounter(QObject):
    """Counts the events the application delivers (layouts, resizes, timers …)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        name = event.type().name
        self.counts[name] = self.counts.get(name, 0) + 1
        return False


def assert_idle(qtbot: QtBot) -> None:
    """Nobody touches the window for a while: the process sleeps, no layout loop runs."""
    app = QCoreApplication.instance()
    assert app is not None
    qtbot.wait(200)  # let what the last action queued finish
    counter = EventCounter()
    app.installEventFilter(counter)
    try:
        cpu, wall = time.process_time(), time.monotonic()
        qtbot.wait(IDLE_WINDOW_MS)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    finally:
        app.removeEventFilter(counter)
    busy = {k: n for k, n in counter.counts.items() if n > 20}
    assert cpu < IDLE_CPU_SHARE * wall, f"{cpu:.2f} s CPU in {wall:.2f} s idle; events {busy}"
    assert not busy, f"events keep coming while idle: {busy}"


def drag_the_window_edge(wizard: MtpWizard, qtbot: QtBot) -> None:
    """The user drags the window from its narrowest to a wide size: at no width does the page
    keep laying itself out (a wrap that toggles a scrollbar that changes the width …)."""
    app = QCoreApplication.instance()
    assert app is not None
    height = wizard.height()
    storms: list[tuple[int, int]] = []
    counter = EventCounter()
    app.installEventFilter(counter)
    try:
        for width in range(wizard.minimumWidth(), 1601, 4):
            started = time.monotonic()
            wizard.resize(width, height)
            qtbot.wait(5)
            counter.counts.clear()
            qtbot.wait(25)
            resizes = counter.counts.get("Resize", 0) + counter.counts.get("LayoutRequest", 0)
            if resizes > 4 or time.monotonic() - started > 2:
                storms.append((width, resizes))
                break  # a storm does not stop by itself: the first one is enough to say so
    finally:
        app.removeEventFilter(counter)
    wizard.resize(1366, height)
    qtbot.wait(50)
    assert not storms, f"relayout storms at (width, events in 25 ms): {storms[:8]}"


def cli_oracle(plan: Plan, folder: Path, scope: str) -> tuple[list[str], dict[str, Any], str]:
    """``mtpstudio plan --json`` and ``mtpstudio render --scope`` on the same plan, for real."""
    plan_file = folder / "plan.json"
    save_plan(plan, plan_file)
    env = {k: v for k, v in os.environ.items() if k not in {"DISPLAY", "QT_QPA_PLATFORM"}}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mtpstudio", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )

    shown = run("plan", "--plan", str(plan_file), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    out = folder / "rendered"
    rendered = run("render", "--plan", str(plan_file), "--out", str(out), "--scope", scope)
    assert rendered.returncode == 0, rendered.stderr
    unit = out / f"{plan.outputs.service_name}.service"
    return data["argv"], data, unit.read_text()


def walk_to_budget(
    wizard: MtpWizard,
    qtbot: QtBot,
    monkeypatch: pytest.MonkeyPatch,
    home: UserHome,
    device: str,
    model: str,
) -> None:
    pick_target(wizard, qtbot, device)
    press_next(wizard, qtbot, PageId.MODEL)
    open_model(wizard, qtbot, home.model(model), monkeypatch)
    press_next(wizard, qtbot, PageId.ENGINE)
    pick_probed_build(wizard, qtbot, home.engine)
    press_next(wizard, qtbot, PageId.BUDGET)
    assert_idle(qtbot)  # page 4 with the full-size model open
    drag_the_window_edge(wizard, qtbot)
    assert_idle(qtbot)


def walk_to_the_end(
    wizard: MtpWizard, qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, home: UserHome
) -> str:
    press_next(wizard, qtbot, PageId.DESKTOP)
    press_next(wizard, qtbot, PageId.SERVICE)
    assert_idle(qtbot)  # page 6 with the full-size model open
    exported = export_unit(wizard, qtbot, home.home / "exported" / "llama.service", monkeypatch)
    press_next(wizard, qtbot, PageId.LAUNCH)
    assert_idle(qtbot)
    return exported


def command(wizard: MtpWizard) -> list[str]:
    evaluation = wizard.state.evaluation()
    assert evaluation is not None and evaluation.argv is not None, evaluation
    return list(evaluation.argv)


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_moe_model_on_a_12_gb_card(
    open_wizard: Callable[[], MtpWizard],
    qtbot: QtBot,
    monkeypatch: pytest.MonkeyPatch,
    user_home: UserHome,
) -> None:
    wizard = open_wizard()
    walk_to_budget(wizard, qtbot, monkeypatch, user_home, "rtx-4070-super", MOE_FILE)
    page = wizard.budget_page
    assert page.bar.rows[0].overflow_bytes == 0
    assert (
        "the engine's fit is expected to keep the experts of layers" in page.warnings_label.text()
    )
    # the user wants the experts placed by hand: Fit → fewest expert layers on the CPU
    page.fit_offload_button.click()
    settle(wizard, qtbot)
    assert wizard.plan.runtime.moe is MoePlacement.N_CPU_MOE and wizard.plan.runtime.n_cpu_moe > 0
    assert page.bar.rows[0].overflow_bytes == 0
    n_cpu_moe = wizard.plan.runtime.n_cpu_moe
    exported = walk_to_the_end(wizard, qtbot, monkeypatch, user_home)

    argv = command(wizard)
    assert argv[0] == str(user_home.engine)
    assert value(argv, "-m") == str(user_home.model(MOE_FILE))
    assert value(argv, "--n-cpu-moe") == str(n_cpu_moe) and value(argv, "--fit") == "off"
    cli_argv, data, cli_unit = cli_oracle(
        wizard.plan, user_home.home / "cli", wizard.service_page.scope.value
    )
    assert argv == cli_argv and exported == cli_unit
    assert data["verdict"]["status"] == "fits"
    assert str(user_home.model(MOE_FILE)) in exported


def test_dense_model_on_a_16_gb_card_gets_layers_on_the_cpu(
    open_wizard: Callable[[], MtpWizard],
    qtbot: QtBot,
    monkeypatch: pytest.MonkeyPatch,
    user_home: UserHome,
) -> None:
    wizard = open_wizard()
    walk_to_budget(wizard, qtbot, monkeypatch, user_home, "rtx-4060-ti-16gb", DENSE_FILE)
    page = wizard.budget_page
    # with the engine's fit the plan fits, and the page says how many layers it moves
    assert page.bar.rows[0].overflow_bytes == 0
    assert "the engine's fit is expected to set -ngl " in page.warnings_label.text()
    assert "--fit on" in " ".join(command(wizard))
    # Fit → the fewest layers on the CPU, placed by mtpstudio itself
    page.fit_offload_button.click()
    settle(wizard, qtbot)
    ngl = wizard.plan.runtime.n_gpu_layers
    assert ngl is not None and 0 < ngl < 66
    assert wizard.plan.runtime.moe is MoePlacement.GPU
    assert page.bar.rows[0].overflow_bytes == 0
    argv = command(wizard)
    assert value(argv, "-ngl") == str(ngl) and value(argv, "--fit") == "off"
    exported = walk_to_the_end(wizard, qtbot, monkeypatch, user_home)

    cli_argv, data, cli_unit = cli_oracle(
        wizard.plan, user_home.home / "cli", wizard.service_page.scope.value
    )
    assert command(wizard) == cli_argv and exported == cli_unit
    assert data["verdict"]["status"] == "fits"
    assert data["host"]["segments"]["kv_cache"] > 0  # the CPU layers' KV cache is in RAM


def test_cpu_target_keeps_every_layer_in_ram(
    open_wizard: Callable[[], MtpWizard],
    qtbot: QtBot,
    monkeypatch: pytest.MonkeyPatch,
    user_home: UserHome,
) -> None:
    wizard = open_wizard()
    walk_to_budget(wizard, qtbot, monkeypatch, user_home, "cpu", MOE_FILE)
    argv = command(wizard)
    assert value(argv, "-ngl") == "0" and value(argv, "--fit") == "off"
    exported = walk_to_the_end(wizard, qtbot, monkeypatch, user_home)

    cli_argv, _, cli_unit = cli_oracle(
        wizard.plan, user_home.home / "cli", wizard.service_page.scope.value
    )
    assert command(wizard) == cli_argv and exported == cli_unit
    assert wizard.plan.device == "cpu" and wizard.plan.model.path == user_home.model(MOE_FILE)
