"""The Qt application entry: starts Qt and shows the wizard (or renders its screenshots)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QWidget

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.icons import app_icon
from mtpstudio.ui.smoke import arm_smoke_screenshot

__all__ = ["app_icon", "demo_plan", "ensure_application", "run_app", "run_screenshots"]


GUI_SWITCH_INTERVAL_S = 0.0005
"""How long a thread may hold Python's interpreter lock before another gets it. A plan's
evaluation (the engine's fit and the CUDA replays: about 0.1 s on a CPU-offload plan) runs on
a pool thread while a slider is dragged; with Python's 5 ms default the window's thread waited
for it on every event (a 60 ms slider step), with 0.5 ms it answers within a frame."""


def ensure_application() -> QApplication:
    """The running QApplication, created (with mtpstudio's name and icon) when there is none."""
    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
    app = QApplication.instance()
    if app is None:
        app = QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName("mtpstudio")
    app.setOrganizationName("mtpstudio")
    app.setDesktopFileName("io.github.mtpstudio")
    app.setWindowIcon(app_icon())
    return app


def demo_plan() -> Plan:
    """The demo: the demo model card on the catalogue RTX 4070 SUPER, with the published MTP
    setup when the memory model says it fits that card (else the Plan's defaults)."""
    from mtpstudio.core.usecases.workbench import Workbench, load_model_info

    plan = Plan(device=DEFAULT_GPU_CARD)
    workbench = Workbench()  # no detection: the catalogue card is the machine
    try:
        workbench.set_model(load_model_info(plan.model))
        return workbench.demo_defaults(plan, frozenset())[0]
    except MtpStudioError:
        return plan  # the card's header cannot be built: the plain defaults still work


def run_app(plan: Plan | None = None, *, demo: bool = False) -> int:
    """Show the wizard for ``plan`` (None: the last plan, or the demo default) and run Qt."""
    from mtpstudio.ui.wizard import MtpWizard

    app = ensure_application()
    if demo and plan is None:
        plan = demo_plan()
    wizard = MtpWizard(plan)
    _close_on_signals(wizard)
    wizard.show()
    arm_smoke_screenshot(wizard)  # hidden test hook (MTPSTUDIO_SMOKE_SCREENSHOT)
    app.exec()
    return 0


def _close_on_signals(wizard: QWidget) -> None:
    """Ctrl+C or SIGTERM closes the wizard the normal way (its state is saved)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: wizard.close())
    ticker = QTimer(wizard)  # lets Python run its signal handlers while Qt waits
    ticker.timeout.connect(lambda: None)
    ticker.start(200)


def run_screenshots(folder: Path, plan: Plan | None = None) -> list[Path]:
    """Render every page with demo data to ``folder/NN-<page>.png``; returns the files."""
    from mtpstudio.ui.screenshots import take_screenshots

    ensure_application()
    return take_screenshots(folder, plan or demo_plan())
