"""The GUI's one way to run background work: a small task manager over a QThreadPool.

Threading contract:

* A task is a plain callable ``fn(token) -> result``. It runs on a pool thread and must not
  touch any widget, QObject owned by the GUI thread, or the running QApplication; it gets
  everything it needs through its closure (paths, plans, injected detectors) and returns a
  value. It should poll ``token.cancelled`` (or call ``token.raise_if_cancelled()``) between
  steps when it can take long.
* ``TaskManager.run`` is called on the GUI thread. The ``on_done`` / ``on_error`` callbacks
  are always invoked on the GUI thread (the result crosses threads through a queued signal),
  so they may update widgets freely.
* A cancelled task's callbacks are never invoked, even if it finishes anyway. Starting a task
  with the same ``key`` as a running one cancels the older one ("latest wins"), which is how
  refresh buttons and repeated file opens stay consistent.
* A task that reports progress calls ``token.report_progress(value)`` (from its thread);
  ``on_progress(value)`` runs on the GUI thread, in order, and never after the task was
  cancelled or delivered its outcome.
* ``busy_changed(bool)`` is emitted when the manager goes from idle to busy and back; pages
  use it (or their own task handles) to show a busy indicator while the user waits.
* ``shutdown()`` cancels everything and waits (bounded) for the pool; call it before the
  application quits.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, Signal

from mtpstudio.core.cancel import CancelToken as BaseCancelToken

log = logging.getLogger(__name__)


class TaskCancelled(Exception):
    """Raised inside a task (by ``CancelToken.raise_if_cancelled``) to stop early."""


class CancelToken(BaseCancelToken):
    """A flag a task polls to learn it is no longer wanted; safe to use from any thread.

    ``raise_if_cancelled`` stops the task with TaskCancelled; ``report_progress`` hands a value
    to the task's ``on_progress`` on the GUI thread."""

    def __init__(self, report: Callable[[object], None] | None = None) -> None:
        super().__init__()
        self._report = report

    def cancelled_error(self) -> Exception:
        return TaskCancelled()

    def report_progress(self, value: object) -> None:
        """Send ``value`` to ``on_progress`` (dropped once the task is cancelled)."""
        if self._report is not None and not self.cancelled:
            self._report(value)


@dataclass
class TaskHandle:
    """A running task as the GUI thread sees it: its id, key, token and callbacks."""

    task_id: int
    key: str | None
    token: CancelToken
    on_done: Callable[[Any], None]
    on_error: Callable[[BaseException], None] | None
    finished: bool = False
    started_at: float = field(default_factory=time.monotonic)
    on_progress: Callable[[Any], None] | None = None

    def cancel(self) -> None:
        """Ask the task to stop; its callbacks will not run."""
        self.token.cancel()

    @property
    def running(self) -> bool:
        return not self.finished and not self.token.cancelled


class _Relay(QObject):
    """Lives on the GUI thread; pool threads emit on it, the slot runs on the GUI thread."""

    delivered = Signal(int, bool, object)  # task id, ok, result or exception
    progressed = Signal(int, object)  # task id, the value the task reported


class _Runnable(QRunnable):
    def __init__(
        self, task_id: int, fn: Callable[[CancelToken], Any], token: CancelToken, relay: _Relay
    ) -> None:
        super().__init__()
        self._task_id = task_id
        self._fn = fn
        self._token = token
        self._relay = relay
        self.setAutoDelete(True)

    def run(self) -> None:
        try:
            result = self._fn(self._token)
        except TaskCancelled:
            self._relay.delivered.emit(self._task_id, False, TaskCancelled())
        except BaseException as exc:  # delivered to on_error; a task must never kill the pool
            log.debug("task %s failed", self._task_id, exc_info=True)
            self._relay.delivered.emit(self._task_id, False, exc)
        else:
            self._relay.delivered.emit(self._task_id, True, result)


class TaskManager(QObject):
    """Runs callables on a private thread pool and hands results back on the GUI thread."""

    busy_changed = Signal(bool)
    task_finished = Signal(int)  # task id, after its callback ran (or was dropped)

    def __init__(self, max_threads: int = 4, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_threads)
        self._relay = _Relay(self)
        self._relay.delivered.connect(self._on_delivered)
        self._relay.progressed.connect(self._on_progressed)
        self._ids = itertools.count(1)
        self._tasks: dict[int, TaskHandle] = {}

    # -- API --------------------------------------------------------------------------------

    def run(
        self,
        fn: Callable[[CancelToken], Any],
        on_done: Callable[[Any], None],
        on_error: Callable[[BaseException], None] | None = None,
        *,
        key: str | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> TaskHandle:
        """Start ``fn(token)`` on the pool; ``on_done(result)`` / ``on_error(exc)`` run here,
        and ``on_progress(value)`` for each ``token.report_progress(value)``.

        A running task with the same ``key`` is cancelled first.
        """
        if key is not None:
            for handle in self._tasks.values():
                if handle.key == key and handle.running:
                    handle.cancel()
        was_busy = self.busy
        task_id = next(self._ids)
        relay = self._relay
        token = CancelToken(lambda value: relay.progressed.emit(task_id, value))
        handle = TaskHandle(task_id, key, token, on_done, on_error, on_progress=on_progress)
        self._tasks[handle.task_id] = handle
        self._pool.start(_Runnable(handle.task_id, fn, handle.token, self._relay))
        if not was_busy:
            self.busy_changed.emit(True)
        return handle

    @property
    def busy(self) -> bool:
        """True while any task has not delivered its outcome yet."""
        return bool(self._tasks)

    def is_running(self, key: str) -> bool:
        """True while a (not cancelled) task with this key is running."""
        return any(h.key == key and h.running for h in self._tasks.values())

    def cancel_all(self) -> None:
        for handle in self._tasks.values():
            handle.cancel()

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Process events until every task has delivered (for tests and screenshots)."""
        deadline = time.monotonic() + timeout_s
        while self._tasks and time.monotonic() < deadline:
            QCoreApplication.processEvents()
            self._pool.waitForDone(5)
        QCoreApplication.processEvents()
        return not self._tasks

    def shutdown(self, timeout_ms: int = 3000) -> None:
        """Cancel every task and wait (at most ``timeout_ms``) for the pool threads."""
        self.cancel_all()
        self._pool.waitForDone(timeout_ms)

    # -- GUI-thread side --------------------------------------------------------------------

    def _on_progressed(self, task_id: int, value: object) -> None:
        handle = self._tasks.get(task_id)
        if handle is not None and handle.running and handle.on_progress is not None:
            handle.on_progress(value)

    def _on_delivered(self, task_id: int, ok: bool, outcome: object) -> None:
        handle = self._tasks.pop(task_id, None)
        if handle is None:
            return
        handle.finished = True
        try:
            if handle.token.cancelled or isinstance(outcome, TaskCancelled):
                return
            if ok:
                handle.on_done(outcome)
            elif handle.on_error is not None:
                assert isinstance(outcome, BaseException)
                handle.on_error(outcome)
            else:
                log.error("background task failed: %s", outcome)
        finally:
            self.task_finished.emit(task_id)
            if not self._tasks:
                self.busy_changed.emit(False)
