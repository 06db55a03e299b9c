"""Controls built from a Plan setting's one entry (``core.plan.settings``): a spin box over its
declared range and step with its word for None, a combo of its values in its words, a line.

Each control is bound to its dotted path: how to read it and how to show a value. A form gets
the setting's own label with :meth:`SettingControls.row`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QWidget,
)

from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import label_of, setting, value_choices
from mtpstudio.ui.widgets.number_box import NumberBox

_TRISTATE = {None: "auto", True: "on", False: "off"}
"""A switch's values as a combo's data (auto, on, off)."""


def plan_value(plan: Plan, path: str) -> Any:
    """The Plan's value at a dotted path, enums as their values."""
    node: Any = plan
    for name in path.split("."):
        node = getattr(node, name)
    if isinstance(node, Enum):
        return node.value
    if isinstance(node, Path):
        return str(node)
    return node


def tristate_data(value: bool | None) -> str:
    """A switch's value as its combo's data."""
    return _TRISTATE[value]


@dataclass
class Control:
    """A widget bound to a Plan path: how to read it and how to show a value."""

    path: str
    widget: QWidget
    read: Callable[[], Any]
    write: Callable[[Any], None]


class SettingControls:
    """Builds the controls of ``parent`` from their settings' entries and keeps them by path;
    ``changed(path)`` is called when the user changes one."""

    def __init__(self, parent: QWidget, changed: Callable[[str], None]) -> None:
        self.parent = parent
        self.changed = changed
        self.by_path: dict[str, Control] = {}

    def _register(self, control: Control, signal: Any) -> None:
        self.by_path[control.path] = control
        signal.connect(lambda *_: self.changed(control.path))

    def row(self, form: QFormLayout, path: str, widget: QWidget) -> None:
        """``widget`` on ``form`` under the setting's label."""
        form.addRow(label_of(path), widget)

    def spin(self, path: str, suffix: str = "", kind: str = "count") -> NumberBox:
        """A spin box over the setting's declared range and step; where None is a choice (the
        engine's own), one step below the range, shown as the setting's ``none_label``."""
        declared = setting(path)
        special = declared.none_label
        low, high, step = declared.whole_range()
        none = low - 1 if special is not None else None
        spin = NumberBox(kind, self.parent)
        spin.setRange(low if none is None else none, high)
        spin.setSingleStep(step)
        spin.setSuffix(suffix)
        spin.setKeyboardTracking(False)
        spin.setGroupSeparatorShown(True)
        if special is not None:
            spin.setSpecialValueText(special)

        def read() -> Any:
            value = spin.value()
            return None if none is not None and value == none else value

        def write(value: Any) -> None:
            spin.setValue(none if value is None and none is not None else int(value))

        self._register(Control(path, spin, read, write), spin.valueChanged)
        return spin

    def double(self, path: str) -> QDoubleSpinBox:
        """A spin box over the setting's declared range; where None is a choice, one step below
        the range, shown as the setting's ``none_label``."""
        declared = setting(path)
        special = declared.none_label
        spin = QDoubleSpinBox(self.parent)
        low, step = float(declared.low or 0.0), float(declared.step)
        none = low - step if special is not None else None
        spin.setRange(low if none is None else none, float(declared.high or 0.0))
        spin.setSingleStep(step)
        spin.setDecimals(2)
        spin.setKeyboardTracking(False)
        if special is not None:
            spin.setSpecialValueText(special)

        def read() -> Any:
            value = spin.value()
            return None if none is not None and value <= none + step / 2 else value

        def write(value: Any) -> None:
            spin.setValue(none if value is None and none is not None else float(value))

        self._register(Control(path, spin, read, write), spin.valueChanged)
        return spin

    def combo(self, path: str) -> QComboBox:
        """A combo over the setting's values, in its declared words."""
        combo = QComboBox(self.parent)
        for value, label in value_choices(path):
            combo.addItem(label, value.value)

        def write(value: Any) -> None:
            combo.setCurrentIndex(max(0, combo.findData(value)))

        self._register(Control(path, combo, combo.currentData, write), combo.currentIndexChanged)
        return combo

    def tristate(self, path: str) -> QComboBox:
        """A combo for auto (None) / on (True) / off (False), in the setting's words."""
        combo = QComboBox(self.parent)
        for value, label in setting(path).labels:
            combo.addItem(label, _TRISTATE[value])
        by_data = {data: value for value, data in _TRISTATE.items()}

        def read() -> Any:
            return by_data.get(combo.currentData())

        def write(value: Any) -> None:
            combo.setCurrentIndex(max(0, combo.findData(_TRISTATE.get(value, "auto"))))

        self._register(Control(path, combo, read, write), combo.currentIndexChanged)
        return combo

    def line(self, path: str, optional: bool = False) -> QLineEdit:
        """A line of text; with ``optional``, empty is None."""
        edit = QLineEdit(self.parent)

        def read() -> Any:
            text = edit.text().strip()
            return None if optional and not text else text

        self._register(
            Control(path, edit, read, lambda v: edit.setText("" if v is None else str(v))),
            edit.editingFinished,
        )
        return edit

    def of_kind(self, path: str) -> QWidget:
        """The control a setting's kind calls for: a spin box for a number, a combo for a
        choice or a switch, a line for text or a path."""
        kind = setting(path).kind
        if kind in ("int", "tokens"):
            return self.spin(path, kind="tokens" if kind == "tokens" else "count")
        if kind == "float":
            return self.double(path)
        if kind == "choice":
            return self.combo(path)
        if kind == "switch":
            return self.tristate(path)
        return self.line(path, optional=True)

    def pair(self, first: QWidget, second: QWidget) -> QWidget:
        """Two controls side by side on one form row."""
        box = QWidget(self.parent)
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(first)
        row.addWidget(second)
        return box
