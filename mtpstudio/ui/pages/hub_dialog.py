"""From Hugging Face: every GGUF of a repository planned from its remote header; download one.

Listing, header reads, planning and the download run as tasks of the wizard's task manager
(progress on the GUI thread, Cancel stops them); the table is sortable and marks the best file.
After a verified download the wizard's plan takes the local file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.hub.client import HubClient, Repo
from mtpstudio.core.hub.download import DownloadProgress, DownloadResult
from mtpstudio.core.hub.fit_table import BEST_RULE, COLUMN_LEGEND, TableRow
from mtpstudio.core.hub.remote_header import RemoteHeader
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.core.usecases.hub import (
    download_model,
    list_models,
    parse_repo_id,
    planned_table,
    read_remote_headers,
    size_text,
)
from mtpstudio.core.usecases.words import models_dir
from mtpstudio.core.usecases.workbench import engine_name
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.tasks import CancelToken, TaskHandle
from mtpstudio.ui.widgets.common import Notice, Tone

LIST_KEY = "hub-list"
PLAN_KEY = "hub-plan"
DOWNLOAD_KEY = "hub-download"
COLUMNS = (
    "",
    "File",
    "Quant",
    "Size",
    "MTP",
    "Fits at ctx",
    "CPU offload",
    "Max ctx",
    "Desktop reclaim",
)
SIZE_COLUMN = 3
ERROR_COLUMN = 5  # a file without a plan says why from here to the last column
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072, 262144)
BEST_BACKGROUND = QColor("#dcfce7")
ERROR_FOREGROUND = QColor("#6b7280")
SORT_ROLE = Qt.ItemDataRole.UserRole + 1


@dataclass(frozen=True)
class Listing:
    """What the listing task found: the repository at its commit, every model's header and
    plan, the best row, and notes on incomplete split models."""

    repo: Repo
    headers: tuple[RemoteHeader, ...]
    rows: tuple[TableRow, ...]
    best: int | None
    notes: tuple[str, ...]


class _SortItem(QTableWidgetItem):
    """A cell that sorts by its SORT_ROLE value (sizes, counts) instead of its text."""

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine, theirs = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if mine is not None and theirs is not None:
            return bool(mine < theirs)
        return super().__lt__(other)


class HubModelsDialog(QDialog):
    """Choose a GGUF on Hugging Face by its plan, then download it (resumable, verified)."""

    model_downloaded = Signal(object)  # Path: the verified first file of the model

    def __init__(
        self,
        state: WizardState,
        parent: QWidget | None = None,
        *,
        client: HubClient | None = None,
    ) -> None:
        super().__init__(parent)
        self.state = state
        self.client = client or HubClient()
        self.listing: Listing | None = None
        self.folder: Path | None = None
        self._folder_chosen = False
        self._handle: TaskHandle | None = None
        self._last_progress: DownloadProgress | None = None
        self.setWindowTitle("Models from Hugging Face")
        self.resize(1120, 620)

        self.repo_edit = QLineEdit(self)
        self.repo_edit.setPlaceholderText("OWNER/NAME, e.g. unsloth/Qwen3.6-35B-A3B-GGUF")
        self.revision_edit = QLineEdit(self)
        self.revision_edit.setPlaceholderText("main")
        self.revision_edit.setMaximumWidth(140)
        self.ctx_combo = QComboBox(self)
        for ctx in sorted({*CONTEXTS, state.plan.runtime.ctx}):
            self.ctx_combo.addItem(f"{ctx:,}", ctx)
        self.ctx_combo.setCurrentIndex(self.ctx_combo.findData(state.plan.runtime.ctx))
        self.list_button = QPushButton("List files", self)
        self.list_button.setDefault(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Repository", self))
        top.addWidget(self.repo_edit, 1)
        top.addWidget(QLabel("Revision", self))
        top.addWidget(self.revision_edit)
        top.addWidget(QLabel("Context", self))
        top.addWidget(self.ctx_combo)
        top.addWidget(self.list_button)

        self.target_label = QLabel(self)
        self.target_label.setWordWrap(True)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(14)
        self.status = QLabel(self)
        self.cancel_button = QPushButton("Cancel", self)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 2)
        progress_row.addWidget(self.status, 3)
        progress_row.addWidget(self.cancel_button)
        self.notice = Notice(self)

        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.setSortingEnabled(True)
        self.legend = QLabel(f"{COLUMN_LEGEND}. {BEST_RULE}.", self)
        self.legend.setWordWrap(True)
        self.legend.setStyleSheet("color: #4b5563;")

        self.folder_label = QLabel(self)
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folder_button = QPushButton("Change…", self)
        self.download_button = QPushButton("Download and use", self)
        self.close_button = QPushButton("Close", self)
        bottom = QHBoxLayout()
        bottom.addWidget(QLabel("Save to", self))
        bottom.addWidget(self.folder_label, 1)
        bottom.addWidget(self.folder_button)
        bottom.addSpacing(16)
        bottom.addWidget(self.download_button)
        bottom.addWidget(self.close_button)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.target_label)
        layout.addLayout(progress_row)
        layout.addWidget(self.notice)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.legend)
        layout.addLayout(bottom)

        self.list_button.clicked.connect(self.list_files)
        self.repo_edit.returnPressed.connect(self.list_files)
        self.ctx_combo.currentIndexChanged.connect(self._on_ctx_changed)
        self.cancel_button.clicked.connect(self.cancel)
        self.folder_button.clicked.connect(self._on_folder_clicked)
        self.download_button.clicked.connect(self.download_selected)
        self.close_button.clicked.connect(self.reject)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        header.sortIndicatorChanged.connect(lambda *_: self._apply_spans())
        self.finished.connect(lambda _: self.cancel())
        self._set_busy(None)
        self._show_target()

    # -- what the table is planned for -------------------------------------------------------------

    @property
    def ctx(self) -> int:
        value = self.ctx_combo.currentData()
        return int(value) if value is not None else self.state.plan.runtime.ctx

    def plan(self) -> Plan:
        """The wizard's plan at the dialog's context (device, engine, cache types as chosen)."""
        return plan_with(self.state.plan, {"runtime.ctx": self.ctx})

    def _show_target(self) -> None:
        plan = self.state.plan
        fit = next((r.fit for r in self.listing.rows if r.fit), None) if self.listing else None
        device = fit.target if fit is not None else plan.device
        engine = engine_name(plan.engine.flavour)
        line = f"Planned for {device} with {engine}, K/V cache {plan.runtime.cache_type_k.value}"
        line += f"/{plan.runtime.cache_type_v.value}, from the wizard's plan"
        if fit is not None:
            line += f". {fit.mtp_line}"
        self.target_label.setText(line)

    # -- actions -----------------------------------------------------------------------------------

    def list_files(self) -> None:
        """List the repository, read every header and plan it (in the background)."""
        try:
            repo_id = parse_repo_id(self.repo_edit.text())
        except MtpStudioError as exc:
            self.notice.show_text(error_sentence(exc), Tone.BAD)
            return
        revision = self.revision_edit.text().strip() or None
        if not self._folder_chosen:
            self.folder = models_dir() / repo_id
        folder = self.folder or models_dir() / repo_id
        client, plan, machine = self.client, self.plan(), self.state.machine()

        def job(token: CancelToken) -> Listing:
            token.report_progress(("listing", 0, 0, repo_id))
            repo, models, notes = list_models(client, repo_id, revision)
            token.raise_if_cancelled()
            headers = tuple(
                read_remote_headers(
                    client,
                    repo,
                    models,
                    cancel=token,
                    progress=lambda done, total, h: token.report_progress(
                        ("header", done, total, h.model.name)
                    ),
                )
            )
            token.report_progress(("planning", len(headers), len(headers), ""))
            rows, best = planned_table(headers, plan, machine, folder)
            return Listing(repo, headers, rows, best, tuple(notes))

        self.notice.show_text(None)
        self._start(job, self._on_listed, LIST_KEY)

    def replan(self) -> None:
        """Plan the headers already read again (the context changed); no network."""
        listing = self.listing
        if listing is None:
            return
        plan, machine = self.plan(), self.state.machine()
        folder = self.folder or models_dir() / listing.repo.repo_id

        def job(token: CancelToken) -> Listing:
            token.report_progress(("planning", 0, 0, ""))
            rows, best = planned_table(listing.headers, plan, machine, folder)
            return Listing(listing.repo, listing.headers, rows, best, listing.notes)

        self._start(job, self._on_listed, PLAN_KEY)

    def selected_row(self) -> TableRow | None:
        if self.listing is None:
            return None
        items = self.table.selectedItems()
        if not items:
            return None
        index = items[0].data(Qt.ItemDataRole.UserRole)
        return self.listing.rows[index] if isinstance(index, int) else None

    def select_row(self, index: int) -> None:
        """Select the table row of ``listing.rows[index]`` (whatever the sort order)."""
        for r in range(self.table.rowCount()):
            item = self.table.item(r, 1)
            if item is not None and item.data(Qt.ItemDataRole.UserRole) == index:
                self.table.selectRow(r)
                return

    def download_selected(self) -> None:
        """Download the selected model (resuming a .part), verify it, and put it in the plan."""
        row, listing = self.selected_row(), self.listing
        if row is None or listing is None or row.info is None:
            return
        client, repo, model = self.client, listing.repo, row.header.model
        folder = self.folder or models_dir() / repo.repo_id
        self._last_progress = None

        def job(token: CancelToken) -> DownloadResult:
            return download_model(
                client, repo, model, folder, cancel=token, progress=token.report_progress
            )

        self.notice.show_text(None)
        self._start(job, self._on_downloaded, DOWNLOAD_KEY)

    def cancel(self) -> None:
        """Stop what runs now (a download keeps its .part for the next try)."""
        handle = self._handle
        if handle is None or not handle.running:
            return
        handle.cancel()
        kept = self._last_progress
        if handle.key == DOWNLOAD_KEY and kept is not None:
            self.notice.show_text(
                f"Download cancelled: {size_text(kept.done)} of {size_text(kept.total)} kept "
                f"as {kept.file}.part in {self.folder}; Download and use resumes from there.",
                Tone.WARN,
            )
        else:
            self.notice.show_text("Cancelled.", Tone.INFO)
        self._set_busy(None)

    def ask_folder(self) -> Path | None:
        """The folder dialog (tests replace this method)."""
        start = str(self.folder or models_dir())
        name = QFileDialog.getExistingDirectory(self, "Download into", start)
        return Path(name) if name else None

    # -- task plumbing -----------------------------------------------------------------------------

    def _start(self, job: Any, done: Any, key: str) -> None:
        self._handle = self.state.tasks.run(
            job, done, self._on_failed, key=key, on_progress=self._on_progress
        )
        self._set_busy(key)

    def _set_busy(self, key: str | None) -> None:
        busy = key is not None
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.status.setVisible(busy)
        if busy:
            self.progress.setRange(0, 0)  # busy until the first figure arrives
            self.status.setText("Starting…")
        self.list_button.setEnabled(not busy)
        self.ctx_combo.setEnabled(not busy)
        self.folder_button.setEnabled(not busy)
        self._update_buttons()

    def _update_buttons(self) -> None:
        row = self.selected_row()
        idle = self._handle is None or not self._handle.running
        self.download_button.setEnabled(idle and row is not None and row.info is not None)
        if self.folder is not None:
            self.folder_label.setText(str(self.folder))
        else:
            self.folder_label.setText(f"{models_dir()}/OWNER/NAME")

    def _on_progress(self, value: object) -> None:
        if isinstance(value, DownloadProgress):
            self._last_progress = value
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * value.fraction))
            verb = "Checking the kept part of" if value.phase == "checking" else "Downloading"
            rate = f", {value.rate / 1e6:,.0f} MB/s" if value.phase == "downloading" else ""
            self.status.setText(
                f"{verb} {value.file}: {size_text(value.done)} of {size_text(value.total)} "
                f"({100 * value.fraction:.0f}%){rate}"
            )
            return
        if not isinstance(value, tuple) or len(value) != 4:
            return
        phase, done, total, name = value
        if phase == "header" and total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
            self.status.setText(f"Reading headers: {done} of {total} ({name})")
        elif phase == "listing":
            self.status.setText(f"Listing the files of {name}…")
        elif phase == "planning":
            self.status.setText("Planning every file for the card…")

    def _on_failed(self, exc: BaseException) -> None:
        self._handle = None
        self._set_busy(None)
        self.notice.show_text(error_sentence(exc), Tone.BAD)

    def _on_listed(self, listing: Listing) -> None:
        self._handle = None
        self.listing = listing
        self._fill(listing)
        self._set_busy(None)
        self._show_target()
        read = sum(h.bytes_read for h in listing.headers)
        text = (
            f"{len(listing.rows)} models in {listing.repo.repo_id}; headers read with "
            f"{read / 1e6:,.1f} MB of range requests, no weights."
        )
        if listing.notes:
            self.notice.show_text(" ".join(f"{n}." for n in listing.notes), Tone.WARN)
        self.status.setText(text)
        self.status.setVisible(True)

    def _on_downloaded(self, result: DownloadResult) -> None:
        self._handle = None
        self._set_busy(None)
        path = result.paths[0]
        self.model_downloaded.emit(path)
        if self.ctx != self.state.plan.runtime.ctx:
            self.state.update({"runtime.ctx": self.ctx})
        self.state.load_model(ModelChoice(path=path, card=None))
        resumed = f", resumed from {size_text(result.kept_bytes)}" if result.kept_bytes else ""
        self.notice.show_text(
            f"Verified against the Hub's checksum and opened: {path}{resumed}. The plan now "
            "uses it.",
            Tone.GOOD,
        )

    def _on_ctx_changed(self) -> None:
        if self.listing is not None:
            self.replan()

    def _on_folder_clicked(self) -> None:
        folder = self.ask_folder()
        if folder is not None:
            self.folder = folder
            self._folder_chosen = True
            self._update_buttons()

    # -- the table ---------------------------------------------------------------------------------

    def _fill(self, listing: Listing) -> None:
        self.table.setSortingEnabled(False)
        self.table.clearSpans()
        self.table.setRowCount(len(listing.rows))
        bold = QFont(self.table.font())
        bold.setBold(True)
        for r, row in enumerate(listing.rows):
            cells = self._cells(row, r == listing.best)
            for c, (text, key, tip) in enumerate(cells):
                item = _SortItem(text)
                item.setData(Qt.ItemDataRole.UserRole, r)
                item.setData(SORT_ROLE, key)
                if tip:
                    item.setToolTip(tip)
                if r == listing.best:
                    item.setBackground(QBrush(BEST_BACKGROUND))
                    item.setFont(bold)
                if row.fit is None:
                    item.setForeground(QBrush(ERROR_FOREGROUND))
                if row.fit is None and c == ERROR_COLUMN:  # its width comes from the span
                    item.setData(Qt.ItemDataRole.SizeHintRole, QSize(40, 24))
                self.table.setItem(r, c, item)
        self.table.setSortingEnabled(True)
        self.table.sortItems(SIZE_COLUMN, Qt.SortOrder.AscendingOrder)
        self._apply_spans()
        if listing.best is not None:
            self.select_row(listing.best)

    def _apply_spans(self) -> None:
        """A file without a plan says why across the plan's columns (spans follow positions,
        so they are laid again after every sort)."""
        self.table.clearSpans()
        if self.listing is None:
            return
        for r in range(self.table.rowCount()):
            item = self.table.item(r, ERROR_COLUMN)
            index = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
            if isinstance(index, int) and self.listing.rows[index].fit is None:
                self.table.setSpan(r, ERROR_COLUMN, 1, len(COLUMNS) - ERROR_COLUMN)

    def _cells(self, row: TableRow, best: bool) -> list[tuple[str, Any, str]]:
        model, fit = row.header.model, row.fit
        parts = "\n".join(p.path for p in model.parts)
        mtp = {True: "yes", False: "no", None: "—"}[row.has_mtp]
        if fit is not None and row.has_mtp and not fit.mtp:
            mtp = "yes (off)"
        cells: list[tuple[str, Any, str]] = [
            ("★" if best else "", 0 if best else 1, BEST_RULE if best else ""),
            (model.name, model.path.lower(), parts),
            (row.quant, row.info.bits_per_weight if row.info else 0.0, ""),
            (size_text(model.size), model.size, f"{model.size:,} bytes"),
            (mtp, mtp, fit.mtp_line if fit else ""),
        ]
        if fit is None:
            error = row.error or "not planned"
            return [*cells, (error, 9, error), ("", 1 << 30, ""), ("", -1, ""), ("", "", "")]
        fits = {True: "yes", False: "no", None: "?"}[fit.fits]
        offload = fit.offload if fit.offload is not None else 1 << 20
        return [
            *cells,
            (fits, {True: 0, None: 1, False: 2}[fit.fits], f"at {fit.ctx:,} tokens"),
            (fit.offload_text(), offload, ""),
            (f"{fit.max_ctx:,}" if fit.max_ctx else "—", fit.max_ctx or 0, ""),
            (fit.reclaim_text(), fit.reclaim_text(), ""),
        ]
