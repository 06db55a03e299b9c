"""mtpstudio's launcher with the real engines on tiny models: start, health, stop, failures."""

from __future__ import annotations

import os
import re
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from support.argv import launch_spec
from support.tiny_models import HUGE_KV_MIB, HUGE_KV_MODEL, HUGE_KV_PLAN
from support.waiting import scaled

from mtpstudio.core.errors import ServerError
from mtpstudio.core.memory.measured import HOST
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.diagnosis import CauseKind, diagnose
from mtpstudio.core.server.health import HealthState, probe_health
from mtpstudio.core.server.launch import PreparedLaunch, new_log_path
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.server.process import (
    ProcessOutcome,
    ProcessSpec,
    ServerProcess,
    process_spec,
)
from mtpstudio.core.server.reconcile import last_measured
from mtpstudio.core.server.state import (
    Liveness,
    load_states,
    prune_stale,
    remove_state,
    run_dir,
)
from mtpstudio.core.usecases.launch import find_build, prepare_launch, run_launch

from .conftest import processes_with, state_files

pytestmark = [pytest.mark.engine]
ENGINES = ["upstream", "ik"]
_SIZE = re.compile(r"=\s+([\d.]+) MiB")


def logged(text: str, pattern: str) -> float:
    return sum(
        float(m.group(1))
        for line in text.splitlines()
        if re.search(pattern, line) and (m := _SIZE.search(line))
    )


