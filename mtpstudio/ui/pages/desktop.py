"""Desktop VRAM page: who holds VRAM for the desktop, the ways to take it back (cheapest first),
installing one through the helper (preview first), reverting, and the check after the login.

Every system change goes through ``core.desktop.install`` exactly as ``mtpstudio apply`` does: the
session's files come from ``core.desktop.session_apply.prepare_session``, the profile from
``render_nvidia_profile``; the helper is ``self.system.transport()`` (pkexec, or the helper's
code in-process against a test root).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QRadioButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.catalog.gpus import GpuCard
from mtpstudio.core.desktop.helper_setup import HelperState, SetupFirstTransport
from mtpstudio.core.desktop.install import HelperAnswer, InstallPlan
from mtpstudio.core.desktop.reclaim import DesktopUsage, ReclaimOption
from mtpstudio.core.desktop.session_check import SessionCheckReport
from mtpstudio.core.desktop.session_files import SessionVariant
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.levers import FitSuggestion
from mtpstudio.core.units import MIB
from mtpstudio.core.usecases.desktop import (
    check_session,
    desktop_usage,
    installed_groups,
    prepare_session,
    reclaim_options,
    render_nvidia_profile,
    sddm_dirs,
    session_name,
    stored_measurement,
    switch_back_name,
)
from mtpstudio.core.usecases.model_files import gpu_card
from mtpstudio.core.usecases.system_install import (
    apply_plan,
    describe_written,
    nvidia_profile_plan,
    preview,
    revert_groups,
    setup_note,
)
from mtpstudio.ui.formatting import error_sentence, mib
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState, catalogue_ids
from mtpstudio.ui.system_access import SystemAccess, install_words
from mtpstudio.ui.tasks import CancelToken
from mtpstudio.ui.widgets.action_panel import ActionPanel
from mtpstudio.ui.widgets.common import Notice, Tone
from mtpstudio.ui.widgets.install_preview import InstallPreview

ACTION_KEY = "desktop-action"
STATUS_KEY = "desktop-installed"
RANK_KEY = "desktop-rank"
CHECK_KEY = "desktop-check"
REVERTIBLE_KINDS = ("session", "nvidia-profile")
APPLY_LABELS = {
    DesktopReclaim.NVIDIA_PROFILE: "Install NVIDIA profile…",
    DesktopReclaim.IGPU: "Apply iGPU session…",
    DesktopReclaim.LLVMPIPE: "Apply llvmpipe session…",
}


def reclaims(ranked: list[FitSuggestion]) -> list[FitSuggestion]:
    """The desktop reclamations among a plan's ranked levers, best first."""
    return [s for s in ranked if s.lever.startswith("desktop:")]


@dataclass
class OptionRow:
    """The widgets of one reclaim option."""

    option: ReclaimOption
    radio: QRadioButton
    detail: QLabel
    apply_button: QPushButton


@dataclass(frozen=True)
class PreparedInstall:
    """An install plan, its previews against the target root, and what to tell the user."""

    kind: DesktopReclaim
    plan: InstallPlan
    previews: list[Any]
    notes: tuple[str, ...]
    variant: SessionVariant | None
    helper: HelperState | None = None  # the helper as found: set it up first when it needs


def _set_up_words(transport: object) -> str:
    """``Set up the helper (…). `` when this action set it up first, else ''."""
    if isinstance(transport, SetupFirstTransport) and transport.written:
        return f"Set up the helper ({describe_written(transport.written)}). "
    return ""


def _next_steps(prepared: PreparedInstall) -> str:
    if prepared.variant is None:
        return "Log out and back in (or restart Plasma) so the compositor picks the profile up."
    name, back = session_name(prepared.plan), switch_back_name(prepared.plan)
    return (
        f"Log out; at the login screen open the session menu and pick '{name}' (it stays "
        f"selected for later logins). To switch back, pick '{back}' there."
    )


