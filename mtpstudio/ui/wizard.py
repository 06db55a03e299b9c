"""The wizard: seven pages over one Plan, File actions (new/open/save), remembered state.

Plan flow: ``MtpWizard`` owns a ``WizardState`` (the Plan, the detection report, the model
header) and a ``TaskManager``. Every page gets the state; it fills its widgets from
``state.plan`` when shown (``initializePage``) and writes its slice back with
``state.update({...})``, which validates and replaces the Plan and emits ``plan_changed``.
Detection and GGUF reading run as tasks started here; pages follow ``report_changed`` /
``model_changed``. Finishing or closing saves the Plan and the window geometry to the XDG
config dir; the next start restores them.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType

from PySide6.QtCore import QByteArray, QRect, QSize, Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QFileDialog,
    QFrame,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
    QWizard,
)

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.io import load_plan, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.usecases.model_files import load_model_info
from mtpstudio.core.usecases.workbench import detect_for
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.icons import app_icon
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.pages.budget import BudgetPage
from mtpstudio.ui.pages.desktop import DesktopPage
from mtpstudio.ui.pages.engine import EnginePage
from mtpstudio.ui.pages.hardware import HardwarePage
from mtpstudio.ui.pages.launch import LaunchPage
from mtpstudio.ui.pages.model import ModelPage
from mtpstudio.ui.pages.service import ServicePage
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.state import Detector, ModelLoader, SpeedLoader, WizardState
from mtpstudio.ui.tasks import TaskManager

MINIMUM_SIZE = QSize(800, 520)
DEFAULT_SIZE = QSize(1180, 820)
TITLE_BAR_ALLOWANCE = 40  # the window manager's frame, before the window is shown
PLAN_FILTER = "mtpstudio plans (*.json);;All files (*)"


class PageId(IntEnum):
    """The pages in order (design.md §2)."""

    HARDWARE = 0
    MODEL = 1
    ENGINE = 2
    BUDGET = 3
    DESKTOP = 4
    SERVICE = 5
    LAUNCH = 6


PAGE_TITLES = MappingProxyType(
    {
        PageId.HARDWARE: "Hardware",
        PageId.MODEL: "Model",
        PageId.ENGINE: "Engine & options",
        PageId.BUDGET: "VRAM budget",
        PageId.DESKTOP: "Desktop VRAM",
        PageId.SERVICE: "Service",
        PageId.LAUNCH: "Launch & benchmark",
    }
)


def scroll_page(page: QWidget) -> QScrollArea:
    """Put ``page``'s content in a scroll area, so a page taller than a small screen scrolls
    instead of pushing the wizard's buttons off it. The page's layout (and so its widgets)
    moves onto the scrolled body; the page keeps its type and attributes."""
    body = QWidget()
    layout = page.layout()
    if layout is not None:
        body.setLayout(layout)  # takes the layout off the page, reparents its widgets
    scroll = QScrollArea(page)
    scroll.setObjectName("page_scroll")
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    scroll.setWidget(body)
    outer = QVBoxLayout(page)
    outer.setContentsMargins(0, 0, 0, 0)
    outer.addWidget(scroll)
    return scroll


def default_detector(plan: Callable[[], Plan] | None = None) -> Detector:
    """This machine's detection (NVML, sysfs, /proc, engines); with ``plan`` (read when
    detection starts) it also probes the engine binary the plan names, as ``mtpstudio plan``
    does."""
    return lambda: detect_for(plan() if plan is not None else Plan())


class MtpWizard(QWizard):
    """The mtpstudio window: a QWizard whose pages edit one Plan.

    Args:
        plan: the Plan to start from; None restores the last one (or the demo default).
        detector: returns a DetectionReport; runs as a background task (tests inject one).
        store: where state is remembered (default: the XDG config dir).
        remember: restore and save the last plan and window geometry (off for screenshots).
        model_loader: reads a model header for a ModelChoice (tests may inject one).
        speed_loader: reads this computer's rates and stored runs for the speed estimate
            (default: probe once, cached; tests inject the assumed desktop).
    """

    def __init__(
        self,
        plan: Plan | None = None,
        *,
        detector: Detector | None = None,
        store: StateStore | None = None,
        remember: bool = True,
        model_loader: ModelLoader = load_model_info,
        speed_loader: SpeedLoader | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.store = store if store is not None else StateStore()
        self.remember = remember
        self.plan_file: Path | None = None
        self.last_error: str | None = None
        self.last_finished: str | None = None
        self.tasks = TaskManager(parent=self)
        restored = self.store.load_plan() if remember and plan is None else None
        self.state = WizardState(
            plan or restored or Plan(),
            self.tasks,
            detector or default_detector(lambda: self.state.plan),
            model_loader,
            self,
        )

        self.setWindowIcon(app_icon())
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setPixmap(QWizard.WizardPixmap.LogoPixmap, app_icon().pixmap(48, 48))
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        self.setOption(QWizard.WizardOption.HaveCustomButton1, True)
        self.setMinimumSize(MINIMUM_SIZE)
        self.resize(DEFAULT_SIZE)

        self.hardware_page = HardwarePage(self.state)
        self.model_page = ModelPage(self.state)
        self.engine_page = EnginePage(self.state)
        self.budget_page = BudgetPage(self.state)
        self.desktop_page = DesktopPage(self.state)
        self.service_page = ServicePage(self.state)
        self.launch_page = LaunchPage(self.state, self.tasks)
        for page_id, page in zip(PageId, self.pages(), strict=True):
            scroll_page(page)
            self.setPage(int(page_id), page)

        self.steps = QLabel(self)
        self.steps.setTextFormat(Qt.TextFormat.RichText)
        self.steps.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.steps.setMinimumWidth(200)
        self.steps.setContentsMargins(12, 16, 12, 12)
        self.steps.setStyleSheet("background: #1f2937; color: #e5e7eb;")
        self.setSideWidget(self.steps)

        self._build_file_menu()
        self.currentIdChanged.connect(self._on_current_id_changed)
        self.state.plan_changed.connect(lambda _: self._update_title())
        self._update_title()
        self._on_current_id_changed(self.startId())
        if remember:
            self._restore_window()
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is not None:
            self.fit_to(screen.availableGeometry())
        self.state.refresh_detection()
        self.state.load_model()
        self.state.load_speed_inputs(speed_loader)

    def pages(self) -> list[PlanPage]:
        return [
            self.hardware_page,
            self.model_page,
            self.engine_page,
            self.budget_page,
            self.desktop_page,
            self.service_page,
            self.launch_page,
        ]

    @property
    def plan(self) -> Plan:
        return self.state.plan

    # -- the File menu ------------------------------------------------------------------------

    def _build_file_menu(self) -> None:
        self.action_new = QAction("New plan", self)
        self.action_new.setShortcut(QKeySequence.StandardKey.New)
        self.action_open = QAction("Open plan…", self)
        self.action_open.setShortcut(QKeySequence.StandardKey.Open)
        self.action_save = QAction("Save plan", self)
        self.action_save.setShortcut(QKeySequence.StandardKey.Save)
        self.action_save_as = QAction("Save plan as…", self)
        self.action_save_as.setShortcut(QKeySequence.StandardKey.SaveAs)
        self.file_menu = QMenu("Plan", self)
        for action in (self.action_new, self.action_open, self.action_save, self.action_save_as):
            self.file_menu.addAction(action)
            self.addAction(action)  # shortcuts work anywhere in the window
        button = self.button(QWizard.WizardButton.CustomButton1)
        self.setButtonText(QWizard.WizardButton.CustomButton1, "Plan")
        if isinstance(button, QPushButton):
            button.setMenu(self.file_menu)
        button.setToolTip("New, open and save plan files")
        self.setButtonLayout(
            [
                QWizard.WizardButton.CustomButton1,
                QWizard.WizardButton.Stretch,
                QWizard.WizardButton.BackButton,
                QWizard.WizardButton.NextButton,
                QWizard.WizardButton.FinishButton,
                QWizard.WizardButton.CancelButton,
            ]
        )
        self.button(QWizard.WizardButton.FinishButton).setToolTip(
            f"Save the plan (in {self.store.plan_path}, opened again next time) and close."
        )
        self.action_new.triggered.connect(self.new_plan)
        self.action_open.triggered.connect(self._on_open_triggered)
        self.action_save.triggered.connect(self._on_save_triggered)
        self.action_save_as.triggered.connect(self._on_save_as_triggered)

    def ask_open_path(self) -> Path | None:
        """The open dialog (tests replace this method)."""
        name, _ = QFileDialog.getOpenFileName(self, "Open a plan", self._dialog_dir(), PLAN_FILTER)
        return Path(name) if name else None

    def ask_save_path(self) -> Path | None:
        """The save dialog (tests replace this method)."""
        start = (
            str(self.plan_file) if self.plan_file else str(Path(self._dialog_dir()) / "plan.json")
        )
        name, _ = QFileDialog.getSaveFileName(self, "Save the plan", start, PLAN_FILTER)
        return Path(name) if name else None

    def _dialog_dir(self) -> str:
        return str(self.plan_file.parent) if self.plan_file else str(Path.home())

    def show_error(self, title: str, problem: BaseException | str) -> None:
        """One sentence in a message box, never a traceback."""
        sentence = problem if isinstance(problem, str) else error_sentence(problem)
        self.last_error = sentence
        QMessageBox.warning(self, title, sentence)

    def new_plan(self) -> None:
        """Start again from the demo default."""
        self.plan_file = None
        self.state.set_plan(Plan())
        self.state.normalize_device()
        self.restart()
        self._update_title()

    def open_plan(self, path: Path) -> bool:
        try:
            plan = load_plan(path)
        except MtpStudioError as exc:
            self.show_error("Cannot open the plan", exc)
            return False
        self.plan_file = path
        self.state.set_plan(plan)
        self.state.normalize_device()
        self._refresh_current_page()
        self._update_title()
        return True

    def save_plan_to(self, path: Path) -> bool:
        try:
            save_plan(self.state.plan, path)
        except MtpStudioError as exc:
            self.show_error("Cannot save the plan", exc)
            return False
        self.plan_file = path
        self._update_title()
        return True

    def _on_open_triggered(self) -> None:
        path = self.ask_open_path()
        if path is not None:
            self.open_plan(path)

    def _on_save_triggered(self) -> None:
        if self.plan_file is not None:
            self.save_plan_to(self.plan_file)
        else:
            self._on_save_as_triggered()

    def _on_save_as_triggered(self) -> None:
        path = self.ask_save_path()
        if path is not None:
            self.save_plan_to(path)

    # -- window state -----------------------------------------------------------------------------

    def fit_to(self, available: QRect) -> None:
        """Keep the window inside ``available`` (the screen less its panels): on a 1366x768
        laptop the default size is taller than the screen, and Back/Next/Cancel would be cut
        off. The pages scroll (``scroll_page``), so every control stays reachable."""
        frame = self.frameGeometry().height() - self.geometry().height()
        frame = frame if frame > 0 else TITLE_BAR_ALLOWANCE
        room = QSize(available.width(), max(1, available.height() - frame))
        self.setMinimumSize(MINIMUM_SIZE.boundedTo(room))
        self.resize(self.size().boundedTo(room))
        x = min(max(self.x(), available.left()), available.right() - self.width() + 1)
        y = min(max(self.y(), available.top()), available.bottom() - self.height() - frame + 1)
        self.move(max(x, available.left()), max(y, available.top()))

    def _update_title(self) -> None:
        self.setWindowTitle(f"mtpstudio — {self.plan_file.name}" if self.plan_file else "mtpstudio")

    def _restore_window(self) -> None:
        geometry = self.store.load_geometry()
        if geometry:
            self.restoreGeometry(QByteArray(geometry))
        saved_file = self.store.load_window().get("plan_file")
        if saved_file and Path(saved_file).is_file():
            self.plan_file = Path(saved_file)
            self._update_title()

    def save_state(self) -> None:
        """Remember the Plan and the window geometry (atomic writes; errors are logged only)."""
        if not self.remember:
            return
        try:
            self.store.save_plan(self.state.plan)
            self.store.save_window(bytes(self.saveGeometry().data()), self.plan_file)
        except MtpStudioError as exc:
            self.last_error = error_sentence(exc)

    def done(self, result: int) -> None:
        if not self.launch_page.release_server():  # asks about a running server
            return
        self.save_state()
        if result == QWizard.DialogCode.Accepted and self.remember:
            self.tell_finished(self.finished_text())
        self.tasks.shutdown()
        super().done(result)

    def finished_text(self) -> str:
        """Where Finish left the plan, and how to use it from the command line."""
        text = f"The plan is saved in {self.store.plan_path}; mtpstudio opens it next time."
        if self.plan_file is not None:
            text += (
                f" {self.plan_file} holds it as of your last Save (Plan ▸ Save updates it); "
                f"the command line takes it as `mtpstudio launch --plan {self.plan_file}`."
            )
        else:
            text += (
                " For the command line, save a copy with Plan ▸ Save plan as… and pass it as "
                "`mtpstudio launch --plan FILE`."
            )
        return text

    def tell_finished(self, text: str) -> None:
        """Say where the plan went (tests replace this method)."""
        self.last_finished = text
        QMessageBox.information(self, "Plan saved", text)

    # -- navigation -------------------------------------------------------------------------------

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Enter in a number or text box commits the value and stays on the page (QDialog
        would press Next: one Enter in page 4's Context box jumped to page 5)."""
        editing = isinstance(QApplication.focusWidget(), QAbstractSpinBox | QLineEdit)
        if editing and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()
            return
        super().keyPressEvent(event)

    def _refresh_current_page(self) -> None:
        page = self.currentPage()
        if isinstance(page, PlanPage):
            page.refresh()

    def _on_current_id_changed(self, current: int) -> None:
        rows = []
        for page_id, title in PAGE_TITLES.items():
            number = int(page_id) + 1
            if page_id == current:
                rows.append(f"<p style='margin:6px 0; color:#ffffff'><b>{number}. {title}</b></p>")
            else:
                colour = "#9ca3af" if page_id > current else "#d1d5db"
                rows.append(f"<p style='margin:6px 0; color:{colour}'>{number}. {title}</p>")
        self.steps.setText("<p><b>mtpstudio</b></p>" + "".join(rows))
