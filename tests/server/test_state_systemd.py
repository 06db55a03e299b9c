"""Server state records (stale and reused pids) and the systemd verbs' commands and parsing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.runners import FixedRunner

from mtpstudio.core.errors import ServerError
from mtpstudio.core.server import procfs
from mtpstudio.core.server.process import LogRing, ProcessOutcome
from mtpstudio.core.server.state import (
    Liveness,
    ServerState,
    load_states,
    prune_stale,
    save_state,
    state_path,
)
from mtpstudio.core.server.systemd import (
    UnitRef,
    journal_argv,
    parse_show,
    require_installed,
    systemctl_argv,
    unit_status,
)


def state(pid: int, start: int, port: int = 18999, binary: str = sys.executable) -> ServerState:
    """A record of ``pid`` (by default this test, whose program is the Python running it)."""
    return ServerState(pid=pid, start_ticks=start, host="127.0.0.1", port=port,
                       log_path="/x.log", plan_path="/x.json", flavour="upstream",
                       binary=binary, argv=[binary])  # fmt: skip


def test_running_gone_and_reused_pids() -> None:
    me = os.getpid()
    start = procfs.start_ticks(me)
    assert start is not None
    assert state(me, start).liveness() is Liveness.RUNNING
    assert state(me, start + 1).liveness() is Liveness.REUSED  # same pid, other program
    # the right pid and start time, but not the recorded engine: never taken for the server
    assert state(me, start, binary="/usr/bin/sleep").liveness() is Liveness.OTHER
    child = subprocess.Popen(["true"])
    child.wait()
    assert state(child.pid, 1).liveness() is Liveness.GONE


def test_prune_removes_only_stale_records() -> None:
    me = os.getpid()
    start = procfs.start_ticks(me)
    assert start is not None
    live, reused = state(me, start, 18001), state(me, start + 5, 18002)
    save_state(live)
    save_state(reused)
    state_path(18003).write_text("not json")
    assert [s.port for s in prune_stale()] == [18002]
    assert [s.port for s in load_states()] == [18001]
    state_path(18001).unlink()
    state_path(18003).unlink()


def test_a_zombie_is_not_running() -> None:
    child = subprocess.Popen(["true"])
    start = procfs.start_ticks(child.pid)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert not procfs.is_running(child.pid, start)
    child.wait()


def test_log_ring_joins_chunks_and_keeps_the_last_lines() -> None:
    ring = LogRing(max_lines=3)
    assert ring.feed(b"one\ntw") == ["one"]
    assert ring.feed(b"o\nthree\nfour\nfi") == ["two", "three", "four"]
    assert ring.flush() == ["fi"]
    assert ring.lines() == ["three", "four", "fi"]


@pytest.mark.parametrize(
    ("code", "stopped", "text"),
    [
        (0, True, "stopped (exit 0)"),
        (-11, False, "crashed with SIGSEGV (exit 139)"),
        (139, False, "crashed with SIGSEGV (exit 139)"),
        (-9, False, "was killed by SIGKILL (exit 137)"),
        (1, False, "exited with status 1"),
        (None, False, "is still running"),
    ],
)
def test_outcome_descriptions(code: int | None, stopped: bool, text: str) -> None:
    assert ProcessOutcome(code, stopped=stopped).describe() == text


def test_systemctl_and_journalctl_commands() -> None:
    user = UnitRef.of("mtpstudio-llama", user=True)
    assert systemctl_argv(user, "start") == ["systemctl", "--user", "start",
                                             "mtpstudio-llama.service"]  # fmt: skip
    system = UnitRef.of("mtpstudio-llama.service", user=False)
    assert journal_argv(system, 20, follow=True) == [
        "journalctl", "-u", "mtpstudio-llama.service", "-n", "20", "--no-pager", "-o", "cat", "-f"
    ]  # fmt: skip
    with pytest.raises(ServerError):
        UnitRef.of("bad name", user=True)


def test_show_output_is_parsed() -> None:
    # `systemctl show` prints Key=Value lines (recorded from systemd 255)
    text = (
        "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\nExecMainStatus=0\n"
    )
    unit = UnitRef.of("mtpstudio-llama", user=True)

    status = unit_status(unit, FixedRunner(text))
    assert parse_show(text)["MainPID"] == "4242"
    assert status.active and status.main_pid == 4242
    assert status.describe() == "mtpstudio-llama.service: active (running), pid 4242"


def test_real_systemctl_status_of_a_missing_unit() -> None:
    from mtpstudio.core.runner import SubprocessRunner

    unit = UnitRef.of("mtpstudio-nothing", user=True)
    result = SubprocessRunner()(["systemctl", "--user", "show", unit.name], 10)
    if result.ok:  # a systemd user manager runs here: the unit is simply not found
        assert unit_status(unit, SubprocessRunner()).properties["LoadState"] == "not-found"
        return
    with pytest.raises(ServerError, match="systemctl could not read the status") as err:
        unit_status(unit, SubprocessRunner())
    assert err.value.hint is not None and "systemd is not running" in err.value.hint


def test_only_units_mtpstudio_wrote_are_touched(tmp_path: Path) -> None:
    unit = UnitRef.of("mtpstudio-llama", user=True)
    with pytest.raises(ServerError, match="there is no user unit"):
        require_installed(unit, tmp_path)
    (tmp_path / unit.name).write_text("[Service]\nExecStart=/bin/true\n")
    with pytest.raises(ServerError, match="was not written by mtpstudio"):
        require_installed(unit, tmp_path)
    (tmp_path / unit.name).write_text("# Written by mtpstudio; change the plan\n[Service]\n")
    assert require_installed(unit, tmp_path) == tmp_path / unit.name


def _started(argv: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    return proc


def test_stop_signals_only_the_recorded_engine() -> None:
    from mtpstudio.core.server.process import stop_pid

    sleep = _started(["sleep", "300"])
    try:
        start = procfs.start_ticks(sleep.pid)
        assert start is not None
        with pytest.raises(ServerError, match="not the recorded engine"):
            stop_pid(sleep.pid, start, grace=1, binary="/opt/llama.cpp/bin/llama-server")
        assert sleep.poll() is None
        outcome = stop_pid(sleep.pid, start, grace=5, binary="/usr/bin/sleep")
        assert outcome.stopped and sleep.wait(5) is not None
    finally:
        sleep.kill()
        sleep.wait()


def test_stop_signals_a_group_only_when_the_process_leads_it() -> None:
    """A recorded process inside another's group: it alone is stopped, the leader lives."""
    from mtpstudio.core.server.process import stop_pid

    leader = _started(["sh", "-c", "sleep 300 & echo $!; exec sleep 301"])
    try:
        assert leader.stdout is not None
        inner = int(leader.stdout.readline())
        for _ in range(200):  # the forked shell becomes sleep a moment later
            if procfs.runs_binary(inner, "/usr/bin/sleep"):
                break
            time.sleep(0.01)
        start = procfs.start_ticks(inner)
        assert start is not None and procfs.process_group(inner) == leader.pid != inner
        stop_pid(inner, start, grace=5, binary="/usr/bin/sleep")
        assert not procfs.is_running(inner, start)
        assert leader.poll() is None  # the group (and its leader) was not signalled
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
