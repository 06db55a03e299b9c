"""The comparison after a unit's load (``mtpstudio poststart``, its ``ExecStartPost=``) with the
real engines on tiny models: the wait for ``/health``, the engine's own load log against the
plan's figures per device, a plan that is off named as such, an engine that dies named too.
The journal it reads on a booted system is the journey's (tests/journey)."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable

import pytest
from support.waiting import scaled

from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import budget_for
from mtpstudio.core.server.process import ServerProcess
from mtpstudio.core.service.poststart import (
    LoadWait,
    load_lines,
    poststart_lines,
    wait_for_load,
)
from mtpstudio.core.service.prestart import planned_load
from mtpstudio.core.usecases.launch import find_build, prepare_launch, resolve_launch, run_launch
from mtpstudio.helper.prestart_shape import PrestartShape

pytestmark = [pytest.mark.engine]
UNIT = "mtpstudio-llama.service"


def started(plan: Plan, launched: list[ServerProcess]) -> tuple[PrestartShape, str]:
    """The plan's engine started as mtpstudio starts it (``-lv 4``, as the unit passes it),
    and the comparison's values as ``prestart_for`` writes them into the unit."""
    build = find_build(plan)
    _, resolved = resolve_launch(plan, build)
    loads = planned_load(budget_for(resolved), resolved)
    result, proc = run_launch(prepare_launch(plan, build), timeout=scaled(120))
    assert proc is not None
    launched.append(proc)
    assert result.ok, result.diagnosis
    shape = PrestartShape(python="/usr/bin/python3", unit=UNIT, needs=(),
                          port=plan.server.port, loads=loads)  # fmt: skip
    wait = wait_for_load(shape, proc, limit_s=scaled(60))
    assert wait == LoadWait(True)
    return shape, result.log_path.read_text()


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_the_load_is_compared_with_the_plan_per_device(
    flavour: str, plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    shape, log = started(plan_for(flavour), launched)
    assert [d for d, _ in shape.loads] == ["CPU"]
    lines = poststart_lines(shape, LoadWait(True), (log, None))
    assert len(lines) == 1, lines
    planned = shape.loads[0][1]
    assert lines[0].startswith(f"mtpstudio: {UNIT}: load: CPU holds "), lines
    assert f"the plan said {planned:,} MiB" in lines[0] and lines[0].endswith(": as planned."), (
        lines
    )
    assert load_lines("other line\n" + lines[0] + "\n", UNIT) == lines  # what status reads back

    off = dataclasses.replace(shape, loads=(("CPU", planned + 2048),))
    said = poststart_lines(off, LoadWait(True), (log, None))
    assert "MiB less than planned" in said[0], said
    gpu = dataclasses.replace(shape, loads=(("CUDA0", 9), ("CPU", planned)))  # a tiny plan too
    said = poststart_lines(gpu, LoadWait(True), (log, None))
    assert said[0].startswith(f"mtpstudio: {UNIT}: load: CUDA0 holds 0 MiB"), said
    assert "nothing was placed there" in said[0] and said[1].endswith("as planned."), said


def test_an_engine_that_dies_during_the_wait_is_named(
    plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    plan = plan_for("upstream")
    shape, log = started(plan, launched)
    proc = launched[-1]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    wait = wait_for_load(shape, proc, limit_s=scaled(30))
    assert wait == LoadWait(False, "the engine stopped before it answered /health")
    lines = poststart_lines(shape, wait, (log, None))
    assert "the engine stopped before it answered /health" in lines[0], lines


def test_a_journal_the_account_cannot_read_is_said() -> None:
    shape = PrestartShape(python="/usr/bin/python3", unit=UNIT, needs=(), port=8080,
                          loads=(("CPU", 100),))  # fmt: skip
    lines = poststart_lines(shape, LoadWait(True), ("", "journalctl could not read it (exit 1)"))
    assert lines == [
        f"mtpstudio: {UNIT}: load: the load is not compared: this start's journal cannot be "
        "read (journalctl could not read it (exit 1))."
    ]
    assert poststart_lines(shape, LoadWait(True), ("no buffers here\n", None))[0].endswith(
        "a journal this account only partly reads?)."
    )
