"""Hardware page: the GPUs, who holds their memory, the host, the session; the target choice."""

from __future__ import annotations

from collections.abc import Callable, Collection

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.cancel import CancelToken
from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD, GpuCard
from mtpstudio.core.detect.models import DetectionReport, GpuInfo
from mtpstudio.core.detect.processes import ProcessCategory
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.choices import SplitMode
from mtpstudio.core.units import MIB
from mtpstudio.core.usecases.model_files import gpu_card, gpu_cards_by_vendor
from mtpstudio.core.usecases.pc_choice import checked_ram, cpu_choices
from mtpstudio.core.usecases.rpc_endpoint import ProbedEndpoint, probe_endpoint
from mtpstudio.ui.formatting import error_sentence, gib, mib
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState, catalogue_ids, discrete_gpu_ids
from mtpstudio.ui.widgets.common import BusyIndicator, Notice, Tone

GPU_COLUMNS = ("Device", "Name", "VRAM", "Used", "Free", "Driver", "PCIe", "Role")
RPC_PROBE_KEY = "rpc-probe"
PROCESS_COLUMNS = ("Process", "PID", "GPU", "VRAM")


def gpu_role(gpu: GpuInfo) -> str:
    """``iGPU · drives the display`` and the like."""
    parts = ["iGPU" if gpu.integrated else "discrete"]
    parts.append("drives the display" if gpu.drives_display else "no display")
    return " · ".join(parts)


def pcie_text(gpu: GpuInfo) -> str:
    link = gpu.pcie
    if link is None or link.current_gen is None:
        return "—"
    text = f"Gen{link.current_gen} x{link.current_width or '?'}"
    if link.max_gen and (link.max_gen, link.max_width) != (link.current_gen, link.current_width):
        text += f" (max Gen{link.max_gen} x{link.max_width or '?'})"
    return text


