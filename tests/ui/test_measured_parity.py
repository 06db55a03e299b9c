"""A stored launch counts the same in the GUI as in `mtpstudio plan`: both build the plan's
context with ``usecases.planning_context.planning_context_for``, which adds the stored
measurements, so the wizard marks the same figures "measured" as `plan --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from mtpstudio.core.detect.gather import detect_for
from mtpstudio.core.memory.measured import (
    ReconcileRow,
    Reconciliation,
    build_key,
    predicted_segments,
)
from mtpstudio.core.plan.io import load_plan, plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import budget_for, machine_for, resolve
from mtpstudio.core.server.reconcile import save_measurement
from mtpstudio.core.usecases.planning_context import planning_context_for
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.wizard import MtpWizard


def _store_a_launch(plan: Plan) -> str:
    """A launch of this plan as run_launch stores it, every figure logged as predicted except
    the compute buffer (20 % larger); returns the device it ran on."""
    pctx = planning_context_for(plan, machine_for(detect_for(plan)), measurements={})
    resolved = resolve(plan, pctx)
    assert resolved.build.probed  # a stored launch applies to a probed build only
    budget = budget_for(resolved)
    assert budget.measured == frozenset()
    rows = [
        ReconcileRow(segment, device, mib, mib * (1.2 if segment == "compute" else 1.0))
        for (segment, device), mib in predicted_segments(budget, resolved.profile.memory).items()
    ]
    device = resolved.target.device.id
    save_measurement(Reconciliation(build_key(resolved.build.build), device, tuple(rows)))
    return device


def _measured(budget_json: dict[str, Any]) -> dict[str, list[str]]:
    """Per device (and the host): the segments marked measured."""
    places = [*budget_json["devices"], {"id": "host", **budget_json["host"]}]
    return {
        str(p.get("id", p.get("name"))): sorted(
            s for s, trust in p.get("segment_trust", {}).items() if trust == "measured"
        )
        for p in places
    }


def test_the_wizard_marks_the_same_figures_measured_as_plan_json(
    qtbot: QtBot,
    store: StateStore,
    tiny_model: Callable[..., Path],
    engine: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    plan = plan_with(Plan(), {"model.path": str(tiny_model("hybrid-mtp", dtype="q8_0")),
                              "model.card": None, "device": "rtx-4070-super",
                              "engine.binary": str(engine("upstream")),
                              "runtime.ctx": 4096})  # fmt: skip
    plan_file = tmp_path / "plan.json"
    save_plan(plan, plan_file)
    device = _store_a_launch(plan)

    env = {k: v for k, v in os.environ.items() if k not in {"DISPLAY", "WAYLAND_DISPLAY"}}
    shown = subprocess.run(
        [sys.executable, "-m", "mtpstudio", "plan", "--plan", str(plan_file), "--json"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    cli = _measured(json.loads(shown.stdout))
    assert cli[device], cli  # the stored launch confirmed figures on its device
    assert "compute" not in cli[device]  # logged 20 % off the prediction

    wizard = MtpWizard(load_plan(plan_file), store=store, remember=False)
    qtbot.addWidget(wizard)
    try:
        assert wizard.tasks.wait_idle(120)
        evaluation = wizard.state.evaluation()
        assert evaluation is not None and evaluation.result is not None, evaluation
        gui = _measured(evaluation.result.budget.to_json())
    finally:
        wizard.tasks.shutdown()
    assert gui == cli
