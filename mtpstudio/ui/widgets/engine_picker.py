"""Pick a llama-server build from the window: browse for the binary (probed as detection
probes it), or read how to build one for this distribution. Used by the Engine and Launch pages,
so the window never sends the user to the command line for an engine."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from mtpstudio.core.detect.models import EngineInfo
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.usecases.engine_files import build_steps, probe_engine_file, read_os_release
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.tasks import CancelToken

PROBE_KEY = "engine-browse"


class EnginePicker(QWidget):
    """Browse… (a probed binary becomes the plan's engine) and How to build one."""

    picked = Signal(str)  # the sentence saying which build the plan now uses
    failed = Signal(str)  # why the chosen file is not a usable build

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.browse_button = QPushButton("Browse for llama-server…", self)
        self.browse_button.setToolTip(
            "Choose a llama-server binary (upstream llama.cpp or ik_llama.cpp); mtpstudio asks "
            "it which flags it takes and uses it for this plan."
        )
        self.build_button = QPushButton("How to build one", self)
        self.build_button.setCheckable(True)
        self.steps = QLabel(self)
        self.steps.setWordWrap(True)
        self.steps.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.steps.setVisible(False)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.browse_button)
        row.addWidget(self.build_button)
        row.addStretch()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.steps)
        self.browse_button.clicked.connect(self._on_browse_clicked)
        self.build_button.toggled.connect(self.show_steps)

    def show_steps(self, shown: bool = True) -> None:
        """The commands that build upstream llama-server where mtpstudio finds it."""
        report = self.state.report
        cuda = report is not None and any(g.vendor == "nvidia" for g in report.gpus)
        steps = build_steps(read_os_release(), cuda=cuda)
        lines = "".join(f"<br><code>{s}</code>" for s in steps)
        self.steps.setText(
            f"Build upstream llama.cpp's server (a few minutes):{lines}<br>mtpstudio finds it in "
            "~/llama.cpp/build/bin (Refresh on the Hardware page, or Browse… to it)."
        )
        self.steps.setVisible(shown)
        if self.build_button.isChecked() != shown:
            self.build_button.setChecked(shown)

    def ask_path(self) -> Path | None:
        """The file dialog (tests replace this)."""
        start = str(Path.home() / "llama.cpp" / "build" / "bin")
        name, _ = QFileDialog.getOpenFileName(self, "Choose a llama-server binary", start)
        return Path(name) if name else None

    def _on_browse_clicked(self) -> None:
        path = self.ask_path()
        if path is not None:
            self.choose(path)

    def choose(self, path: Path) -> None:
        """Probe ``path`` in the background; once it answers, the plan uses it."""

        def work(token: CancelToken) -> EngineInfo:
            return probe_engine_file(path, SubprocessRunner())

        def done(info: EngineInfo) -> None:
            self.browse_button.setEnabled(True)
            self.state.add_engine(info)
            assert info.flavour is not None
            self.state.update(
                {"engine.flavour": info.flavour.value, "engine.binary": str(path.absolute())}
            )
            self.picked.emit(f"The plan now uses {path} ({info.flavour.value}).")

        def fail(exc: BaseException) -> None:
            self.browse_button.setEnabled(True)
            self.failed.emit(error_sentence(exc))

        self.browse_button.setEnabled(False)
        self.state.tasks.run(work, done, fail, key=PROBE_KEY)
