"""The Desktop VRAM and Service pages until their issues land.

Each says plainly what it will offer and shows only real, read-only information; no control
here pretends to change anything.
"""

from __future__ import annotations

import shlex

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.planning import DESKTOP_CATEGORIES
from mtpstudio.ui.formatting import mib
from mtpstudio.ui.pages.base import PlanPage
from mtpstudio.ui.state import WizardState
from mtpstudio.ui.widgets.common import Notice, Tone


def _bullets(title: str, items: list[str]) -> str:
    rows = "".join(f"<li>{item}</li>" for item in items)
    return f"<p><b>{title}</b></p><ul style='margin-top:0'>{rows}</ul>"


class _LaterPage(PlanPage):
    """A page that lists what it will offer, under a 'not available yet' notice."""

    offers: tuple[str, ...] = ()

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.notice = Notice(self)
        self.notice.show_text(
            "Not available yet: this step arrives in a later release. Nothing on this page "
            "changes your system.",
            Tone.INFO,
        )
        self.offers_label = QLabel(_bullets("This page will offer:", list(self.offers)), self)
        self.offers_label.setWordWrap(True)
        self.offers_label.setTextFormat(Qt.TextFormat.RichText)
        self.body = QVBoxLayout(self)
        self.body.addWidget(self.notice)
        self.body.addWidget(self.offers_label)


class DesktopPage(_LaterPage):
    """Desktop VRAM: who holds VRAM for the desktop now (read-only), and what will come."""

    slug = "desktop-vram"
    offers = (
        "who holds VRAM for the desktop now, per GPU (shown below already)",
        "the ways to take it back, cheapest first: an NVIDIA driver profile, the display on "
        "the iGPU, a software-rendered (llvmpipe) login session",
        "the <i>Apply llvmpipe session</i> button, through the privileged helper",
        "how to switch back",
    )

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("Desktop VRAM")
        self.setSubTitle("The desktop quietly holds GPU memory that the model could use.")
        self.holders = QTreeWidget(self)
        self.holders.setHeaderLabels(["Desktop process", "PID", "GPU", "VRAM"])
        self.holders.setRootIsDecorated(False)
        self.holders.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.body.addWidget(self.summary)
        self.body.addWidget(self.holders, 1)
        state.report_changed.connect(lambda _: self.refresh())

    def _refresh(self) -> None:
        self.holders.clear()
        report = self.state.report
        if report is None:
            self.summary.setText("Detection has not answered yet.")
            return
        desktop = [p for p in report.processes if p.category in DESKTOP_CATEGORIES]
        for proc in sorted(desktop, key=lambda p: -(p.used_bytes or 0)):
            self.holders.addTopLevelItem(
                QTreeWidgetItem(
                    [
                        f"{proc.name or '(gone)'} ({proc.category.value})",
                        str(proc.pid),
                        proc.gpu_id,
                        mib(proc.used_bytes) if proc.used_bytes is not None else "not reported",
                    ]
                )
            )
        total = sum(p.used_bytes or 0 for p in desktop)
        if desktop:
            self.summary.setText(f"The desktop holds {mib(total)} of GPU memory now.")
        else:
            self.holders.addTopLevelItem(QTreeWidgetItem(["(none)", "", "", ""]))
            self.summary.setText(
                "No desktop process holds GPU memory on this computer now (or none was "
                "detected). A catalogue GPU's budget counts a typical desktop instead."
            )


class ServicePage(_LaterPage):
    """Service: the command line the service will run, and what will come."""

    slug = "service"
    offers = (
        "the rendered systemd unit, environment file and launch script, with explanations",
        "export to a folder, or install for your user",
    )

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(state, parent)
        self.setTitle("Service")
        self.setSubTitle("Run the server as a systemd service with the planned command line.")
        self.body.addWidget(QLabel("<b>The command the service will run</b>", self))
        self.command = QPlainTextEdit(self)
        self.command.setReadOnly(True)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        self.command.setFont(mono)
        self.body.addWidget(self.command, 1)

    def _refresh(self) -> None:
        evaluation = self.state.evaluation()
        if evaluation is None:
            self.command.setPlainText("The model header has not been read yet.")
        elif evaluation.argv is None:
            self.command.setPlainText(f"No command line: {evaluation.error}")
        else:
            self.command.setPlainText(shlex.join(evaluation.argv))
