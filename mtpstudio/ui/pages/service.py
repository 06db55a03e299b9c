"""Service page: the unit, environment file and launch script (highlighted) with what each flag
does; Export service file… (the bytes of ``mtpstudio export-unit``); install as a user or system
unit (``mtpstudio apply unit``'s core calls); start / stop / status / journal of the installed unit.
"""

from __future__ import annotations

import getpass
import shlex
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QSignalBlocker, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.desktop.helper_setup import SetupFirstTransport
from mtpstudio.core.desktop.install import FilePreview, HelperAnswer, InstallPlan, UserInstallResult
from mtpstudio.core.desktop.session_files import SessionSettings
from mtpstudio.core.errors import MtpStudioError, ServerError
from mtpstudio.core.plan.choices import ShortVram
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.server.systemd import UnitRef, UnitStatus
from mtpstudio.core.service.export import ServiceSet
from mtpstudio.core.service.render import UnitScope
from mtpstudio.core.service.service_files import EngineNotHereError, RootAccountError, ServiceFiles
from mtpstudio.core.usecases.desktop import desktop_facts
from mtpstudio.core.usecases.server_units import (
    journal_tail,
    require_installed,
    start_unit,
    stop_unit,
    unit_status,
)
from mtpstudio.core.usecases.service import (
    check_exportable,
    export_files,
    install_files,
    write_service_set,
)
from mtpstudio.core.usecases.system_install import (
    apply_plan,
    describe_written,
    install_user_unit,
    preview,
    setup_note,
    system_unit_plan,
)
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.system_access import SystemAccess, install_words
from mtpstudio.ui.tasks import CancelToken
from mtpstudio.ui.widgets.action_panel import ActionPanel
from mtpstudio.ui.widgets.code_view import CodeView
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.install_preview import InstallPreview

ACTION_KEY = "service-action"
UNIT_FILTER = "systemd units (*.service);;All files (*)"
JOURNAL_LINES = 80
SCOPES = (
    (UnitScope.SYSTEM, "System unit — starts at boot, runs as an account"),
    (UnitScope.USER, "User unit — runs in your session, no root needed"),
)
SHORT_VRAM = (
    (ShortVram.REFUSE, "Do not start; say what holds the memory"),
    (ShortVram.WARN, "Start all the same, and say so"),
    (ShortVram.FIT, "Start with the engine's fit instead, and say so"),
)
FILE_TABS = (
    ("unit", "Unit", "ini"),
    ("env", "Environment file", "ini"),
    ("script", "Script", "shell"),
)


