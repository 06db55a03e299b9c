"""A user's path through the wizard, step by step, for the journey tests (pytest-qt and Xvfb).

A ``UserHome`` is what a user has: the real upstream ``llama-server`` built in
``~/llama.cpp/build/bin`` and zero-weight copies of full-size Qwen3.6 GGUFs (the real header and
tensor table, sparse files of the real size) in ``~/models``. A ``Journey`` drives one wizard
the way a user does — radio buttons and combo boxes, the file dialogs, Next — waiting with the
given ``wait(ms)`` (``qtbot.wait`` or ``QTest.qWait``) so the event loop runs as it would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QObject
from PySide6.QtWidgets import QFileDialog, QWizard

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.plan.io import save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.wizard import MtpWizard, PageId

MOE_FILE = "Qwen3.6-35B-A3B-IQ4_XS.gguf"
DENSE_FILE = "Qwen3.6-27B-IQ4_XS.gguf"
CARDS = {MOE_FILE: "qwen3.6-35b-a3b-iq4_xs", DENSE_FILE: "qwen3.6-27b-iq4_xs"}
IDLE_WINDOW_MS = 1500
IDLE_CPU_SHARE = 0.10
"""An idle Qt event loop uses next to no CPU; a relayout loop or a busy timer takes a core."""
STORM_AFTER_MS = 400
"""A resize settles in a few event-loop turns; layout events still coming after this are a loop."""
XDG_VARS = ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME")

Wait = Callable[[int], None]


def write_fullsize_models(folder: Path) -> dict[str, Path]:
    """The zero-weight full-size GGUFs under their published names (a few MB on disk each)."""
    return {name: zero_gguf_for_card(card, folder / name) for name, card in CARDS.items()}


@dataclass(frozen=True)
class UserHome:
    """A user's home folder: the models, the engine build, and where exports go."""

    home: Path
    engine: Path

    @property
    def models(self) -> Path:
        return self.home / "models"

    def model(self, name: str) -> Path:
        return self.models / name

    @classmethod
    def make(cls, home: Path, models: dict[str, Path], built_engine: Path) -> UserHome:
        """``home`` with ``models`` linked into ``~/models`` and the build into
        ``~/llama.cpp/build/bin`` (the folder upstream's build instructions use)."""
        (home / "models").mkdir(parents=True)
        for name, path in models.items():
            os.link(path, home / "models" / name)  # the same sparse file, no copy
        bin_dir = home / "llama.cpp" / "build" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "llama-server").symlink_to(built_engine)
        return cls(home, bin_dir / "llama-server")

    def environ(self) -> dict[str, str]:
        """This process's environment as the user's: HOME here, no XDG overrides."""
        env = {k: v for k, v in os.environ.items() if k not in XDG_VARS}
        env["HOME"] = str(self.home)
        return env


@contextmanager
def file_dialogs(
    open_path: Path | None = None, save_path: Path | None = None
) -> Iterator[list[str]]:
    """The file dialogs answer with these paths; yields the folders they were opened in."""
    asked: list[str] = []
    saved = QFileDialog.getOpenFileName, QFileDialog.getSaveFileName

    def opened(*args: object, **_: object) -> tuple[str, str]:
        asked.append(str(args[2]) if len(args) > 2 else "")
        return (str(open_path) if open_path else ""), ""

    def save(*args: object, **_: object) -> tuple[str, str]:
        asked.append(str(args[2]) if len(args) > 2 else "")
        return (str(save_path) if save_path else ""), ""

    QFileDialog.getOpenFileName = staticmethod(opened)  # type: ignore[method-assign,assignment]
    QFileDialog.getSaveFileName = staticmethod(save)  # type: ignore[method-assign,assignment]
    try:
        yield asked
    finally:
        QFileDialog.getOpenFileName, QFileDialog.getSaveFileName = saved  # type: ignore[method-assign]


