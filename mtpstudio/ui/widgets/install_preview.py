"""The files an install would write, each against what is there now, before anything happens."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mtpstudio.core.desktop.install import FilePreview
from mtpstudio.ui.widgets.code_view import CodeView

EXPLANATION_COLUMN = 2


class WrappedRows(QStyledItemDelegate):
    """Rows as tall as their text wrapped to its column (QTreeView alone keeps one line)."""

    def __init__(self, tree: QTreeWidget) -> None:
        super().__init__(tree)
        self.tree = tree

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        base = super().sizeHint(option, index)
        if index.column() != EXPLANATION_COLUMN:  # the path is elided, the state is one word
            return base
        width = max(10, self.tree.header().sectionSize(index.column()) - 8)
        text = str(index.data() or "")
        flags = int(Qt.TextFlag.TextWordWrap)
        height = option.fontMetrics.boundingRect(QRect(0, 0, width, 1 << 20), flags, text).height()
        return QSize(base.width(), max(base.height(), height + 4))


class InstallPreview(QGroupBox):
    """Notes, the file list (new / changed / unchanged) and the diff; Install or Cancel."""

    confirmed = Signal()
    dismissed = Signal()
    visibility_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Files to install", parent)
        self.notes = QLabel(self)
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #4b5563;")
        self.files = QTreeWidget(self)
        self.files.setHeaderLabels(["File", "Now", "What it is"])
        self.files.setRootIsDecorated(False)
        header = self.files.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # a long path takes at most 40 % of the width (elided in the middle, whole in its
        # tooltip): "What it is" keeps room for a readable line, not a word per line
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)  # the explanation wraps
        self.files.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.files.setWordWrap(True)
        self.files.setUniformRowHeights(False)
        self.files.setItemDelegate(WrappedRows(self.files))
        header.sectionResized.connect(lambda *_: self._fit_table())
        self.diff = CodeView("diff", self)
        self.diff.setMinimumHeight(8 * self.diff.fontMetrics().lineSpacing())
        self.install_button = QPushButton("Install", self)
        self.install_button.setDefault(False)
        self.cancel_button = QPushButton("Cancel", self)
        buttons = QHBoxLayout()
        buttons.addStretch()
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.install_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.notes)
        layout.addWidget(self.files)
        layout.addWidget(self.diff, 3)
        layout.addLayout(buttons)
        self.install_button.clicked.connect(self.confirmed)
        self.cancel_button.clicked.connect(self.dismissed)
        self.setVisible(False)

    def show_preview(
        self, title: str, previews: Sequence[FilePreview], notes: Sequence[str], action: str
    ) -> None:
        self.setTitle(title)
        self.notes.setText(" ".join(notes))
        self.notes.setVisible(bool(notes))
        self.files.clear()
        for item in previews:
            row = QTreeWidgetItem([str(item.path), item.state, item.explanation])
            for column in range(3):
                row.setToolTip(column, f"{item.path} ({item.state}): {item.explanation}")
            self.files.addTopLevelItem(row)
        diffs = [p.diff if p.diff else f"{p.path}: unchanged\n" for p in previews]
        self.diff.set_text("\n".join(d.rstrip("\n") for d in diffs) + "\n")
        self.install_button.setText(action)
        self._fit_table()
        self.setVisible(True)
        self.visibility_changed.emit(True)

    def hide_preview(self) -> None:
        self.setVisible(False)
        self.visibility_changed.emit(False)

    def _fit_path_column(self) -> None:
        wanted = self.files.sizeHintForColumn(0) + 12
        room = self.files.viewport().width()
        width = min(wanted, max(room * 2 // 5, 120))
        if self.files.header().sectionSize(0) != width:
            self.files.header().resizeSection(0, width)

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)  # type: ignore[arg-type]
        self._fit_path_column()

    def _fit_table(self) -> None:
        """The table as tall as its rows (every file readable), the diff gets the rest."""
        self._fit_path_column()
        self.files.doItemsLayout()  # row heights follow the wrapped explanations
        rows = self.files.topLevelItemCount()
        heights = [self.files.sizeHintForRow(i) for i in range(rows)]
        body = sum(h for h in heights if h > 0) or self.fontMetrics().lineSpacing()
        header = self.files.header().sizeHint().height()
        frame = 2 * self.files.frameWidth()
        self.files.setFixedHeight(header + frame + body + 4)