class DesktopPage(PlanPage):
    """Desktop VRAM holders, the options ranked by cost, Apply (preview → helper), Revert, check.

    ``system`` says how the system is reached (tests pass a temporary root).
    """

    slug = "desktop-vram"

    def __init__(
        self, state: WizardState, parent: QWidget | None = None, system: SystemAccess | None = None
    ) -> None:
        super().__init__(state, parent)
        self.system = system or SystemAccess()
        self.setTitle("Desktop VRAM")
        self.setSubTitle(
            "The desktop quietly holds GPU memory the model could use. Take it back, "
            "cheapest way first; every change can be reverted."
        )
        self.groups: list[str] = []
        self.gains: list[FitSuggestion] | None = None  # the reclaims ranked for this plan
        self._ranked_for: Plan | None = None
        self.prepared: PreparedInstall | None = None
        self.last_answer: HelperAnswer | None = None
        self.last_check: SessionCheckReport | None = None

        self.notice = Notice(self)
        self.refresh_button = QPushButton("Refresh", self)
        self.refresh_button.setToolTip("Detect who holds VRAM again and re-read what is installed.")

        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.holders = QTreeWidget(self)
        self.holders.setHeaderLabels(["Who", "PID", "GPU", "VRAM"])
        self.holders.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.holders.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.holders.header().setStretchLastSection(False)
        self.holders.setIndentation(12)

        self.choice_group = QButtonGroup(self)
        self.keep_radio = QRadioButton("Keep the desktop as it is", self)
        self.choice_group.addButton(self.keep_radio)
        self.rows: dict[DesktopReclaim, OptionRow] = {}
        options_box = QGroupBox("Ways to take it back, cheapest first", self)
        self.options_grid = QGridLayout(options_box)
        self.options_grid.setColumnStretch(0, 1)
        for index, option in enumerate(reclaim_options(None)):
            radio = QRadioButton(option.title, self)
            radio.setToolTip(option.cost)
            detail = QLabel(self)
            detail.setWordWrap(True)
            detail.setStyleSheet("color: #4b5563; margin-left: 22px;")
            detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            button = QPushButton(APPLY_LABELS[option.kind], self)
            self.choice_group.addButton(radio)
            self.options_grid.addWidget(radio, 2 * index, 0)
            self.options_grid.addWidget(button, 2 * index, 1)
            self.options_grid.addWidget(detail, 2 * index + 1, 0, 1, 2)
            self.rows[option.kind] = OptionRow(option, radio, detail, button)
            button.clicked.connect(lambda _=False, kind=option.kind: self.prepare_install(kind))
        self.options_grid.addWidget(self.keep_radio, 6, 0, 1, 2)
        self.plan_note = QLabel(self)
        self.plan_note.setWordWrap(True)
        self.plan_note.setStyleSheet("color: #6b7280;")
        self.options_grid.addWidget(self.plan_note, 7, 0, 1, 2)

        self.preview_box = InstallPreview(self)
        self.action = ActionPanel(state.tasks, self)
        self.installed_label = QLabel(self)
        self.installed_label.setWordWrap(True)
        self.revert_button = QPushButton("Revert", self)
        self.revert_button.setToolTip(
            "Remove what mtpstudio installed here (session files, NVIDIA profile) through the "
            "helper; the files it replaced come back."
        )

        self.check_label = QLabel(self)
        self.check_label.setWordWrap(True)
        self.check_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.check_button = QPushButton("Check this session", self)
        self.check_button.setToolTip(
            "Inside the new session: the renderer, the desktop's VRAM now against the figure "
            "kept when the session was installed, and leaked variables (mtpstudio "
            "verify-session)."
        )
        self._build_layout(options_box)

        self.refresh_button.clicked.connect(self._on_refresh_clicked)
        self.choice_group.buttonToggled.connect(self._on_choice_toggled)
        self.preview_box.confirmed.connect(self.install_prepared)
        self.preview_box.dismissed.connect(self._on_preview_dismissed)
        self.revert_button.clicked.connect(self.revert)
        self.check_button.clicked.connect(self.check_session)
        self.action.idle.connect(self._after_action)
        state.report_changed.connect(lambda _: self._on_report_changed())
        state.activity_changed.connect(self._on_activity_changed)
        state.speed_inputs_changed.connect(self._on_speed_inputs_changed)

    def _build_layout(self, options_box: QGroupBox) -> None:
        top = QHBoxLayout()
        top.addWidget(self.notice, 1)
        top.addStretch()
        top.addWidget(self.refresh_button)

        holders_box = QGroupBox("Who holds VRAM for the desktop", self)
        h = QVBoxLayout(holders_box)
        h.addWidget(self.summary)
        h.addWidget(self.holders, 1)

        check_box = QGroupBox("After the next login", self)
        c = QVBoxLayout(check_box)
        c.addWidget(self.check_label)
        row = QHBoxLayout()
        row.addStretch()
        row.addWidget(self.check_button)
        c.addLayout(row)

        installed = QHBoxLayout()
        installed.addWidget(self.installed_label, 1)
        installed.addWidget(self.revert_button, 0, Qt.AlignmentFlag.AlignTop)

        left = QVBoxLayout()
        left.addWidget(holders_box, 1)
        left.addWidget(check_box)
        right = QVBoxLayout()
        right.addWidget(options_box)
        right.addWidget(self.preview_box, 1)
        right.addWidget(self.action)
        right.addLayout(installed)
        right.addStretch()

        columns = QHBoxLayout()
        columns.addLayout(left, 1)
        columns.addLayout(right, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(columns, 1)

    # -- what the page shows ------------------------------------------------------------------

    def card(self) -> GpuCard | None:
        """The plan's catalogue card (its typical desktop stands in when nothing is detected)."""
        device = self.state.plan.device
        return gpu_card(device) if device in catalogue_ids() else None

    def usage(self) -> DesktopUsage:
        return desktop_usage(self.state.report, self.card())

    def options(self) -> list[ReclaimOption]:
        return reclaim_options(self.state.report, self.card())

    def _refresh(self) -> None:
        report = self.state.report
        if self.state.detection_error:
            self.notice.show_text(self.state.detection_error, Tone.BAD)
        elif report is None:
            self.notice.show_text("Detecting who holds GPU memory…", Tone.INFO)
        else:
            self.notice.show_text(None)
        self.refresh_button.setEnabled(not self.state.detecting)
        self._fill_holders(self.usage())
        self._fill_options(report)
        self._fill_installed()

    def _fill_holders(self, usage: DesktopUsage) -> None:
        self.holders.clear()
        if usage.measured:
            self.summary.setText(
                f"The desktop holds <b>{mib(usage.total_bytes)}</b> on the dedicated GPU "
                f"({usage.source})."
                if usage.processes
                else "No desktop process holds memory on the dedicated GPU now."
            )
        else:
            self.summary.setText(
                f"About <b>{mib(usage.total_bytes)}</b>: {usage.source}."
                if usage.total_bytes
                else f"Nothing to show: {usage.source}."
            )
        for category, size in usage.by_category:
            parent = QTreeWidgetItem([category, "", "", mib(size)])
            for proc in usage.processes:
                if proc.category.value != category:
                    continue
                parent.addChild(
                    QTreeWidgetItem(
                        [
                            proc.name or "(gone)",
                            str(proc.pid),
                            proc.gpu_id,
                            mib(proc.used_bytes) if proc.used_bytes is not None else "not said",
                        ]
                    )
                )
            self.holders.addTopLevelItem(parent)
            parent.setExpanded(True)

    def _fill_options(self, report: DetectionReport | None) -> None:
        for option in self.options():
            row = self.rows[option.kind]
            row.option = option
            gives = (
                f"likely gives back ~{option.likely_saved_bytes / MIB:,.0f} MiB"
                if option.available
                else "not available here"
            )
            row.radio.setText(f"{option.rank}. {option.title} — {gives}")
            row.radio.setEnabled(option.available or self.state.plan.desktop is option.kind)
            row.detail.setText(f"{option.cost} {option.detail}")
            can_apply = option.available and report is not None and not self.action.running
            if option.kind is DesktopReclaim.IGPU and report is not None:
                can_apply = can_apply and any(g.integrated and g.drm_card for g in report.gpus)
            row.apply_button.setEnabled(can_apply)
            row.apply_button.setToolTip(
                f"Shows the files first, then installs them {self.system.via}."
                if can_apply
                else "Waiting for detection."
                if report is None
                else option.detail
            )
        chosen = self.state.plan.desktop
        button = self.keep_radio if chosen is DesktopReclaim.NONE else self.rows[chosen].radio
        button.setChecked(True)
        self._rank_for_plan()

    def _on_speed_inputs_changed(self) -> None:
        """This computer's rates landed: the reclaims' gains in tok/s are estimated again."""
        self._ranked_for = None
        if self.is_current():
            self._rank_for_plan()

    def _rank_for_plan(self) -> None:
        """What each reclaim does for this plan's speed (the budget page's ranking, tens of
        budgets in the background): experts moved onto the GPU, MTP kept, the estimated gain in
        tok/s; memory spare second."""
        plan = self.state.plan
        if plan == self._ranked_for and self.gains is not None:
            self._show_gains(self.gains)
            return
        self._ranked_for = plan
        try:
            resolved = self.state.resolved()  # the plan the pages show, resolved once
        except MtpStudioError:
            resolved = None
        if resolved is None or not resolved.target.device.is_gpu:
            self._show_gains([])
            return
        self.state.with_levers(
            resolved, lambda ranked: self._show_gains(reclaims(ranked)), RANK_KEY
        )

    def _show_gains(self, ranked: list[FitSuggestion]) -> None:
        self.gains = ranked
        for row in self.rows.values():
            row.detail.setText(f"{row.option.cost} {row.option.detail}")
        lines = []
        usable = [s for s in ranked if self.rows[DesktopReclaim(s.lever[8:])].option.available]
        for i, s in enumerate(usable, 1):  # what cannot be done here is not offered
            kind = DesktopReclaim(s.lever.removeprefix("desktop:"))
            what = s.buys or "no layer moves"
            self.rows[kind].detail.setText(
                f"<b>For this plan: {what} ({s.outcome()}).</b> "
                f"{self.rows[kind].option.cost} {self.rows[kind].option.detail}"
            )
            lines.append(f"{i}. {self.rows[kind].option.title}: {what} ({s.outcome()})")
        ranking = (
            "For this plan's tokens/s, best first: " + "; ".join(lines) + ". " if lines else ""
        )
        self.plan_note.setText(
            ranking + "The choice goes into the plan: the VRAM budget of a catalogue GPU counts "
            "the desktop after it; on this computer the budget follows what detection measures."
        )

    def _fill_installed(self) -> None:
        """Read what the helper installed (its manifest) in the background."""
        root = self.system.root

        def work(token: CancelToken) -> list[str]:
            return installed_groups(root)

        def failed(exc: BaseException) -> None:
            self.installed_label.setText(f"What is installed is unknown: {error_sentence(exc)}")
            self.revert_button.setEnabled(False)

        self.state.tasks.run(work, self._show_installed, failed, key=STATUS_KEY)

    def _show_installed(self, groups: list[str]) -> None:
        self.groups = [g for g in groups if g.partition(":")[0] in REVERTIBLE_KINDS]
        if self.groups:
            self.installed_label.setText("Installed by mtpstudio: " + ", ".join(self.groups))
        else:
            self.installed_label.setText("mtpstudio has installed nothing for the desktop here.")
        self.revert_button.setEnabled(bool(self.groups) and not self.action.running)
        session = self.system.environ.get("DESKTOP_SESSION") or ""
        mine = any(g == f"session:{session}.desktop" for g in self.groups) if session else False
        if self.last_check is None:
            if mine:
                self.check_session()
            elif any(g.startswith("session:") for g in self.groups):
                self.check_label.setText(
                    "A session is installed. Log out and pick it at the login screen; back "
                    "here, the check compares the desktop's VRAM with the figure kept at "
                    "install time."
                )
            else:
                self.check_label.setText(
                    "After you install a session and log in to it, this compares the "
                    "desktop's VRAM before and after and checks the renderer."
                )

    # -- plan ---------------------------------------------------------------------------------

    def _on_choice_toggled(self, button: QRadioButton, checked: bool) -> None:
        if not checked or self._refreshing:
            return
        kind = DesktopReclaim.NONE
        for row in self.rows.values():
            if row.radio is button:
                kind = row.option.kind
        if kind is not self.state.plan.desktop:
            self.apply({"desktop": kind.value})

    def plan_refused(self, sentence: str | None) -> None:
        if sentence:
            self.action.outcome.show_outcome(sentence, Tone.BAD)

    # -- apply → preview → helper → result ------------------------------------------------------

    def prepare_install(self, kind: DesktopReclaim) -> None:
        """Build the install plan for ``kind`` in the background and show its files."""
        report = self.state.report
        if report is None:
            return
        option = self.rows[kind].option
        root = self.system.root
        system = self.system

        def work(token: CancelToken) -> PreparedInstall:
            helper = system.helper_state()
            problem = helper.pkexec_problem()
            if problem is not None:
                raise problem
            notes: tuple[str, ...] = ()
            if option.variant is None:
                plan = nvidia_profile_plan(render_nvidia_profile())
            else:
                plan, vram = prepare_session(report, option.variant, sddm_dirs(root), root)
                notes = (
                    *plan.notes,
                    f"The desktop's VRAM now ({vram['desktop_bytes'] / MIB:,.0f} MiB) is kept "
                    "as the 'before' figure.",
                )
            if helper.needs_setup:
                notes = (setup_note(helper), *notes)
            token.raise_if_cancelled()
            previews = preview(plan.files, root)
            return PreparedInstall(kind, plan, previews, notes, option.variant, helper)

        self.preview_box.hide_preview()
        self.action.run(f"Preparing the files for {option.title.lower()}…", work, self._on_prepared,
                        key=ACTION_KEY)  # fmt: skip
        self._fill_options(report)

    def _show_details(self, shown: bool) -> None:
        """Fold the options' explanations away while a preview needs the room."""
        for row in self.rows.values():
            row.detail.setVisible(shown)
        self.plan_note.setVisible(shown)

    def _on_prepared(self, prepared: PreparedInstall) -> None:
        self.prepared = prepared
        self._show_details(False)
        option = self.rows[prepared.kind].option
        helper = prepared.helper
        if helper is not None and (self.system.root is None or helper.needs_setup):
            words = install_words(helper)
        else:
            words = "Install"
        self.preview_box.show_preview(
            f"Files to install: {option.title}", prepared.previews, prepared.notes, words
        )
        self._fill_options(self.state.report)

    def _on_preview_dismissed(self) -> None:
        self.prepared = None
        self.preview_box.hide_preview()
        self._show_details(True)
        self.action.outcome.show_outcome("Nothing was installed.", Tone.INFO)

    def install_prepared(self) -> None:
        """Run the shown install plan through the helper."""
        prepared = self.prepared
        if prepared is None:
            return
        setup = prepared.helper is not None and prepared.helper.needs_setup
        transport = self.system.transport(setup=setup)

        def work(token: CancelToken) -> HelperAnswer:
            return apply_plan(prepared.plan, transport)

        def done(answer: HelperAnswer) -> None:
            self.last_answer = answer
            self.prepared = None
            if prepared.kind is not self.state.plan.desktop:
                self.apply({"desktop": prepared.kind.value})
            changes = "\n".join(f"{action}: {path}" for path, action in answer.changes)
            set_up = _set_up_words(transport)
            self.action.outcome.show_outcome(
                f"{set_up}Installed {len(answer.changes)} files. {_next_steps(prepared)}",
                Tone.GOOD,
                f"{answer.group}\n{changes}",
            )
            self._after_action()

        self.preview_box.hide_preview()
        self._show_details(True)
        doing = (
            "Setting up the helper and installing (polkit asks for an administrator's password)…"
            if setup
            else "Installing through the helper…"
        )
        self.action.run(doing, work, done, key=ACTION_KEY)
        self._fill_options(self.state.report)

    def revert(self) -> None:
        """Undo every session and profile mtpstudio installed here, through the helper."""
        groups = list(self.groups)
        if not groups:
            return
        system = self.system
        helper = system.helper_state()
        problem = helper.pkexec_problem()
        if problem is not None:
            self.action.outcome.show_error(problem, "Not reverted: ")
            return
        transport = system.transport(setup=helper.needs_setup)

        def work(token: CancelToken) -> list[HelperAnswer]:
            token.raise_if_cancelled()
            return revert_groups(groups, transport)

        def done(answers: list[HelperAnswer]) -> None:
            details = "\n".join(
                f"{a.group}\n" + "\n".join(f"  {action}: {path}" for path, action in a.changes)
                for a in answers
            )
            self.last_check = None
            self.action.outcome.show_outcome(
                f"{_set_up_words(transport)}Reverted {', '.join(groups)}. The login screen "
                "offers your usual sessions again; pick one if it still shows the removed one "
                "as last used.",
                Tone.GOOD,
                details,
            )
            self._after_action()

        self.revert_button.setEnabled(False)
        doing = (
            "Setting up the helper and reverting (polkit asks for an administrator's password)…"
            if helper.needs_setup
            else "Reverting through the helper…"
        )
        self.action.run(doing, work, done, key=ACTION_KEY)

    def _after_action(self) -> None:
        self._fill_options(self.state.report)
        self._fill_installed()

    # -- after the login ----------------------------------------------------------------------

    def check_session(self) -> None:
        """Renderer, desktop VRAM now vs the stored 'before' figure, leaked variables."""
        report = self.state.report
        if report is None:
            return
        root, runner = self.system.root, self.system.runner
        environ = dict(self.system.environ)

        def work(token: CancelToken) -> SessionCheckReport:
            before = stored_measurement(environ.get("DESKTOP_SESSION") or None, root)
            token.raise_if_cancelled()
            return check_session(report, runner, environ, before)

        def done(result: SessionCheckReport) -> None:
            self.last_check = result
            self.check_label.setText(self._check_text(result))

        def failed(exc: BaseException) -> None:
            self.check_label.setText(f"The check did not run: {error_sentence(exc)}")

        self.check_label.setText("Checking this session…")
        self.state.tasks.run(work, done, failed, key=CHECK_KEY)

    @staticmethod
    def _check_text(result: SessionCheckReport) -> str:
        now = result.desktop_bytes_now
        if result.desktop_bytes_before is not None:
            before = result.desktop_bytes_before
            head = (
                f"<b>Before: {mib(before)} · now: {mib(now)} · given back: {mib(before - now)}</b>"
            )
        else:
            head = f"<b>Desktop VRAM now: {mib(now)}</b> (no figure was kept from before)"
        lines = [line for line in result.lines() if not line.startswith("Desktop VRAM")]
        return "<br>".join([head, *(html.escape(line) for line in lines)])

    # -- signals ------------------------------------------------------------------------------

    def _on_report_changed(self) -> None:
        if self.is_current():
            self.refresh()

    def _on_activity_changed(self) -> None:
        if self.is_current():
            self.refresh_button.setEnabled(not self.state.detecting)

    def _on_refresh_clicked(self) -> None:
        self.last_check = None
        self.action.outcome.clear()  # what the last action said may no longer hold
        self.state.refresh_detection()
        self.refresh()