class EventCounter(QObject):
    """Counts the events the application delivers, by type name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        name = event.type().name
        self.counts[name] = self.counts.get(name, 0) + 1
        return False


@contextmanager
def counting_events() -> Iterator[EventCounter]:
    app = QCoreApplication.instance()
    assert app is not None
    counter = EventCounter()
    app.installEventFilter(counter)
    try:
        yield counter
    finally:
        app.removeEventFilter(counter)


class Journey:
    """One user's way through one wizard."""

    def __init__(self, wizard: MtpWizard, home: UserHome, wait: Wait) -> None:
        self.wizard = wizard
        self.home = home
        self.wait = wait

    def settle(self) -> None:
        assert self.wizard.tasks.wait_idle(60), "background work did not finish"
        self.wait(50)  # queued signals and layouts

    def next_page(self, expect: PageId) -> None:
        button = self.wizard.button(QWizard.WizardButton.NextButton)
        assert button.isEnabled(), f"Next is disabled on page {self.wizard.currentId()}"
        button.click()
        self.settle()
        assert self.wizard.currentId() == expect, (self.wizard.currentId(), expect)

    def pick_target(self, device: str) -> None:
        """Page 1: a catalogue card from the list, or CPU only."""
        page = self.wizard.hardware_page
        assert self.wizard.currentId() == PageId.HARDWARE
        if device == "cpu":
            page.radio_cpu.click()
        else:
            page.radio_catalogue.click()
            page.catalogue_combo.setCurrentIndex(page.catalogue_combo.findData(device))
        self.settle()
        assert self.wizard.plan.device == device

    def open_model(self, name: str) -> None:
        """Page 2: Open GGUF… and choose the file in the dialog."""
        page = self.wizard.model_page
        path = self.home.model(name)
        with file_dialogs(open_path=path) as asked:
            page.open_button.click()
        self.settle()
        assert asked == [str(self.home.home)], asked  # the dialog opens in the home folder
        assert self.wizard.plan.model.path == path and self.wizard.plan.model.card is None
        assert page.isComplete() and self.wizard.state.model_info is not None

    def pick_probed_build(self) -> None:
        """Page 3: the build detection found in ~/llama.cpp/build/bin."""
        page = self.wizard.engine_page
        binary = self.home.engine
        rows = [i for i, c in enumerate(page.choices) if c.probed and c.build.binary == binary]
        assert rows, [str(c.build.binary) for c in page.choices]
        page.build_list.setCurrentRow(rows[0])
        self.settle()
        using = self.wizard.state.build()
        assert using.probed and using.build.binary == binary

    def export_unit(self) -> str:
        """Page 6: Export service file… and save it where the dialog says."""
        page = self.wizard.service_page
        target = self.home.home / "exported" / "llama.service"
        assert page.export_button.isEnabled()
        if page.account is None and page.account_edit.placeholderText() == "root":
            # the tests run as root: a system unit never runs the engine as root
            page.account_edit.setText("alice")
            page.account_edit.editingFinished.emit()
        with file_dialogs(save_path=target):
            page.export_button.click()
        self.settle()
        assert target.is_file(), page.action.outcome.sentence
        return target.read_text()

    def assert_idle(self) -> float:
        """Nobody touches the window: the process sleeps and no event keeps coming.
        Returns the CPU share of the idle window."""
        self.wait(200)  # what the last action queued
        with counting_events() as counter:
            cpu, wall = time.process_time(), time.monotonic()
            self.wait(IDLE_WINDOW_MS)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        busy = {k: n for k, n in counter.counts.items() if n > 20}
        assert cpu < IDLE_CPU_SHARE * wall, f"{cpu:.2f} s CPU in {wall:.2f} s idle; events {busy}"
        assert not busy, f"events keep coming while idle: {busy}"
        return cpu / wall

    def drag_the_window_edge(self) -> None:
        """The user drags the window from its narrowest to a wide size: at no width does the
        page keep laying itself out (a wrap that toggles a scrollbar that changes the width …)."""
        wizard = self.wizard
        height = wizard.height()
        storms: list[tuple[int, int]] = []
        with counting_events() as counter:
            for width in range(wizard.minimumWidth(), 1601, 4):
                wizard.resize(width, height)
                events = self._settle_layout(counter)
                if events:
                    storms.append((width, events))
                    break  # a storm does not stop by itself: the first one is enough to say so
        wizard.resize(1366, height)
        self.wait(50)
        assert not storms, f"relayout storm at (width, events in 25 ms): {storms}"

    def _settle_layout(self, counter: EventCounter) -> int:
        """Wait until a resize has been laid out (on xcb the window system answers later, so
        one resize's cascade may land in any window); 0 when it settled, else the layout
        events still coming in the last 25 ms after ``STORM_AFTER_MS``."""
        started = time.monotonic()
        while True:
            counter.counts.clear()
            self.wait(25)
            events = counter.counts.get("Resize", 0) + counter.counts.get("LayoutRequest", 0)
            if events <= 1:
                return 0
            if time.monotonic() - started > STORM_AFTER_MS / 1000:
                return events

    def to_budget(self, device: str, model: str) -> None:
        """Pages 1-3, then page 4: idle, and stays idle at any window width."""
        self.pick_target(device)
        self.next_page(PageId.MODEL)
        self.open_model(model)
        self.next_page(PageId.ENGINE)
        self.pick_probed_build()
        self.next_page(PageId.BUDGET)
        self.assert_idle()  # page 4 with the full-size model open
        self.drag_the_window_edge()
        self.assert_idle()

    def to_the_end(self) -> str:
        """Pages 5-7 (page 6: export the unit); returns the exported unit."""
        self.next_page(PageId.DESKTOP)
        self.next_page(PageId.SERVICE)
        self.assert_idle()  # page 6 with the full-size model open
        exported = self.export_unit()
        self.next_page(PageId.LAUNCH)
        self.assert_idle()
        return exported

    def command(self) -> list[str]:
        evaluation = self.wizard.state.evaluation()
        assert evaluation is not None and evaluation.argv is not None, evaluation
        return list(evaluation.argv)


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def cli_oracle(
    plan: Plan, folder: Path, scope: str, env: dict[str, str]
) -> tuple[list[str], dict[str, Any], str]:
    """``mtpstudio plan --json`` and ``mtpstudio render`` on the same plan, in a subprocess."""
    folder.mkdir(parents=True, exist_ok=True)
    plan_file = folder / "plan.json"
    save_plan(plan, plan_file)
    env = {k: v for k, v in env.items() if k not in {"DISPLAY", "QT_QPA_PLATFORM"}}

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
    account = ["--user", "alice"] if scope == "system" else []  # as the window's export
    rendered = run("render", "--plan", str(plan_file), "--out", str(out), "--scope", scope,
                   *account)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    return data["argv"], data, (out / f"{plan.outputs.service_name}.service").read_text()
