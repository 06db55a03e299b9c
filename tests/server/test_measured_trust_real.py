"""A real launch stores its reconciliation; `mtpstudio plan` then calls those figures measured."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mtpstudio.cli.main import main
from mtpstudio.core.memory.measured import HOST
from mtpstudio.core.plan.io import plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.process import ServerProcess
from mtpstudio.core.usecases.launch import find_build, prepare_launch, run_launch

pytestmark = [pytest.mark.engine]


def _trust(plan_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert main(["plan", "--plan", str(plan_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (device,) = data["devices"]
    assert device["id"] == "CPU"
    trust: dict[str, str] = device["segment_trust"]
    return trust


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_plan_shows_measured_after_a_launch_of_the_same_build(
    flavour: str,
    plan_for: Callable[..., Plan],
    launched: list[ServerProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A measurement store of its own: other tests launch the same tiny models on these builds.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    plan = plan_for(flavour)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    before = _trust(path, capsys)
    assert "measured" not in before.values()

    result, proc = run_launch(prepare_launch(plan, find_build(plan)), timeout=120)
    assert proc is not None
    launched.append(proc)
    assert result.ok and result.reconciliation is not None, result.prediction_error
    rec = result.reconciliation
    proc.stop()

    after = _trust(path, capsys)
    for segment, trust in after.items():
        row = rec.row("kv_cache" if segment == "recurrent_state" and flavour == "ik" else segment,
                      HOST)  # fmt: skip
        agrees = (
            row is not None
            and row.actual_mib > 0
            and abs(row.delta_mib) <= max(1.0, 0.02 * row.predicted_mib)
        )
        assert (trust == "measured") == agrees, (segment, row)
    assert after["weights"] == after["kv_cache"] == "measured"
    # A plan with another context: its KV cache is a new figure, no longer measured.
    save_plan(plan_with(plan, {"runtime.ctx": 1024}), path)
    assert _trust(path, capsys)["kv_cache"] == "exact"
    text_code = main(["plan", "--plan", str(path)])
    assert text_code == 0
    budget = capsys.readouterr().out.split("Memory budget (the CPU: system RAM):")[1]
    weights_line = next(x for x in budget.splitlines() if " W weights " in x)
    assert weights_line.rstrip().endswith("measured")