class ServicePage(PlanPage):
    """The rendered service files, export, install, and control of the installed unit.

    ``system`` says how the system is reached (tests pass a temporary root and a runner).
    """

    slug = "service"

    def __init__(
        self, state: WizardState, parent: QWidget | None = None, system: SystemAccess | None = None
    ) -> None:
        super().__init__(state, parent)
        self.system = system or SystemAccess()
        self.setTitle("Service")
        self.setSubTitle(
            "Run the server as a systemd service with the planned command line: read the "
            "files, export them, or install and start the unit."
        )
        self.rendered: ServiceFiles | None = None
        self._session: SessionSettings | None = None  # the installed desktop's, read once
        self.pending: (
            tuple[UnitScope, ServiceFiles, InstallPlan | None, list[FilePreview]] | None
        ) = None
        self.pending_setup = False  # the pending system install sets the helper up first
        self.last_export: Path | None = None
        self.last_set: ServiceSet | None = None
        self.last_status: UnitStatus | None = None

        self.notice = Notice(self)
        self.scope_combo = QComboBox(self)
        for scope, label in SCOPES:
            self.scope_combo.addItem(label, scope.value)
        self.account_edit = QLineEdit(self)
        self.account_edit.setPlaceholderText(getpass.getuser())
        self.account_edit.setToolTip("The account a system unit runs as (User=); default: you.")
        self.short_combo = QComboBox(self)
        for choice, label in SHORT_VRAM:
            self.short_combo.addItem(label, choice.value)
        self.short_combo.setToolTip(
            "What the check before the engine starts does when a GPU has less free memory than "
            "the plan needs (plan: outputs.short_vram); it writes one line in the journal "
            "either way."
        )
        self.name_edit = QLineEdit(self)
        self.name_edit.setToolTip(
            "The unit's name without .service (plan: outputs.service_name). Letters, digits "
            "and : - _ . \\ @."
        )

        self.tabs = QTabWidget(self)
        self.views: dict[str, CodeView] = {}
        for key, title, syntax in FILE_TABS:
            view = CodeView(syntax, self)
            self.views[key] = view
            self.tabs.addTab(view, title)
        self.flags = QTableWidget(0, 3, self)
        self.flags.setHorizontalHeaderLabels(["Flag", "Plan setting", "What it does"])
        self.flags.verticalHeader().setVisible(False)
        self.flags.setWordWrap(True)
        self.flags.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.flags.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.flags.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.sectionResized.connect(lambda *_: self._fit_flag_rows())
        self.tabs.addTab(self.flags, "What each flag does")
        self.tabs.currentChanged.connect(lambda _: self._fit_flag_rows())
        self.where_label = QLabel(self)
        self.where_label.setWordWrap(True)
        self.where_label.setStyleSheet("color: #4b5563;")

        self.export_button = QPushButton("Export service file…", self)
        self.export_button.setToolTip(
            "Save the unit with its environment file and a script that installs both (the same "
            "bytes as `mtpstudio export-unit`); the message says the exact commands."
        )
        self.install_button = QPushButton("Install unit…", self)
        self.preview_box = InstallPreview(self)
        self.preview_box.visibility_changed.connect(self._on_preview_shown)
        self.start_button = QPushButton("Start", self)
        self.stop_button = QPushButton("Stop", self)
        self.status_button = QPushButton("Status", self)
        self.journal_button = QPushButton("Journal", self)
        self.unit_label = QLabel(self)
        self.unit_label.setWordWrap(True)
        self.output = CodeView(None, self)
        self.output.setPlaceholderText("Status and journal of the installed unit show here.")
        self.action = ActionPanel(state.tasks, self)
        self._build_layout()

        self.scope_combo.currentIndexChanged.connect(self._on_scope_changed)
        self.account_edit.editingFinished.connect(self._on_account_changed)
        self.name_edit.editingFinished.connect(self._on_name_edited)
        self.short_combo.currentIndexChanged.connect(self._on_short_changed)
        self.export_button.clicked.connect(self._on_export_clicked)
        self.install_button.clicked.connect(self.prepare_install)
        self.preview_box.confirmed.connect(self.install_pending)
        self.preview_box.dismissed.connect(self._on_preview_dismissed)
        self.start_button.clicked.connect(lambda: self.control("start"))
        self.stop_button.clicked.connect(lambda: self.control("stop"))
        self.status_button.clicked.connect(lambda: self.control("status"))
        self.journal_button.clicked.connect(lambda: self.control("journal"))
        self.action.idle.connect(lambda: self._enable(True))
        state.model_changed.connect(lambda _: self._on_inputs_changed())
        state.report_changed.connect(lambda _: self._on_inputs_changed())

    def _build_layout(self) -> None:
        form = QFormLayout()
        form.addRow("Install as", self.scope_combo)
        form.addRow("Runs as", self.account_edit)
        form.addRow("Service name", self.name_edit)
        form.addRow("Too little VRAM at start", self.short_combo)

        # The preview takes the place of the files while it is shown: room for its diff.
        self.files_stack = QStackedWidget(self)
        self.files_stack.addWidget(self.tabs)
        self.files_stack.addWidget(self.preview_box)
        files = QVBoxLayout()
        files.addLayout(form)
        files.addWidget(self.files_stack, 1)
        files.addWidget(self.where_label)

        out_box = QGroupBox("Export and install", self)
        o = QVBoxLayout(out_box)
        row = QHBoxLayout()
        row.addWidget(self.export_button)
        row.addWidget(self.install_button)
        o.addLayout(row)

        unit_box = QGroupBox("The installed unit", self)
        u = QVBoxLayout(unit_box)
        u.addWidget(self.unit_label)
        grid = QGridLayout()
        grid.addWidget(self.start_button, 0, 0)
        grid.addWidget(self.stop_button, 0, 1)
        grid.addWidget(self.status_button, 1, 0)
        grid.addWidget(self.journal_button, 1, 1)
        u.addLayout(grid)
        u.addWidget(self.output, 1)

        side = QVBoxLayout()
        side.addWidget(out_box)
        side.addWidget(self.action)  # what Export and Install said, beside their buttons
        side.addWidget(unit_box, 1)

        columns = QHBoxLayout()
        columns.addLayout(files, 3)
        columns.addLayout(side, 2)
        layout = QVBoxLayout(self)
        layout.addWidget(self.notice)
        layout.addLayout(columns, 1)

    # -- inputs -------------------------------------------------------------------------------

    @property
    def scope(self) -> UnitScope:
        return UnitScope(self.scope_combo.currentData())

    def set_scope(self, scope: UnitScope) -> None:
        self.scope_combo.setCurrentIndex(self.scope_combo.findData(scope.value))

    @property
    def account(self) -> str | None:
        return self.account_edit.text().strip() or None

    def unit_ref(self) -> UnitRef:
        return UnitRef.of(self.state.plan.outputs.service_name, self.scope is UnitScope.USER)

    def render_files(self, *, preview: bool = True) -> ServiceFiles | None:
        """The files of the current Plan as the other pages resolved it (export's rendering;
        None until the model is read)."""
        resolved = self.state.resolved()
        if resolved is None:
            return None
        return export_files(resolved, self.scope, self.account,
                            session=self.session_settings(resolved.pctx.machine.igpu_card),
                            preview=preview)  # fmt: skip

    def session_settings(self, igpu_card: str | None) -> SessionSettings:
        """What exported session files run: the installed Plasma's commands, as `render` reads
        them (the package database and session files are read once per page)."""
        if self._session is None or self._session.igpu_card != igpu_card:
            self._session = desktop_facts(None).settings(igpu_card)
        return self._session

    # -- filling ------------------------------------------------------------------------------

    def _refresh(self) -> None:
        self.name_edit.setText(self.state.plan.outputs.service_name)
        with QSignalBlocker(self.short_combo):
            self.short_combo.setCurrentIndex(
                self.short_combo.findData(self.state.plan.outputs.short_vram.value)
            )
        self.account_edit.setEnabled(self.scope is UnitScope.SYSTEM)
        try:
            self.rendered = self.render_files()
        except MtpStudioError as exc:
            self.rendered = None
            self._show_files(None, f"No service files: {error_sentence(exc)}")
            return
        if self.rendered is None:
            reason = self.state.model_error or "the model header has not been read yet"
            self._show_files(None, f"No service files yet: {reason}")
            return
        self._show_files(self.rendered, None)

    def _show_files(self, rendered: ServiceFiles | None, problem: str | None) -> None:
        for key, view in self.views.items():
            view.set_text(rendered.files[key].text if rendered is not None else "")
        self.flags.setRowCount(0)
        ready = rendered is not None
        for button in (self.export_button, self.install_button):
            button.setEnabled(ready and not self.action.running)
        if rendered is None:
            self.notice.show_text(problem, Tone.BAD if problem else Tone.INFO)
            self.where_label.clear()
            return
        self.flags.setRowCount(len(rendered.spec.flags))
        for row, note in enumerate(rendered.spec.flags):
            for column, text in enumerate((shlex.join(note.words), note.setting, note.explanation)):
                item = QTableWidgetItem(text)
                item.setToolTip(note.explanation)
                self.flags.setItem(row, column, item)
        self._fit_flag_rows()
        warnings = [m.removeprefix("warning: ") for m in rendered.messages]
        notes = " ".join(w[:1].upper() + w[1:] + ("" if w.endswith(".") else ".") for w in warnings)
        if self.state.plan.model.path is None:
            notes = (
                f"The plan uses the demo card {self.state.plan.model.card}: these files show "
                "what its unit would look like. Export and Install need a model file on this "
                "computer: open your GGUF on the Model page. " + notes
            ).strip()
            self.notice.show_text(notes, Tone.INFO)
        else:
            self.notice.show_text(f"Note: {notes}" if notes else None, Tone.WARN)
        where = [f"{f.name} → {f.install_path}" for f in self._shown_files(rendered)]
        self.where_label.setText("Installs as: " + " · ".join(where))
        unit = self.unit_ref()
        where_unit = "user" if unit.user else "system"
        self.unit_label.setText(f"{unit.name} ({where_unit} unit)")

    def _fit_flag_rows(self) -> None:
        """Row heights follow the wrapped explanations (after the layout settles)."""
        QTimer.singleShot(0, self.flags.resizeRowsToContents)

    @staticmethod
    def _shown_files(rendered: ServiceFiles) -> list[RenderedFile]:
        return [rendered.files[key] for key, _, _ in FILE_TABS]

    # -- plan and inputs ------------------------------------------------------------------------

    def _on_name_edited(self) -> None:
        name = self.name_edit.text().strip()
        changed = name != self.state.plan.outputs.service_name
        if changed and self.apply({"outputs.service_name": name}) is not None:
            self.refresh()

    def _on_short_changed(self) -> None:
        choice = self.short_combo.currentData()
        changed = choice != self.state.plan.outputs.short_vram.value
        if changed and self.apply({"outputs.short_vram": choice}) is not None:
            self.refresh()

    def plan_refused(self, sentence: str | None) -> None:
        if sentence:
            self.action.outcome.show_outcome(sentence, Tone.BAD)

    def _on_scope_changed(self) -> None:
        self.preview_box.hide_preview()
        self.pending = None
        self.action.outcome.clear()  # what was said about the other scope no longer applies
        self.refresh()

    def _on_account_changed(self) -> None:
        self.refresh()

    def _on_inputs_changed(self) -> None:
        if self.is_current():
            self.refresh()

    # -- export -------------------------------------------------------------------------------

    def ask_export_path(self) -> Path | None:
        """The save dialog (tests replace this method)."""
        start = str(Path.home() / f"{self.state.plan.outputs.service_name}.service")
        name, _ = QFileDialog.getSaveFileName(self, "Export the service file", start, UNIT_FILTER)
        return Path(name) if name else None

    def _on_export_clicked(self) -> None:
        if not self.check_export():
            return
        path = self.ask_export_path()
        if path is not None:
            self.export_unit(path)

    def check_export(self) -> bool:
        """What export refuses (a partial model, no engine, root), said before the dialog."""
        if self.state.context() is None:
            return False
        try:
            resolved = self.state.resolved()
            assert resolved is not None  # the model is read
            check_exportable(resolved, self.scope, self.account)
        except MtpStudioError as exc:
            self.action.outcome.show_outcome(
                f"Not exported: {self._gui_words(exc)}", Tone.BAD, repr(exc)
            )
            return False
        return True

    def _gui_words(self, exc: MtpStudioError) -> str:
        """The core's sentence with what to do here, in the window's words."""
        if isinstance(exc, EngineNotHereError):
            return (
                f"{exc}. Pick the engine on the Engine & options page (Browse… opens a "
                "llama-server), or build one: the page says how."
            )
        if isinstance(exc, RootAccountError):
            return (
                f"{exc}. Name the account it runs as under 'Runs as' (your own, or a "
                "dedicated one such as 'llama')."
            )
        return error_sentence(exc)

    def export_unit(self, path: Path) -> bool:
        """Write the unit to ``path`` and its env file and install script beside it, exactly
        as ``mtpstudio export-unit -o PATH`` does."""
        try:
            out = self.render_files(preview=False)
            if out is None:
                return False
            files = dict(out.files)
            files["unit"] = replace(files["unit"], name=path.name)
            written = write_service_set(files, self.scope, path.parent)
        except MtpStudioError as exc:
            self.action.outcome.show_outcome(
                f"Not exported: {self._gui_words(exc)}", Tone.BAD, repr(exc)
            )
            return False
        except OSError as exc:
            self.action.outcome.show_outcome(
                f"Not exported: cannot write {path}: {exc.strerror or exc}.", Tone.BAD, repr(exc)
            )
            return False
        self.last_export = path
        self.last_set = written
        commands = "; then ".join(c for c in written.commands[:2])
        self.action.outcome.show_outcome(
            f"Wrote {path.name}, {written.files['env'].name} and {written.files['install'].name} "
            f"to {path.parent}. Install and start it: {commands}.",
            Tone.GOOD,
            "\n".join([written.message(), *out.messages]),
        )
        return True

    # -- install --------------------------------------------------------------------------------

    def prepare_install(self) -> None:
        """Render what ``apply unit`` installs and show the files against what is there."""
        if self.state.context() is None:
            return
        scope = self.scope
        self.action.outcome.clear()
        helper = self.system.helper_state() if scope is UnitScope.SYSTEM else None
        problem = helper.pkexec_problem() if helper is not None else None
        if problem is not None:
            self.action.outcome.show_outcome(
                f"Cannot install a system unit: {error_sentence(problem)} Or choose 'User unit' "
                "under Install as (no password needed), or Export the service files and "
                "install them yourself.",
                Tone.BAD,
            )
            return
        try:
            resolved = self.state.resolved()
            assert resolved is not None  # the model is read
            out = install_files(resolved, scope, self.account)
        except MtpStudioError as exc:
            self.action.outcome.show_error(exc, "Cannot install: ")
            return
        if scope is UnitScope.USER:
            plan = None
            shown = [out.files["env"], out.files["unit"]]
            root = None
            title = "Files to install: user unit"
            action = "Install"
            notes = ["Written to your own folders; then `systemctl --user daemon-reload`."]
        else:
            assert helper is not None
            try:
                plan = system_unit_plan(out.files, self.system.root)
            except MtpStudioError as exc:
                self.action.outcome.show_error(exc, "Cannot install: ")
                return
            shown = list(plan.files)
            root = self.system.root
            title = "Files to install: system unit"
            action = install_words(helper) if root is None or helper.needs_setup else "Install"
            notes = [f"Written {self.system.via}."]
            if helper.needs_setup:
                notes.insert(0, setup_note(helper))
        notes += [m[:1].upper() + m[1:] + ("" if m.endswith(".") else ".") for m in out.messages]
        previews = preview(shown, root)
        replaced = [p for p in previews if p.state == "changed"]
        if replaced:
            names = ", ".join(p.path.name for p in replaced)
            notes.insert(0, f"A different {names} is installed: the diff below is what changes.")
            action = action.replace("Install", "Replace", 1)
        self.pending = (scope, out, plan, replaced)
        self.pending_setup = helper is not None and helper.needs_setup
        self.preview_box.show_preview(title, previews, notes, action)

    def _on_preview_dismissed(self) -> None:
        self.pending = None
        self.preview_box.hide_preview()
        self.action.outcome.show_outcome("Nothing was installed.", Tone.INFO)

    def install_pending(self) -> None:
        """Install the previewed files: a user unit directly, a system unit via the helper."""
        if self.pending is None:
            return
        scope, out, plan, replaced = self.pending
        if replaced and not self.ask_replace(replaced):
            self.action.outcome.show_outcome(
                "Nothing was installed: the installed version stays.", Tone.INFO
            )
            return
        self.pending = None
        setup = self.pending_setup
        runner, transport = self.system.runner, self.system.transport(setup=setup)
        unit_name = out.files["unit"].name

        def work(token: CancelToken) -> UserInstallResult | HelperAnswer:
            if plan is None:
                return install_user_unit(out.files, runner)
            return apply_plan(plan, transport)

        def done(result: UserInstallResult | HelperAnswer) -> None:
            lines = [f"{action}: {path}" for path, action in result.changes]
            if isinstance(result, UserInstallResult):
                lines.append(result.reload)
                start = f"systemctl --user enable --now {unit_name}"
            else:
                if "daemon_reload" in result.extra:
                    lines.append(f"systemctl daemon-reload: {result.extra['daemon_reload']}")
                start = f"sudo systemctl enable --now {unit_name}"
            set_up = ""
            if isinstance(transport, SetupFirstTransport) and transport.written:
                set_up = f"Set up the helper ({describe_written(transport.written)}). "
            self.action.outcome.show_outcome(
                f"{set_up}Installed the {scope.value} unit {unit_name}; Start runs it now "
                f"(at boot: `{start}`).",
                Tone.GOOD,
                "\n".join(lines),
            )

        self.preview_box.hide_preview()
        self._enable(False)
        doing = f"Installing the {scope.value} unit…"
        if setup:
            doing = (
                "Setting up the helper and installing the system unit (polkit asks for an "
                "administrator's password)…"
            )
        self.action.run(doing, work, done, key=ACTION_KEY)

    def ask_replace(self, replaced: list[FilePreview]) -> bool:
        """Ask before an installed file that differs is replaced, with its diff (tests replace
        this method)."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Replace the installed unit?")
        names = " and ".join(str(p.path) for p in replaced)
        box.setText(f"A different version of {names} is installed. Replace it?")
        box.setInformativeText(
            "The unit that runs now is overwritten by this plan's (Show Details… has the diff). "
            "The old version is kept: reverting the unit puts it back."
        )
        box.setDetailedText("\n".join(p.diff for p in replaced))
        replace = box.addButton("Replace", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is replace

    def _on_preview_shown(self, shown: bool) -> None:
        self.files_stack.setCurrentWidget(self.preview_box if shown else self.tabs)

    # -- the installed unit --------------------------------------------------------------------

    def control(self, verb: str) -> None:
        """start / stop / status / journal of the installed unit (through systemctl)."""
        try:
            unit = self.unit_ref()
        except MtpStudioError as exc:
            self.action.outcome.show_error(exc)
            return
        runner = self.system.runner
        unit_dir = None if unit.user else self.system.system_unit_dir()

        def work(token: CancelToken) -> tuple[str, UnitStatus | None]:
            try:
                require_installed(unit, unit_dir)
            except ServerError as exc:
                other = "System unit" if unit.user else "User unit"
                raise ServerError(
                    exc.args[0] if exc.args else str(exc),
                    hint=f"Install it with Install unit…, or choose '{other}' under Install as "
                    "if it was installed that way.",
                ) from None
            token.raise_if_cancelled()
            if verb == "journal":
                return journal_tail(unit, runner, JOURNAL_LINES), None
            if verb == "start":
                start_unit(unit, runner)
            elif verb == "stop":
                stop_unit(unit, runner)
            status = unit_status(unit, runner)
            return status.describe(), status

        def done(result: tuple[str, UnitStatus | None]) -> None:
            text, status = result
            if status is not None:
                self.last_status = status
                props = "\n".join(f"{k}={v}" for k, v in status.properties.items())
                self.output.set_text(f"{text}\n\n{props}\n")
                self.action.outcome.show_outcome(
                    f"{verb.capitalize()}: {text}.", Tone.GOOD if status.active else Tone.INFO
                )
            else:
                self.output.set_text(text or "(the journal has no lines for this unit)\n")
                self.action.outcome.show_outcome(
                    f"The last {JOURNAL_LINES} journal lines of {unit.name}.", Tone.INFO
                )

        labels = {"start": "Starting", "stop": "Stopping", "status": "Reading the status of",
                  "journal": "Reading the journal of"}  # fmt: skip
        self._enable(False)
        self.action.run(f"{labels[verb]} {unit.name}…", work, done, key=ACTION_KEY)

    def _enable(self, enabled: bool) -> None:
        ready = enabled and self.rendered is not None
        for button in (self.export_button, self.install_button):
            button.setEnabled(ready)
        for button in (self.start_button, self.stop_button, self.status_button,
                       self.journal_button):  # fmt: skip
            button.setEnabled(enabled)
