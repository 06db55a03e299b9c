"""The Plan is the contract: for the same plan file on the same machine, `mtpstudio plan` and
`mtpstudio render` (a real subprocess) and the wizard (opened on that file) give the same command
line, unit, environment file and launch script. Both detect this machine for real."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from support.cli import run_cli

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.plan.io import load_plan, plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.service.render import UnitScope
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import go_to

ACCOUNT = "alice"
FILES = {"unit": "mtpstudio-llama.service", "env": "mtpstudio-llama.env",
         "script": "mtpstudio-llama.sh"}  # fmt: skip
PLANS = ("moe-card", "dense-card", "tiny-gguf", "cpu-target", "draft-model", "two-gpus", "rpc")


def make_plan(
    kind: str, tiny_model: Callable[..., Path], engine: Callable[[str], Path], folder: Path
) -> Plan:
    """Seven plans, each on a build the test bench built where a unit is written (a unit is
    written only when its engine is on this computer): catalogue cards as full-size zero-weight
    files (MoE, dense: units are written only for model files), a real tiny GGUF on a probed
    build (device auto, as `gui --plan tiny.json` opens it), an explicit CPU target with fit
    asked for, a separate draft model, the MoE card over two catalogue GPUs, and a tiny GGUF on
    a probed RPC build split over an rpc-server endpoint (as its probe recorded it) and a GPU."""
    base = Plan()
    if kind == "two-gpus":
        model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", folder / "Qwen3.6-35B-A3B.gguf")
        return plan_with(base, {"model.path": str(model), "model.card": None,
                                "device": "rtx-4070-super", "split.gpus": ["rtx-3060-12gb"],
                                "engine.binary": str(engine("upstream")),
                                "runtime.ctx": 65536})  # fmt: skip
    if kind == "rpc":
        model = tiny_model("hybrid-mtp", dtype="q8_0")
        rpc = {"host": "192.168.1.20", "port": 50052, "memory_mib": 8192, "free_mib": 8000,
               "backend": "CPU"}  # fmt: skip
        return plan_with(base, {"model.path": str(model), "model.card": None,
                                "engine.binary": str(engine("upstream-rpc")),
                                "device": "rtx-4060-ti-16gb", "split.rpc": [rpc],
                                "runtime.ctx": 4096})  # fmt: skip
    if kind == "moe-card":
        model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", folder / "Qwen3.6-35B-A3B.gguf")
        return plan_with(base, {"model.path": str(model), "model.card": None,
                                "device": "rtx-4070-super", "runtime.ctx": 65536,
                                "engine.binary": str(engine("upstream")),
                                "runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 20})  # fmt: skip
    if kind == "dense-card":
        model = zero_gguf_for_card("qwen3.6-27b-iq4_xs", folder / "Qwen3.6-27B.gguf")
        return plan_with(base, {"model.path": str(model), "model.card": None,
                                "device": "rtx-4060-ti-16gb", "engine.binary": str(engine("ik")),
                                "engine.flavour": "ik", "runtime.moe": "gpu"})  # fmt: skip
    if kind == "tiny-gguf":
        model = tiny_model("hybrid-mtp", dtype="q8_0")
        return plan_with(base, {"model.path": str(model), "model.card": None,
                                "engine.binary": str(engine("upstream")),
                                "runtime.ctx": 4096})  # fmt: skip
    if kind == "cpu-target":
        model = tiny_model("moe")
        return plan_with(base, {"model.path": str(model), "model.card": None, "device": "cpu",
                                "engine.binary": str(engine("upstream")),
                                "runtime.moe": "fit", "runtime.ctx": 2048})  # fmt: skip
    main, draft = tiny_model("dense"), tiny_model("draft")
    return plan_with(base, {"model.path": str(main), "model.card": None,
                            "draft.path": str(draft), "device": "rtx-4070-super",
                            "engine.binary": str(engine("upstream")),
                            "runtime.ctx": 8192})  # fmt: skip


def cli_side(plan_file: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    shown = run_cli("plan", "--plan", str(plan_file), "--json")
    assert shown.returncode == 0, shown.stderr
    argv = json.loads(shown.stdout)["argv"]
    rendered = run_cli("render", "--plan", str(plan_file), "--out", str(out), "--user", ACCOUNT)
    assert rendered.returncode == 0, rendered.stderr
    return argv, {key: (out / name).read_text() for key, name in FILES.items()}


def gui_side(qtbot: QtBot, store: StateStore, plan_file: Path) -> tuple[list[str], dict[str, str]]:
    """`mtpstudio gui --plan FILE`: the wizard on the loaded plan, with its own detection."""
    wizard = MtpWizard(load_plan(plan_file), store=store, remember=False)
    qtbot.addWidget(wizard)
    try:
        assert wizard.tasks.wait_idle(120)
        evaluation = wizard.state.evaluation()
        assert evaluation is not None and evaluation.argv is not None, evaluation
        go_to(wizard, PageId.SERVICE)
        page = wizard.service_page
        page.set_scope(UnitScope.SYSTEM)
        page.account_edit.setText(ACCOUNT)
        rendered = page.render_files()
        assert rendered is not None
        return evaluation.argv, {key: rendered.files[key].text for key in FILES}
    finally:
        wizard.tasks.shutdown()


@pytest.mark.parametrize("kind", PLANS)
def test_cli_and_gui_give_the_same_command_and_files(
    kind: str,
    qtbot: QtBot,
    store: StateStore,
    tiny_model: Callable[..., Path],
    engine: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    plan = make_plan(kind, tiny_model, engine, tmp_path / "models")
    plan_file = tmp_path / f"{kind}.json"
    save_plan(plan, plan_file)
    cli_argv, cli_files = cli_side(plan_file, tmp_path / "cli")
    gui_argv, gui_files = gui_side(qtbot, store, plan_file)
    assert gui_argv == cli_argv
    for key in FILES:
        assert gui_files[key] == cli_files[key], key
    assert cli_argv[cli_argv.index("-c") + 1] == str(plan.runtime.ctx)  # the plan's own ctx
    if kind == "cpu-target":  # the CPU target: every layer there, no fit (both sides)
        assert cli_argv[cli_argv.index("-ngl") + 1] == "0" and "--fit-margin" not in cli_argv
    if kind == "draft-model":
        assert "-md" in cli_argv and "-ngld" in cli_argv
    if kind == "tiny-gguf":  # the probed build's path, not the documented stand-in
        assert cli_argv[0] == str(engine("upstream"))
    if kind == "two-gpus":
        assert cli_argv[cli_argv.index("-sm") + 1] == "layer"
    if kind == "rpc":  # the RPC build (its backend found in the file) reaches the endpoint
        assert cli_argv[0] == str(engine("upstream-rpc"))
        assert cli_argv[cli_argv.index("--rpc") + 1] == "192.168.1.20:50052"
        assert "IPAddressDeny=any" not in cli_files["unit"]
