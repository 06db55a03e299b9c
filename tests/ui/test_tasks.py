"""The task manager: results on the GUI thread, errors, cancellation, latest-wins keys."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QThread
from pytestqt.qtbot import QtBot

from mtpstudio.core.errors import GgufError
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.tasks import CancelToken, TaskManager


def test_result_arrives_on_the_gui_thread(qtbot: QtBot) -> None:
    tasks = TaskManager()
    gui_thread = QThread.currentThread()
    seen: dict[str, object] = {}

    def job(token: CancelToken) -> int:
        seen["worker"] = QThread.currentThread()
        return 42

    def done(value: int) -> None:
        seen["value"] = value
        seen["callback"] = QThread.currentThread()

    with qtbot.waitSignal(tasks.busy_changed, timeout=5000, check_params_cb=lambda b: not b):
        tasks.run(job, done)
    assert seen["value"] == 42
    assert seen["callback"] is gui_thread
    assert seen["worker"] is not gui_thread
    assert not tasks.busy


def test_errors_go_to_on_error_as_one_sentence(qtbot: QtBot) -> None:
    tasks = TaskManager()
    errors: list[BaseException] = []

    def job(token: CancelToken) -> None:
        raise GgufError("x.gguf is not a GGUF file (bad magic at byte 0)")

    tasks.run(job, lambda _: None, errors.append)
    assert tasks.wait_idle(5)
    assert len(errors) == 1
    assert error_sentence(errors[0]) == "X.gguf is not a GGUF file (bad magic at byte 0)"


def test_cancelled_task_stops_and_its_callback_never_runs(qtbot: QtBot) -> None:
    tasks = TaskManager()
    started = threading.Event()
    stopped = threading.Event()
    results: list[object] = []

    def job(token: CancelToken) -> str:
        started.set()
        while True:
            token.raise_if_cancelled()
            time.sleep(0.005)
            if stopped.is_set():
                return "never"

    handle = tasks.run(job, results.append, results.append)
    assert started.wait(5)
    assert tasks.busy
    handle.cancel()
    assert tasks.wait_idle(5)
    assert results == []
    assert not tasks.busy


def test_a_newer_task_with_the_same_key_wins(qtbot: QtBot) -> None:
    tasks = TaskManager()
    gate = threading.Event()
    results: list[str] = []

    def slow(token: CancelToken) -> str:
        gate.wait(5)
        return "old"

    first = tasks.run(slow, results.append, key="detect")
    assert tasks.is_running("detect")
    tasks.run(lambda token: "new", results.append, key="detect")
    assert first.token.cancelled
    gate.set()
    assert tasks.wait_idle(5)
    assert results == ["new"]
    assert not tasks.is_running("detect")


def test_progress_arrives_in_order_on_the_gui_thread_and_stops_at_cancel(qtbot: QtBot) -> None:
    tasks = TaskManager()
    gui_thread = QThread.currentThread()
    seen: list[tuple[object, bool]] = []
    go_on = threading.Event()

    def job(token: CancelToken) -> str:
        for i in range(5):
            token.report_progress(i)
        go_on.wait(5)
        token.report_progress("after cancel")  # dropped: nobody wants it any more
        return "done"

    handle = tasks.run(
        job,
        lambda _: None,
        on_progress=lambda v: seen.append((v, QThread.currentThread() is gui_thread)),
    )
    qtbot.waitUntil(lambda: len(seen) == 5, timeout=5000)
    assert seen == [(i, True) for i in range(5)]
    handle.cancel()
    go_on.set()
    assert tasks.wait_idle(5)
    assert [v for v, _ in seen] == list(range(5))
