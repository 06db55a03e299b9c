"""Every GUI control bound to a Plan setting offers the declared range and step, no other."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox
from pytestqt.qtbot import QtBot

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.plan.settings import SETTINGS, native_context, setting
from mtpstudio.ui.widgets.number_box import NumberBox

from .conftest import WizardFactory, go_to

BOUNDED = {p for p, s in SETTINGS.items() if s.low is not None and s.high is not None}


def test_the_engine_pages_number_boxes_are_the_declarations(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))
    go_to(wizard, 2)
    shown: set[str] = set()
    for path, control in wizard.engine_page.controls.items():
        spin = control.widget
        if not isinstance(spin, QSpinBox | QDoubleSpinBox):
            continue
        declared = setting(path)  # KeyError: a number box with a range of its own
        assert declared.low is not None and declared.high is not None
        # a box that can say "none" (all layers, the engine's threads) has it one step below
        below = declared.step if isinstance(spin, QDoubleSpinBox) else 1  # a fraction: a step
        low = declared.low - below if spin.specialValueText() else declared.low
        assert (spin.minimum(), spin.maximum(), spin.singleStep()) == (
            low,
            declared.high,
            declared.step,
        ), path
        shown.add(path)
    assert shown == BOUNDED  # every number a user sets has its box, and only those


def test_the_budget_sliders_are_the_declarations(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))
    go_to(wizard, 3)
    page = wizard.budget_page
    info = wizard.state.model_info
    assert info is not None
    for path, row in page.rows.items():
        low, high, step = setting(path).whole_range()
        assert row.unit == row.spin.singleStep() == step, path
        assert row.spin.minimum() == low and row.slider.minimum() * step == low, path
        assert row.slider.maximum() * step <= high, path
        if path != "runtime.n_cpu_moe":  # at most the model's layers: the model's range
            assert row.spin.maximum() == high, path
    margin = setting("runtime.fit_margin_mib")
    assert page.margin.slider.maximum() * margin.step == margin.slider_high
    # the context slider stops where the one native-context rule says
    top = native_context(info.context_length)
    assert top is not None and top > wizard.plan.runtime.ctx
    assert page.ctx.slider.maximum() == top // setting("runtime.ctx").step


def test_a_valid_plan_is_shown_as_it_is_even_far_up_the_range(make_wizard: WizardFactory) -> None:
    """Boxes with ranges of their own showed 1000 CPU expert layers as 512, 2000 threads as
    1024 and a 20 GiB margin as 16 GiB: the declared range holds whatever the Plan accepts."""
    plan = plan_with(
        Plan(device=DEFAULT_GPU_CARD),
        {
            "runtime.moe": "n_cpu_moe",
            "runtime.n_cpu_moe": 1000,
            "runtime.threads": 2000,
            "runtime.fit_margin_mib": 20480,
            "runtime.batch": 131072,
            "runtime.n_gpu_layers": 2000,
        },
    )
    wizard = make_wizard(plan)
    go_to(wizard, 2)
    page = wizard.engine_page
    shown = {p: page.controls[p].read() for p in ("runtime.n_cpu_moe", "runtime.threads")}
    assert shown == {"runtime.n_cpu_moe": 1000, "runtime.threads": 2000}
    assert page.margin.value() == 20480 and page.batch.value() == 131072
    assert page.gpu_layers.value() == 2000
    assert wizard.plan == plan


def test_a_box_sized_for_typical_values_keeps_its_width_and_its_range(qtbot: QtBot) -> None:
    """The batch boxes hold the declared 4 Mi but stay as wide as a five-digit batch, so the
    Engine page is no wider than with boxes that stopped at 65,536."""
    wide, narrow, capped = NumberBox(), NumberBox(), NumberBox()
    for box in (wide, narrow, capped):
        qtbot.addWidget(box)
        box.setGroupSeparatorShown(True)
    low, high, _ = setting("runtime.batch").whole_range()
    wide.setRange(low, high)
    narrow.setRange(low, 65536)
    capped.setRange(low, high)
    capped.size_for(65536)
    assert wide.sizeHint().width() > narrow.sizeHint().width()
    assert capped.sizeHint().width() == narrow.sizeHint().width()
    assert capped.minimumSizeHint().width() == narrow.minimumSizeHint().width()
    capped.setValue(high)
    assert capped.value() == high  # the range is the declared one


def test_the_engine_page_shows_a_control_for_each_setting_of_its_groups(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))
    go_to(wizard, 2)
    page = wizard.engine_page
    assert set(page.controls) == {p for p, s in SETTINGS.items() if s.form}
    # each under its entry's label
    assert page.factory.by_path is page.controls
    combo = page.controls["runtime.load_mode"].widget
    assert [combo.itemText(i) for i in range(combo.count())] == [  # type: ignore[attr-defined]
        words for _, words in setting("runtime.load_mode").labels
    ]
