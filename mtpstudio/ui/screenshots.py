"""Render every wizard page to PNG (``mtpstudio gui --demo --screenshots DIR``)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication, QSize

from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.speed.inputs import SpeedInputs
from mtpstudio.ui.state import Detector
from mtpstudio.ui.wizard import MtpWizard

SCREENSHOT_SIZE = QSize(1180, 820)
SETTLE_TIMEOUT_S = 120.0


def take_screenshots(
    folder: Path,
    plan: Plan,
    detector: Detector | None = None,
    size: QSize = SCREENSHOT_SIZE,
) -> list[Path]:
    """Walk the wizard page by page (waiting for detection and the model) and grab each one.

    Nothing is remembered: the saved plan and window geometry are neither read nor written.
    Speeds are estimated for the stated desktop (``SpeedInputs()``), not this computer, so
    the pictures do not hang on the machine that renders them.
    """
    folder.mkdir(parents=True, exist_ok=True)
    wizard = MtpWizard(plan, detector=detector, remember=False, speed_loader=SpeedInputs)
    wizard.resize(size)
    wizard.show()
    files: list[Path] = []
    try:
        for index, page in enumerate(wizard.pages()):
            if index:
                wizard.next()
            wizard.tasks.wait_idle(SETTLE_TIMEOUT_S)
            if wizard.currentPage() is not page:
                raise RuntimeError(f"the wizard did not reach the {page.slug} page")
            page.refresh()
            for _ in range(3):
                QCoreApplication.processEvents()
            path = folder / f"{index + 1:02d}-{page.slug}.png"
            if not wizard.grab().save(str(path), "PNG"):
                raise OSError(f"cannot write {path}")
            files.append(path)
    finally:
        wizard.done(0)
        wizard.deleteLater()
    return files