@pytest.mark.parametrize("flavour", ENGINES)
def test_start_health_reconcile_stop(
    flavour: str, plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    plan = plan_for(flavour)
    build = find_build(plan)
    timeout = scaled(120)
    result, proc = run_launch(prepare_launch(plan, build), timeout=timeout)
    assert proc is not None
    launched.append(proc)
    assert result.ok, result.diagnosis
    assert result.health.seconds <= result.seconds < timeout
    assert probe_health(plan.server.host, plan.server.port).status == 200
    assert [s.pid for s in load_states()] == [proc.pid]

    text = result.log_path.read_text()
    rec = result.reconciliation
    assert rec is not None, result.prediction_error
    weights = rec.row("weights", HOST)
    assert weights is not None
    buffers = logged(text, r"(model )?buffer size =")
    contexts = logged(text, r"(KV|compute|output) buffer size")
    assert weights.actual_mib == pytest.approx(buffers - contexts)
    kv = rec.row("kv_cache", HOST)
    assert kv is not None and kv.actual_mib == pytest.approx(logged(text, r"KV buffer size"))
    compute = rec.row("compute", HOST)
    assert compute is not None
    assert compute.actual_mib == pytest.approx(
        max(float(x) for x in re.findall(r"compute buffer size =\s+([\d.]+)", text))
    )
    # the memory model predicts weights and KV exactly (the log prints two decimals)
    assert abs(weights.delta_mib) <= 0.01 and abs(kv.delta_mib) <= 0.01
    stored = last_measured(rec.build_key, "CPU")
    assert stored is not None and stored.to_json() == rec.to_json()

    # SIGTERM reaches the engine (its process group) and it ends within the grace, which
    # stretches with the machine's load; its exit status is its own affair.
    outcome = proc.stop(grace=scaled(10))
    assert outcome.stopped and not outcome.killed and outcome.returncode is not None
    assert result.state is not None and result.state.liveness() is Liveness.GONE
    remove_state(result.state)
    assert processes_with(str(result.log_path.name)) == []


@pytest.mark.parametrize("flavour", ENGINES)
def test_sigkill_mid_run_is_reported_and_leaves_nothing(
    flavour: str, plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    plan = plan_for(flavour)
    result, proc = run_launch(prepare_launch(plan, find_build(plan)), timeout=scaled(120))
    assert proc is not None and result.state is not None
    launched.append(proc)
    os.kill(proc.pid, signal.SIGKILL)  # from outside, as the kernel's OOM killer would
    outcome = proc.wait(10)
    assert outcome.describe() == "was killed by SIGKILL (exit 137)"
    d = diagnose(parse_load_log(result.log_path.read_text()), plan, outcome)
    assert d.kind is CauseKind.KILLED
    assert result.state.liveness() is Liveness.GONE
    assert [s.port for s in prune_stale()] == [plan.server.port]
    assert state_files() == []
    assert processes_with(str(plan.model.path)) == []


@pytest.mark.parametrize("flavour", ENGINES)
def test_missing_and_corrupt_models_are_refused_before_launch(
    flavour: str, plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for(flavour)
    build = find_build(plan)
    missing = plan_with(plan, {"model.path": str(tmp_path / "gone.gguf")})
    with pytest.raises(ServerError, match=r"^the model file .*gone\.gguf does not exist$"):
        prepare_launch(missing, build)
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(ServerError, match=r"is not a usable GGUF model"):
        prepare_launch(plan_with(plan, {"model.path": str(corrupt)}), build)
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(ServerError, match=r"is not a usable GGUF model"):
        prepare_launch(plan_with(plan, {"model.path": str(not_gguf)}), build)
    assert processes_with(str(tmp_path)) == []


@pytest.mark.parametrize("flavour", ENGINES)
def test_an_engine_that_cannot_load_its_model_reads_as_a_load_failure(
    flavour: str, plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    """Bypass the preflight to see the engine's own failure on a missing model.

    How the engine then ends is not its contract: upstream exits with status 1; ik 0.1.5
    returns from main while its threads still run and dies of SIGABRT or SIGSEGV, from run to
    run. Whatever the ending, mtpstudio reads a load failure: the cause in one sentence, the
    log lines that say why, and the same fixes.
    """
    plan = plan_for(flavour)
    build = find_build(plan)
    good = prepare_launch(plan, build)
    gone = tmp_path / "gone.gguf"
    spec = launch_spec(plan, build, good.model, for_mtpstudio_launch=True, model_path=gone)
    pspec: ProcessSpec = process_spec(
        spec, new_log_path(plan.server.port), os.environ, cwd=run_dir()
    )
    prepared = PreparedLaunch(plan, build, good.model, spec, pspec)
    result, proc = run_launch(prepared, timeout=scaled(60), predict=False)
    assert proc is None and not result.ok
    assert result.health.state is HealthState.EXITED  # it ended by itself, not by a timeout
    outcome = result.outcome
    assert outcome.returncode not in (None, 0) and not outcome.stopped
    d = result.diagnosis
    assert d is not None and d.kind is CauseKind.MODEL_LOAD, result.log_path.read_text()[-2000:]
    assert d.cause == (
        f"The engine could not load the model and {outcome.describe()}; the log below says why "
        "(check the model file with `mtpstudio plan --model FILE`)."
    )
    assert any(str(gone) in e for e in d.evidence), d.evidence  # the line that says why
    # the same diagnosis (less the ending) as for any other way the engine could have ended
    for other in (ProcessOutcome(-11), ProcessOutcome(-6), ProcessOutcome(1)):
        again = diagnose(result.report, plan, other, result.health, model=good.model)
        assert (again.kind, again.evidence, again.fixes) == (d.kind, d.evidence, d.fixes)


@pytest.mark.parametrize("flavour", ENGINES)
def test_port_in_use_is_reported_before_launch(flavour: str, plan_for: Callable[..., Plan]) -> None:
    plan = plan_for(flavour)
    build = find_build(plan)
    with socket.socket() as s:
        s.bind(("127.0.0.1", plan.server.port))
        s.listen(1)
        with pytest.raises(ServerError) as err:
            prepare_launch(plan, build)
    assert str(err.value) == (
        f"port {plan.server.port} on 127.0.0.1 is already in use by {_comm()} (pid {os.getpid()})"
    )
    assert err.value.hint and "another port" in err.value.hint


def _comm() -> str:
    return Path(f"/proc/{os.getpid()}/comm").read_text().strip()


@pytest.mark.parametrize("flavour", ENGINES)
def test_real_out_of_memory_is_diagnosed(
    flavour: str, plan_for: Callable[..., Plan], launched: list[ServerProcess]
) -> None:
    """An enormous context: the KV cache (2 TiB) cannot be allocated in system RAM."""
    plan = plan_for(flavour, model_params=HUGE_KV_MODEL, **HUGE_KV_PLAN)
    result, proc = run_launch(
        prepare_launch(plan, find_build(plan)), timeout=scaled(120), predict=False
    )
    if proc is not None:
        launched.append(proc)
    assert not result.ok
    d = result.diagnosis
    assert d is not None and d.kind is CauseKind.OUT_OF_MEMORY, result.log_path.read_text()[-2000:]
    assert d.cause == (
        f"The server ran out of memory allocating the KV cache ({HUGE_KV_MIB:,.2f} MiB) in "
        "system RAM."
    )
    assert d.fixes[0].changes == {"runtime.ctx": 2097152}
    assert processes_with(str(plan.model.path)) == []
