"""``mtpstudio launch`` and ``mtpstudio server …`` as separate processes, with the real engines."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.tiny_models import HUGE_KV_MIB, HUGE_KV_MODEL, HUGE_KV_PLAN
from support.waiting import scaled, wait_for

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.plan.io import save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.state import load_states

from .conftest import processes_with, state_files

pytestmark = [pytest.mark.engine]
ENGINES = ["upstream", "ik"]


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mtpstudio.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def saved(plan: Plan, tmp_path: Path) -> Path:
    path = tmp_path / "plan with spaces.json"
    save_plan(plan, path)
    return path


@pytest.mark.parametrize("flavour", ENGINES)
def test_launch_status_logs_stop(
    flavour: str, plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for(flavour)
    launched = cli("launch", "--plan", str(saved(plan, tmp_path)), "--json")
    try:
        assert launched.returncode == 0, launched.stderr + launched.stdout
        out = json.loads(launched.stdout)
        assert out["ok"] is True and out["engine"] == flavour
        assert out["url"] == f"http://127.0.0.1:{plan.server.port}"
        rows = {r["segment"]: r for r in out["reconciliation"]["rows"]}
        assert rows["weights"]["actual_mib"] == rows["weights"]["predicted_mib"] > 0

        status = cli("server", "status", "--json")
        assert status.returncode == 0, status.stderr
        servers = json.loads(status.stdout)["servers"]
        assert [(s["pid"], s["health"]) for s in servers] == [(out["pid"], "healthy")]

        logs = cli("server", "logs", "-n", "5")
        assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 5

        replanned = cli("plan", "--plan", str(saved(plan, tmp_path)))
        assert replanned.returncode == 0, replanned.stderr
        assert "Last measured on this build and device" in replanned.stdout
        weights_row = next(
            line for line in replanned.stdout.splitlines() if line.startswith("weights ")
        )
        assert f"{rows['weights']['actual_mib']:.2f}" in weights_row
    finally:
        stopped = cli("server", "stop")
    assert stopped.returncode == 0
    assert stopped.stdout.strip() == (
        f"Server on port {plan.server.port} (pid {out['pid']}) stopped."
    )
    assert processes_with(str(plan.model.path)) == []
    assert state_files() == []
    after = cli("server", "status")
    assert after.returncode == 3
    assert after.stdout.strip() == "No server started by mtpstudio is running."


def test_missing_model_is_one_line_before_launch(
    plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for("upstream").model_copy(deep=True)
    plan.model.path = tmp_path / "gone.gguf"
    result = cli("launch", "--plan", str(saved(plan, tmp_path)))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"mtpstudio: the model file {tmp_path / 'gone.gguf'} does not exist")
    logs = Path(os.environ["XDG_STATE_HOME"]) / "mtpstudio" / "logs"
    assert list(logs.glob(f"server-{plan.server.port}-*")) == []  # nothing was started


def test_failed_launch_exits_non_zero_with_the_diagnosis(
    plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for("upstream", model_params=HUGE_KV_MODEL, **HUGE_KV_PLAN)
    result = cli("launch", "--plan", str(saved(plan, tmp_path)))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(
        "mtpstudio: the server did not start. The server ran out of memory allocating the KV "
        f"cache ({HUGE_KV_MIB:,.2f} MiB) in system RAM."
    )
    assert "1. halve the context to 2097152 tokens (runtime.ctx=2097152)" in result.stderr
    assert processes_with(str(plan.model.path)) == []
    assert state_files() == []


@pytest.mark.parametrize("flavour", ENGINES)
def test_sigkilled_server_shows_as_gone_and_its_record_is_removed(
    flavour: str, plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for(flavour)
    launched = cli("launch", "--plan", str(saved(plan, tmp_path)), "--json")
    assert launched.returncode == 0, launched.stderr
    pid = json.loads(launched.stdout)["pid"]
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not processes_with(str(plan.model.path)), timeout=10)
    status = cli("server", "status", "--json")
    assert status.returncode == 3
    report = json.loads(status.stdout)
    assert report["servers"] == []
    assert report["stale_records_removed"] == [
        {"port": plan.server.port, "pid": pid, "state": "gone"}
    ]
    assert load_states() == [] and state_files() == []


def test_foreground_stays_attached_until_ctrl_c(
    plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for("upstream")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT makes a hung CLI print where it hangs
    start_s, stop_s = scaled(120), scaled(30)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtpstudio.cli.main", "launch", "--foreground",
         "--timeout", f"{start_s:.0f}", "--plan", str(saved(plan, tmp_path))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        # the CLI must flush while it stays attached (no PYTHONUNBUFFERED in a user's shell)
        ready, _, _ = select.select([proc.stdout], [], [], start_s)
        assert ready, f"nothing on stdout within {start_s:.0f} s: the healthy line was not flushed"
        first = proc.stdout.readline()
        assert "is healthy at" in first
        assert len(load_states()) == 1
        time.sleep(0.3)
        assert proc.poll() is None  # still attached
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=stop_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _out, err = proc.communicate(timeout=30)
            pytest.fail(f"still running {stop_s:.0f} s after Ctrl-C; its threads:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    # stopped by its SIGTERM within the grace; the engine's own exit status is its affair
    assert re.search(r"Stopped the server \(stopped \(exit -?\d+\)\)\.", err), err
    assert processes_with(str(plan.model.path)) == []
    assert state_files() == []


@pytest.mark.slow
def test_fifty_launch_stop_cycles_leave_nothing_behind(
    plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for("upstream")
    path = saved(plan, tmp_path)
    pids = set()
    started = time.monotonic()
    for i in range(50):
        launched = cli("launch", "--plan", str(path), "--json")
        assert launched.returncode == 0, f"cycle {i}: {launched.stderr}"
        pids.add(json.loads(launched.stdout)["pid"])
        stopped = cli("server", "stop")
        assert stopped.returncode == 0 and "stopped." in stopped.stdout, stopped.stdout
    seconds = time.monotonic() - started
    left = processes_with(str(plan.model.path))
    print(f"\n50 launch/stop cycles in {seconds:.1f} s; {len(pids)} servers; processes left: "
          f"{len(left)}; state files left: {len(state_files())}")  # fmt: skip
    assert len(pids) == 50
    assert left == []
    assert state_files() == []


def test_startup_timeout_is_diagnosed_and_reaped(
    plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    # A full-size (zero-weight) model takes seconds to load, far longer than a zero timeout:
    # upstream answers 503 (or nothing) until then, whatever the machine's load.
    big = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", tmp_path / "full size.gguf")
    plan = plan_for("upstream", **{"model.path": str(big), "runtime.ctx": 4096})
    result = cli("launch", "--plan", str(saved(plan, tmp_path)), "--timeout", "0")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(
        "mtpstudio: the server did not start. The server did not become healthy before the "
        "startup timeout"
    )
    assert processes_with(str(plan.model.path)) == []
    assert state_files() == []


def test_logs_follow_ends_when_the_server_stops(
    plan_for: Callable[..., Plan], tmp_path: Path
) -> None:
    plan = plan_for("upstream")
    assert cli("launch", "--plan", str(saved(plan, tmp_path))).returncode == 0
    follow = subprocess.Popen(
        [sys.executable, "-m", "mtpstudio.cli.main", "server", "logs", "-n", "2", "--follow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        for line in follow.stdout or ():
            lines.append(line)

    try:
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert wait_for(lambda: len(lines) >= 2, timeout=30), lines  # the last two lines
        time.sleep(0.3)
        assert follow.poll() is None  # and it keeps following
        assert cli("server", "stop").returncode == 0
        follow.wait(timeout=scaled(20))
        reader.join(timeout=scaled(20))
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 0
    assert processes_with(str(plan.model.path)) == []
