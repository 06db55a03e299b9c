"""Start launches exactly the plan the pages resolved and showed: nothing is detected again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from support.plans import cpu_plan

from mtpstudio.core.detect.engines import probe_engine_file
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.planner.resolve import launch_spec_for, resolve
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.usecases.launch import resolve_launch
from mtpstudio.ui.pages.launch import ServerExitChoice
from mtpstudio.ui.server_process import ServerPhase
from mtpstudio.ui.wizard import PageId

from .conftest import WizardFactory, go_to, gpu_report

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_server_left")]


def test_start_runs_the_resolved_plan_the_pages_showed_not_a_new_detection(
    qtbot: QtBot,
    make_wizard: WizardFactory,
    engine: Callable[[str], Path],
    tiny_model: Callable[..., Path],
) -> None:
    binary = engine("upstream")
    probed = probe_engine_file(binary, SubprocessRunner())
    # the wizard's detection: a 12 GB RTX 4070 SUPER and this real upstream build; the plan
    # names neither (device auto, no binary): the pages plan it for CUDA0 with that build
    report = gpu_report(engines=[probed])
    plan = plan_with(
        cpu_plan(binary, tiny_model("dense")), {"device": "auto", "engine.binary": None}
    )
    wizard = make_wizard(plan, report=report, remember=False)
    go_to(wizard, PageId.LAUNCH)
    page = wizard.launch_page
    page.ask_server_exit = lambda: ServerExitChoice.STOP  # type: ignore[method-assign]
    pctx = wizard.state.context()
    assert pctx is not None
    shown = resolve(wizard.plan, pctx)  # what the Budget and Service pages showed
    assert shown.target.device.id == "CUDA0" and shown.build.probed
    spec, _ = launch_spec_for(shown, for_mtpstudio_launch=True, model_path=shown.plan.model.path)
    expected = list(spec.argv)
    # what a detection of this computer now (no such GPU here) would make of the same plan
    pinned = plan_with(wizard.plan, {"engine.binary": str(binary)})
    path, again = resolve_launch(pinned, shown.build.build)
    detected_now = list(launch_spec_for(again, for_mtpstudio_launch=True, model_path=path)[0].argv)
    assert again.target.device.id != "CUDA0" and detected_now != expected

    page.start_button.click()
    qtbot.waitUntil(lambda: page.server.phase is not ServerPhase.PREPARING, timeout=60_000)
    prepared = page.server.prepared
    assert prepared is not None, page.problem.sentence
    assert list(prepared.spec.argv) == expected
    assert prepared.plan.engine.binary == binary  # the build the Engine page showed, named
    assert prepared.plan.device == "auto"
    page.server.stop_now(grace=3.0)
