"""The Qt application entry: builds the main window around a Plan."""

from __future__ import annotations

import sys
from importlib import resources

from PySide6.QtGui import QFont, QIcon
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.model_source import load_model_info
from mtpstudio.core.plan import Plan
from mtpstudio.core.summary import plan_report


def app_icon() -> QIcon:
    """The application icon from the packaged resources."""
    icon_file = resources.files("mtpstudio.resources").joinpath("icons/mtpstudio.svg")
    with resources.as_file(icon_file) as path:
        return QIcon(str(path))


class PlanWindow(QMainWindow):
    """A first window: the model summary and the options of one Plan (the wizard comes later)."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.setWindowTitle("mtpstudio")
        self.setWindowIcon(app_icon())
        self.setMinimumSize(720, 520)
        central = QWidget(self)
        layout = QVBoxLayout(central)
        self.heading = QLabel(
            "<b>mtpstudio</b> — the demo plan. The step-by-step wizard arrives in a later release."
        )
        layout.addWidget(self.heading)
        self.report = QPlainTextEdit(central)
        self.report.setReadOnly(True)
        self.report.setFont(QFont("monospace"))
        layout.addWidget(self.report)
        self.setCentralWidget(central)
        self.show_plan(plan)

    def show_plan(self, plan: Plan) -> None:
        """Fill the report with the plan's model summary and options, or the error."""
        self.plan = plan
        try:
            text = plan_report(plan, load_model_info(plan.model))
        except MtpStudioError as exc:
            text = f"Cannot read the model: {exc}\n{exc.hint or ''}"
        self.report.setPlainText(text)


def run_app(plan: Plan | None = None) -> int:
    """Start Qt, show the window for ``plan`` (the demo default when None), run the loop."""
    app = QApplication.instance() or QApplication(sys.argv)
    assert isinstance(app, QApplication)
    app.setApplicationName("mtpstudio")
    app.setDesktopFileName("io.github.mtpstudio")
    window = PlanWindow(plan or Plan())
    window.show()
    return app.exec()
