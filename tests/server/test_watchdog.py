"""The launch watchdog: a server dies with its launch unless the launch released it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support.waiting import scaled, wait_for

from mtpstudio.core.server import procfs
from mtpstudio.core.server.watchdog import Watchdog


def session_sleep() -> subprocess.Popen[bytes]:
    """A stand-in server: leads its own session, like the servers mtpstudio spawns."""
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def wait_gone(pid: int, start: int, timeout: float = 10) -> bool:
    return wait_for(lambda: not procfs.is_running(pid, start), timeout)


def close_without_release(dog: Watchdog) -> None:
    """What the kernel does to the pipe when the launching process dies."""
    assert dog._fd is not None
    os.close(dog._fd)
    dog._fd = None
    dog._proc.wait(10)


@pytest.mark.parametrize("released", [False, True])
def test_the_server_dies_with_the_launch_unless_released(tmp_path: Path, released: bool) -> None:
    record = tmp_path / "8080.json"
    dog = Watchdog.start(record)
    server = session_sleep()
    try:
        start = procfs.start_ticks(server.pid)
        assert start is not None
        record.write_text(f'{{"pid": {server.pid}}}')
        dog.watch(server.pid, start)
        if released:
            dog.release()
        else:
            close_without_release(dog)
        if released:
            time.sleep(0.5)
            assert server.poll() is None and record.exists()
        else:
            server.wait(scaled(10))
            assert not record.exists()
    finally:
        server.kill()
        server.wait()
    assert dog._proc.poll() is not None  # the watchdog itself is gone either way


def test_a_reused_pid_is_never_killed(tmp_path: Path) -> None:
    dog = Watchdog.start(tmp_path / "8080.json")
    other = session_sleep()
    try:
        start = procfs.start_ticks(other.pid)
        assert start is not None
        dog.watch(other.pid, start + 1)  # the server it watched has gone; the pid was reused
        close_without_release(dog)
        time.sleep(0.3)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_the_watchdog_ignores_the_launch_group_signals(tmp_path: Path) -> None:
    """Ctrl-C reaches launch's process group; the watchdog is in its own session."""
    dog = Watchdog.start(tmp_path / "8080.json")
    server = session_sleep()
    try:
        start = procfs.start_ticks(server.pid)
        assert start is not None
        dog.watch(server.pid, start)
        assert os.getsid(dog._proc.pid) == dog._proc.pid != os.getsid(0)
        close_without_release(dog)
        assert wait_gone(server.pid, start)
    finally:
        server.kill()
        server.wait()