class HardwarePage(PlanPage):
    """Detected GPUs (VRAM used/free, iGPU, display), VRAM users by category, host, session."""

    slug = "hardware"

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("Hardware")
        self.setSubTitle(
            "What this computer has, who is using GPU memory now, and which GPU to plan for."
        )
        self.busy = BusyIndicator("Detecting GPUs, engines and the desktop session…", self)
        self.refresh_button = QPushButton("Refresh", self)
        self.refresh_button.setToolTip("Detect the GPUs, VRAM users and engines again.")
        self.notice = Notice(self)

        self.gpu_tree = QTreeWidget(self)
        self.gpu_tree.setHeaderLabels(list(GPU_COLUMNS))
        self.gpu_tree.setRootIsDecorated(False)
        self.gpu_tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.gpu_tree.header().setStretchLastSection(True)
        self.no_gpu_label = QLabel(self)
        self.no_gpu_label.setWordWrap(True)

        self.process_tree = QTreeWidget(self)
        self.process_tree.setHeaderLabels(list(PROCESS_COLUMNS))
        self.process_tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)

        self.cpu_label = QLabel(self)
        self.ram_label = QLabel(self)
        self.os_label = QLabel(self)
        self.session_label = QLabel(self)
        self.display_label = QLabel(self)
        for label in (
            self.cpu_label,
            self.ram_label,
            self.os_label,
            self.session_label,
            self.display_label,
        ):
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problems_label = QLabel(self)
        self.problems_label.setWordWrap(True)
        self.problems_label.setStyleSheet("color: #6b7280;")

        self.radio_detected = QRadioButton("A GPU of this computer", self)
        self.detected_combo = QComboBox(self)
        self.radio_catalogue = QRadioButton("Plan for another GPU (catalogue)", self)
        self.catalogue_combo = QComboBox(self)
        add_catalogue_cards(
            self.catalogue_combo, lambda card: f"{card.label} · {card.vram_bytes // MIB:,} MiB"
        )
        self.radio_cpu = QRadioButton("CPU only (system RAM)", self)
        self.target_group = QButtonGroup(self)
        for button in (self.radio_detected, self.radio_catalogue, self.radio_cpu):
            self.target_group.addButton(button)
        self.target_help = QLabel(self)
        self.target_help.setWordWrap(True)
        self.target_help.setStyleSheet("color: #4b5563;")

        self.pc_combo = QComboBox(self)
        self.pc_combo.addItem("This PC (its CPU and RAM as probed)", None)
        for cpu_id, cpu_name in cpu_choices():
            self.pc_combo.addItem(cpu_name, cpu_id)
        self.pc_combo.setToolTip(
            "Whose CPU and RAM the speed estimate assumes: this computer's, or another PC's "
            "(a plan for a catalogue GPU is usually for another PC)."
        )
        self.ram_edit = QLineEdit(self)
        self.ram_edit.setPlaceholderText("the CPU's usual RAM (e.g. ddr5-6000x2 or 65GB/s)")
        self.ram_edit.setToolTip(
            "That PC's RAM: type-MT/s x channels (ddr5-6000x2, ddr4-3200x2) or a read "
            "bandwidth (65GB/s). Empty: what the CPU's owners commonly run."
        )
        self.pc_note = QLabel(self)
        self.pc_note.setWordWrap(True)
        self.pc_note.setStyleSheet("color: #4b5563;")

        self._build_devices()
        self._build_layout()
        self.pc_combo.currentIndexChanged.connect(self._on_pc_chosen)
        self.ram_edit.editingFinished.connect(self._on_ram_edited)
        self.refresh_button.clicked.connect(self._on_refresh_clicked)
        self.target_group.buttonToggled.connect(self._on_target_toggled)
        self.detected_combo.currentIndexChanged.connect(self._on_detected_chosen)
        self.catalogue_combo.currentIndexChanged.connect(self._on_catalogue_chosen)
        state.report_changed.connect(self._on_report_changed)
        state.activity_changed.connect(self._on_activity_changed)

    def _build_layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.busy, 1)
        top.addStretch()
        top.addWidget(self.refresh_button)

        gpus = QGroupBox("GPUs", self)
        gpus_layout = QVBoxLayout(gpus)
        gpus_layout.addWidget(self.no_gpu_label)
        gpus_layout.addWidget(self.gpu_tree)
        users = QGroupBox("Who holds GPU memory", self)
        users_layout = QVBoxLayout(users)
        users_layout.addWidget(self.process_tree)

        host = QGroupBox("This computer", self)
        form = QFormLayout(host)
        form.addRow("CPU", self.cpu_label)
        form.addRow("Memory", self.ram_label)
        form.addRow("System", self.os_label)
        form.addRow("Session", self.session_label)
        form.addRow("Display", self.display_label)

        target = QGroupBox("Plan for", self)
        t = QGridLayout(target)
        t.addWidget(self.radio_detected, 0, 0, 1, 2)
        t.addWidget(self.detected_combo, 1, 1)
        t.addWidget(self.radio_catalogue, 2, 0, 1, 2)
        t.addWidget(self.catalogue_combo, 3, 1)
        t.addWidget(self.radio_cpu, 4, 0, 1, 2)
        t.addWidget(self.target_help, 5, 0, 1, 2)
        pc_title = QLabel("<b>The PC the speed estimate is for</b>", target)
        t.addWidget(pc_title, 6, 0, 1, 2)
        pc = QGridLayout()
        pc.addWidget(QLabel("CPU", target), 0, 0)
        pc.addWidget(self.pc_combo, 0, 1)
        pc.addWidget(QLabel("RAM", target), 1, 0)
        pc.addWidget(self.ram_edit, 1, 1)
        pc.setColumnStretch(1, 1)
        t.addLayout(pc, 7, 1)
        t.addWidget(self.pc_note, 8, 0, 1, 2)
        t.setRowStretch(9, 1)
        t.setColumnMinimumWidth(0, 16)
        t.setColumnStretch(1, 1)

        grid = QGridLayout()
        grid.addWidget(gpus, 0, 0)
        grid.addWidget(users, 1, 0)
        grid.addWidget(host, 0, 1)
        grid.addWidget(target, 1, 1)
        grid.addWidget(self.devices_box, 2, 0, 1, 2)
        grid.setColumnStretch(0, 3)
        grid.setColumnStretch(1, 2)
        grid.setRowStretch(1, 1)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.notice)
        layout.addLayout(grid, 1)
        layout.addWidget(self.problems_label)

    def _build_devices(self) -> None:
        """More devices: further GPUs of this computer (or catalogue cards) and rpc-server
        endpoints on other machines, each probed before the plan uses it; the split mode."""
        box = QGroupBox("More devices (split the model)", self)
        self.devices_box = box
        self.devices_list = QListWidget(box)
        self.devices_list.setMaximumHeight(96)
        self.remove_device_button = QPushButton("Remove", box)
        self.remove_device_button.setToolTip("Take the selected device out of the plan.")
        self.extra_gpu_combo = QComboBox(box)
        self.add_gpu_button = QPushButton("Add GPU", box)
        self.add_gpu_button.setToolTip(
            "Split the model over this GPU too: the engine deals whole layers to each GPU."
        )
        self.rpc_edit = QLineEdit(box)
        self.rpc_edit.setPlaceholderText("host:port of a machine running rpc-server")
        self.rpc_button = QPushButton("Probe and add", box)
        self.rpc_button.setToolTip(
            "Ask the rpc-server there what memory it has; the plan uses it only if it answers."
        )
        self.rpc_notice = Notice(box)
        self.split_combo = QComboBox(box)
        self.split_combo.addItem("layer: whole layers per device", SplitMode.LAYER.value)
        self.split_combo.addItem("row: weight rows over CUDA cards", SplitMode.ROW.value)
        layout = QGridLayout(box)
        layout.addWidget(self.devices_list, 0, 0, 3, 1)
        layout.addWidget(self.remove_device_button, 0, 1)
        layout.addWidget(self.extra_gpu_combo, 1, 1)
        layout.addWidget(self.add_gpu_button, 1, 2)
        layout.addWidget(self.rpc_edit, 2, 1)
        layout.addWidget(self.rpc_button, 2, 2)
        layout.addWidget(QLabel("Split", box), 3, 1)
        layout.addWidget(self.split_combo, 3, 2)
        layout.addWidget(self.rpc_notice, 4, 0, 1, 3)
        layout.setColumnStretch(0, 1)
        self.add_gpu_button.clicked.connect(self._on_add_gpu)
        self.rpc_button.clicked.connect(self._on_probe_rpc)
        self.rpc_edit.returnPressed.connect(self._on_probe_rpc)
        self.remove_device_button.clicked.connect(self._on_remove_device)
        self.split_combo.currentIndexChanged.connect(self._on_split_mode)

    # -- filling ----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        report = self.state.report
        self.busy.set_busy(self.state.detecting)
        self.refresh_button.setEnabled(not self.state.detecting)
        self._fill_notice(report)
        self._fill_gpus(report)
        self._fill_processes(report)
        self._fill_host(report)
        self._fill_target(report)
        self._fill_devices(report)
        self._fill_pc()

    def _fill_pc(self) -> None:
        host = self.state.plan.host
        index = self.pc_combo.findData(host.cpu) if host.cpu else 0
        self.pc_combo.setCurrentIndex(max(0, index))
        if not self.ram_edit.hasFocus():
            self.ram_edit.setText(host.ram or "")
        self.pc_note.setText(
            "The estimate uses this computer's probed CPU and RAM."
            if host.is_this_computer
            else "The estimate assumes that PC: this computer's probe scaled by its clock, its "
            "RAM read at 70 % of its peak (an estimate; the plan and its files do not change)."
        )

    def _fill_devices(self, report: DetectionReport | None) -> None:
        plan = self.state.plan
        self.devices_list.clear()
        for server in plan.split.rpc:
            size = (
                f"{server.memory_mib:,} MiB"
                + (f", {server.free_mib:,} free" if server.free_mib is not None else "")
                if server.memory_mib is not None
                else "size unknown"
            )
            item = QListWidgetItem(
                f"RPC {server.endpoint} · {server.backend or 'CPU'} · {size}", self.devices_list
            )
            item.setData(Qt.ItemDataRole.UserRole, ("rpc", server.endpoint))
        for gpu in plan.split.gpus:
            item = QListWidgetItem(f"GPU {gpu}", self.devices_list)
            item.setData(Qt.ItemDataRole.UserRole, ("gpu", gpu))
        if not plan.is_split:
            QListWidgetItem("Only the device chosen above.", self.devices_list).setFlags(
                Qt.ItemFlag.NoItemFlags
            )
        self.remove_device_button.setEnabled(plan.is_split)
        self.extra_gpu_combo.clear()
        taken = {plan.device.lower(), *(g.lower() for g in plan.split.gpus)}
        for gpu_id in discrete_gpu_ids(report):
            if gpu_id.lower() not in taken:
                self.extra_gpu_combo.addItem(f"{gpu_id} (this computer)", gpu_id)
        if plan.device != "cpu":
            add_catalogue_cards(
                self.extra_gpu_combo, lambda card: f"{card.label} (catalogue)", taken
            )
        can_add = self.extra_gpu_combo.count() > 0 and plan.device not in ("cpu", "auto")
        self.add_gpu_button.setEnabled(can_add)
        self.extra_gpu_combo.setEnabled(can_add)
        self.split_combo.setCurrentIndex(self.split_combo.findData(plan.split.mode.value))
        self.split_combo.setEnabled(plan.is_split)
        probing = self.state.tasks.is_running(RPC_PROBE_KEY)
        self.rpc_button.setEnabled(not probing)
        self.rpc_button.setText("Probing…" if probing else "Probe and add")

    def _fill_notice(self, report: DetectionReport | None) -> None:
        if self.state.detection_error:
            self.notice.show_text(self.state.detection_error, Tone.BAD)
        elif self.state.device_notice:
            self.notice.show_text(self.state.device_notice, Tone.WARN)
        else:
            self.notice.show_text(None)
        problems = []
        if report is not None:
            problems = [p for p in report.problems if not p.startswith("No GPU found")]
        self.problems_label.setText("Detection notes: " + " · ".join(problems) if problems else "")
        self.problems_label.setVisible(bool(problems))

    def _fill_gpus(self, report: DetectionReport | None) -> None:
        self.gpu_tree.clear()
        if report is None:
            self.no_gpu_label.setText(
                "Detecting…" if self.state.detecting else "Detection has not run yet."
            )
            self.no_gpu_label.setVisible(True)
            return
        if not report.gpus:
            sentence = next(
                (p for p in report.problems if p.startswith("No GPU found")), "No GPU found."
            )
            self.no_gpu_label.setText(sentence)
            self.no_gpu_label.setVisible(True)
        else:
            self.no_gpu_label.setVisible(False)
        self.gpu_tree.setVisible(bool(report.gpus))
        for gpu in report.gpus:
            mem = gpu.memory
            item = QTreeWidgetItem(
                [
                    gpu.id,
                    gpu.name,
                    mib(mem.total_bytes),
                    mib(mem.used_bytes),
                    mib(mem.free_bytes),
                    " ".join(x for x in (gpu.driver, gpu.driver_version) if x) or "—",
                    pcie_text(gpu),
                    gpu_role(gpu),
                ]
            )
            tip = f"{gpu.name} ({gpu.vendor.value})"
            if gpu.pci_bus_id:
                tip += f"\nPCI {gpu.pci_bus_id}"
            if gpu.memory.source:
                tip += f"\nmemory from {gpu.memory.source}"
            if gpu.compute_capability:
                tip += f"\ncompute capability {gpu.compute_capability}"
            item.setToolTip(1, tip)
            self.gpu_tree.addTopLevelItem(item)

    def _fill_processes(self, report: DetectionReport | None) -> None:
        self.process_tree.clear()
        if report is None:
            return
        names = {g.id: g.name for g in report.gpus}
        for category in ProcessCategory:
            members = [p for p in report.processes if p.category is category]
            if not members:
                continue
            total = sum(p.used_bytes or 0 for p in members)
            group = QTreeWidgetItem(
                [f"{category.value} ({len(members)})", "", "", mib(total) if total else "—"]
            )
            font = group.font(0)
            font.setBold(True)
            group.setFont(0, font)
            for proc in sorted(members, key=lambda p: -(p.used_bytes or 0)):
                child = QTreeWidgetItem(
                    [
                        proc.name or "(gone)",
                        str(proc.pid),
                        proc.gpu_id,
                        mib(proc.used_bytes) if proc.used_bytes is not None else "not reported",
                    ]
                )
                child.setToolTip(0, proc.command or proc.name or "")
                child.setToolTip(2, names.get(proc.gpu_id, proc.gpu_id))
                group.addChild(child)
            self.process_tree.addTopLevelItem(group)
            group.setExpanded(True)
        if self.process_tree.topLevelItemCount() == 0:
            self.process_tree.addTopLevelItem(
                QTreeWidgetItem(["No process holds GPU memory now.", "", "", ""])
            )

    def _fill_host(self, report: DetectionReport | None) -> None:
        if report is None:
            for label in (
                self.cpu_label,
                self.ram_label,
                self.os_label,
                self.session_label,
                self.display_label,
            ):
                label.setText("…")
            return
        host = report.host
        cores = ""
        if host.physical_cores or host.logical_cpus:
            cores = f" · {host.physical_cores or '?'} cores / {host.logical_cpus or '?'} threads"
        self.cpu_label.setText(f"{host.cpu_model or 'unknown CPU'}{cores}")
        swap = f"; swap {gib(host.swap_total_bytes)}" if host.swap_total_bytes else "; no swap"
        self.ram_label.setText(
            f"{gib(host.ram_total_bytes)} RAM, {gib(host.ram_available_bytes)} available{swap}"
        )
        self.os_label.setText(
            " · ".join(x for x in (host.os_name, host.kernel and f"kernel {host.kernel}") if x)
            or "unknown"
        )
        d = report.display
        session = [x for x in (d.session_type, d.desktop) if x]
        if session and d.display_manager:
            session.append(f"login screen {d.display_manager}")
        if d.kwin_compositing:
            session.append(f"KWin {d.kwin_compositing}")
        if not session:  # a display manager alone is not a session
            dm = f" (login screen: {d.display_manager})" if d.display_manager else ""
            session = [f"no graphical session here{dm}"]
        self.session_label.setText(" · ".join(session))
        if d.display_gpu_ids:
            names = {g.id: g.name for g in report.gpus}
            shown = ", ".join(f"{i} ({names.get(i, '?')})" for i in d.display_gpu_ids)
            outputs = ", ".join(c.name for c in d.connectors if c.active)
            self.display_label.setText(f"driven by {shown}" + (f" on {outputs}" if outputs else ""))
        else:
            self.display_label.setText("no GPU drives a display")
        if d.kwin_renderer:
            self.session_label.setToolTip(f"KWin renderer: {d.kwin_renderer}")

    def _fill_target(self, report: DetectionReport | None) -> None:
        gpus = discrete_gpu_ids(report)
        self.detected_combo.clear()
        if gpus and report is not None:
            self.detected_combo.addItem("Automatic: the detected GPU with the most VRAM", "auto")
            for gpu in report.gpus:
                if gpu.id in gpus:
                    self.detected_combo.addItem(
                        f"{gpu.id} · {gpu.name} · {mib(gpu.memory.total_bytes)}", gpu.id
                    )
        self.radio_detected.setEnabled(bool(gpus))
        self.detected_combo.setEnabled(bool(gpus))
        self.radio_detected.setText(
            "A GPU of this computer" if gpus else "A GPU of this computer (none detected)"
        )
        device = self.state.plan.device
        if device == "cpu":
            self.radio_cpu.setChecked(True)
        elif device in catalogue_ids():
            self.radio_catalogue.setChecked(True)
            self.catalogue_combo.setCurrentIndex(self.catalogue_combo.findData(device))
        elif gpus:
            self.radio_detected.setChecked(True)
            index = self.detected_combo.findData(device)
            if index < 0:
                index = next(
                    (
                        i
                        for i in range(self.detected_combo.count())
                        if str(self.detected_combo.itemData(i)).lower() == device.lower()
                    ),
                    0,
                )
            self.detected_combo.setCurrentIndex(index)
        elif self.state.plan.model.path is not None and report is not None:
            self.radio_cpu.setChecked(True)  # "auto" with no GPU: a model file plans for the CPU
        else:  # "auto" with nothing detected (yet): the demo's catalogue card stands in
            self.radio_catalogue.setChecked(True)
            self.catalogue_combo.setCurrentIndex(self.catalogue_combo.findData(DEFAULT_GPU_CARD))
        self.target_help.setText(self._target_help(report))

    def _target_help(self, report: DetectionReport | None) -> str:
        device = self.state.plan.device
        if device == "cpu":
            return "The plan keeps every layer on the CPU; only system RAM limits the model."
        if device in catalogue_ids():
            card = gpu_card(device)
            text = (
                f"{card.label}: {mib(card.vram_bytes)} usable, {card.bandwidth_gb_s:,.0f} GB/s. "
                f"A typical desktop holds {mib(card.desktop_vram_bytes)} of it "
                f"({mib(card.llvmpipe_desktop_vram_bytes)} with a software-rendered session)."
            )
            if card.desktop_note:
                text += f" {card.desktop_note}"
            return text
        if report is None:
            return "Waiting for detection…"
        gpu = None
        if device != "auto":
            gpu = report.gpu(device)
        else:
            candidates = [g for g in report.gpus if not g.integrated]
            if candidates:
                gpu = max(candidates, key=lambda g: g.memory.total_bytes or 0)
        if gpu is None:
            if self.state.plan.model.path is not None:
                return "No GPU was detected: the plan keeps every layer on the CPU."
            return ""
        return (
            f"Planning for {gpu.id} ({gpu.name}): {mib(gpu.memory.free_bytes)} free of "
            f"{mib(gpu.memory.total_bytes)} now; what the desktop and other programs hold is "
            "counted in the budget."
        )

    # -- events -----------------------------------------------------------------------------------

    def _on_refresh_clicked(self) -> None:
        self.state.refresh_detection()

    def _on_report_changed(self, report: object) -> None:
        self.refresh()

    def _on_activity_changed(self) -> None:
        self.busy.set_busy(self.state.detecting)
        self.refresh_button.setEnabled(not self.state.detecting)

    def _on_target_toggled(self, button: QRadioButton, checked: bool) -> None:
        if not checked:
            return
        if button is self.radio_cpu:
            self._choose("cpu")
        elif button is self.radio_catalogue:
            self._choose(self.catalogue_combo.currentData())
        elif button is self.radio_detected:
            self._choose(self.detected_combo.currentData())

    def _on_detected_chosen(self, index: int) -> None:
        if self.radio_detected.isChecked():
            self._choose(self.detected_combo.itemData(index))

    def _on_catalogue_chosen(self, index: int) -> None:
        if self.radio_catalogue.isChecked():
            self._choose(self.catalogue_combo.itemData(index))

    def _on_add_gpu(self) -> None:
        gpu = self.extra_gpu_combo.currentData()
        if isinstance(gpu, str):
            self.apply({"split.gpus": [*self.state.plan.split.gpus, gpu]})
            self.refresh()

    def _on_remove_device(self) -> None:
        item = self.devices_list.currentItem() or self.devices_list.item(
            self.devices_list.count() - 1
        )
        data = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if not data:
            return
        kind, name = data
        split = self.state.plan.split
        changes: dict[str, object] = {"split.tensor_split": None, "split.fit_margins_mib": None}
        if kind == "gpu":
            changes["split.gpus"] = [g for g in split.gpus if g != name]
        else:
            changes["split.rpc"] = [
                s.model_dump(mode="json") for s in split.rpc if s.endpoint != name
            ]
        self.apply(changes)
        self.refresh()

    def _on_split_mode(self, index: int) -> None:
        mode = self.split_combo.itemData(index)
        if isinstance(mode, str) and mode != self.state.plan.split.mode.value:
            self.apply({"split.mode": mode})

    def _on_probe_rpc(self) -> None:
        """Probe the endpoint in the background; only an answer that is an rpc-server's goes
        into the plan, anything else is one sentence and the plan stays as it was."""
        text = self.rpc_edit.text().strip()
        self.rpc_notice.show_text(f"Probing {text}…", Tone.INFO)

        def job(token: CancelToken) -> ProbedEndpoint:
            return probe_endpoint(text)

        def done(probed: ProbedEndpoint) -> None:
            kept = [
                s.model_dump(mode="json")
                for s in self.state.plan.split.rpc
                if s.endpoint != probed.endpoint
            ]
            if self.apply({"split.rpc": [*kept, probed.entry]}) is not None:
                self.rpc_notice.show_text(probed.summary, Tone.GOOD)
                self.rpc_edit.clear()
            self.refresh()

        def failed(exc: BaseException) -> None:
            self.rpc_notice.show_text(error_sentence(exc), Tone.BAD)
            self.refresh()

        self.state.tasks.run(job, done, failed, key=RPC_PROBE_KEY)
        self.refresh()

    def _on_pc_chosen(self, index: int) -> None:
        cpu = self.pc_combo.itemData(index)
        if self.apply({"host.cpu": cpu if isinstance(cpu, str) else None}) is not None:
            self.notice.show_text(None)

    def _on_ram_edited(self) -> None:
        text = self.ram_edit.text().strip()
        try:
            ram = checked_ram(text, self.state.plan.host.cpu) if text else None
        except MtpStudioError as exc:
            self.notice.show_text(error_sentence(exc), Tone.BAD)
            return
        if ram != self.state.plan.host.ram and self.apply({"host.ram": ram}) is not None:
            self.notice.show_text(None)

    def _choose(self, device: object) -> None:
        if not isinstance(device, str) or self._refreshing:
            return
        if self.apply({"device": device}) is not None:
            self.state.device_notice = None
            self.notice.show_text(None)
            self.target_help.setText(self._target_help(self.state.report))


def add_catalogue_cards(
    combo: QComboBox, text: Callable[[GpuCard], str], taken: Collection[str] = ()
) -> None:
    """The catalogue's cards into ``combo``, grouped by vendor (a separator between the
    groups; desktop cards before laptop cards), without the ids in ``taken``."""
    for cards in gpu_cards_by_vendor().values():
        shown = [card for card in cards if card.id.lower() not in taken]
        if shown and combo.count():
            combo.insertSeparator(combo.count())
        for card in shown:
            combo.addItem(text(card), card.id)
