"""The server the GUI starts: a ``QProcess`` over core's launch spec, watched without blocking.

Built from the same steps as ``mtpstudio launch`` (the launch use case, ``core.usecases.launch``):
``replan_for_here`` (the plan the pages resolved, replanned only where this computer lacks its
card or its named build was never probed), then ``prepare_resolved_launch`` (checks, then the
command of exactly that resolved plan, nothing detected or resolved again; a bare Plan goes
through ``find_build`` and ``prepare_launch`` instead; no argv logic here) run as a background
task; the process is a ``QProcess`` in its own session whose output goes straight to the log
file (so a server left running outlives the window and keeps logging); the log is followed
with core's ``LogFollower`` on a timer; ``wait_healthy`` runs as a task. The state is recorded
with ``record_state`` as soon as the process runs (``mtpstudio server status`` sees it loading)
and again once healthy; until then a watchdog (``core.server.watchdog``) kills the server if the
GUI dies. The reconciliation is computed in another task. Stopping is SIGTERM to the process
group, a grace period on a timer, then SIGKILL; ``stop_now`` does the same blocking, for the
window's exit.

Threading: every method and signal belongs to the GUI thread; the tasks only get plain values.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.memory.measured import Reconciliation
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import ResolvedPlan
from mtpstudio.core.server.diagnosis import Diagnosis
from mtpstudio.core.server.health import (
    DEFAULT_STARTUP_TIMEOUT_S,
    HealthAnswer,
    HealthResult,
    HealthState,
)
from mtpstudio.core.server.launch import LaunchResult, PreparedLaunch
from mtpstudio.core.server.load_log import LoadReport
from mtpstudio.core.server.process import STOP_GRACE_S, LogFollower, ProcessOutcome
from mtpstudio.core.server.state import ServerState
from mtpstudio.core.server.watchdog import Watchdog
from mtpstudio.core.usecases.launch import (
    find_build,
    measure_launch,
    prepare_launch,
    prepare_resolved_launch,
    record_state,
    replan_for_here,
)
from mtpstudio.core.usecases.server_watch import (
    diagnose,
    parse_load_log,
    probe_health,
    procfs,
    remove_state,
    state_path,
    wait_healthy,
)
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.tasks import CancelToken, TaskManager

LOG_POLL_MS = 100
HEALTH_POLL_MS = 2000
BuildFinder = Callable[[Plan], EngineBuild]


class ServerPhase(StrEnum):
    """Where the GUI's server is."""

    IDLE = "not started"
    PREPARING = "checking"
    LOADING = "loading"
    HEALTHY = "healthy"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    LEFT_RUNNING = "left running"


class _Watched:
    """What ``wait_healthy`` polls from a pool thread: the exit code the GUI thread saw."""

    def __init__(self, token: CancelToken) -> None:
        self.returncode: int | None = None
        self._token = token
        self._lock = threading.Lock()

    def set(self, code: int) -> None:
        with self._lock:
            self.returncode = code

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None and self._token.cancelled:
                return -int(signal.SIGTERM)  # given up: end the wait
            return self.returncode


def _returncode(exit_code: int, status: QProcess.ExitStatus) -> int:
    """subprocess convention: negative for the signal that ended it (Qt reports its number)."""
    return -exit_code if status == QProcess.ExitStatus.CrashExit else exit_code


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class GuiServer(QObject):
    """One server started by the GUI (start, follow, stop, explain).

    Signals (GUI thread):
        phase_changed(str): a ``ServerPhase`` value.
        lines_logged(list): new complete log lines.
        start_refused(str): a check failed before anything started (one sentence).
        became_healthy(object): a ``LaunchResult`` (state recorded; reconciliation follows).
        measured(object): the same ``LaunchResult`` with its reconciliation (or prediction error).
        launch_failed(object): a ``LaunchResult`` with its diagnosis; nothing is left running.
        died(object): a ``LaunchResult`` with its diagnosis: the healthy server ended by itself.
        stopped(object): the ``ProcessOutcome`` after ``stop``.
        health_polled(object): a ``HealthAnswer`` from the periodic probe while healthy.
    """

    phase_changed = Signal(str)
    lines_logged = Signal(list)
    start_refused = Signal(str)
    became_healthy = Signal(object)
    measured = Signal(object)
    launch_failed = Signal(object)
    died = Signal(object)
    stopped = Signal(object)
    health_polled = Signal(object)

    def __init__(
        self,
        tasks: TaskManager,
        *,
        build_finder: BuildFinder = find_build,
        predict: bool = True,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._tasks = tasks
        self._find_build = build_finder
        self._predict = predict
        self.phase = ServerPhase.IDLE
        self.prepared: PreparedLaunch | None = None
        self.result: LaunchResult | None = None
        self.state: ServerState | None = None
        self.process: QProcess | None = None
        self.follower: LogFollower | None = None
        self.last_health: HealthAnswer | None = None
        self._watched: _Watched | None = None
        self._watch_token: CancelToken | None = None
        self._guard: Watchdog | None = None
        self._failed_health: tuple[HealthResult, LoadReport, float] | None = None
        self._timeout = DEFAULT_STARTUP_TIMEOUT_S
        self._started_at = 0.0
        self._stop_requested = False
        self._killed = False
        self._log_timer = QTimer(self)
        self._log_timer.setInterval(LOG_POLL_MS)
        self._log_timer.timeout.connect(self._on_log_timer)
        self._health_timer = QTimer(self)
        self._health_timer.setInterval(HEALTH_POLL_MS)
        self._health_timer.timeout.connect(self._on_health_timer)
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self._on_grace_over)

    # -- queries --------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """A process we own is alive (loading, healthy or stopping)."""
        return self.process is not None and self.process.state() != QProcess.ProcessState.NotRunning

    @property
    def busy(self) -> bool:
        """Starting or running: another start must wait."""
        return self.phase in (ServerPhase.PREPARING, ServerPhase.LOADING) or self.running

    @property
    def pid(self) -> int:
        return int(self.process.processId()) if self.process is not None else 0

    @property
    def base_url(self) -> str | None:
        if self.prepared is None:
            return None
        from mtpstudio.core.usecases.server_watch import connect_host

        server = self.prepared.plan.server
        return f"http://{connect_host(server.host)}:{server.port}"

    def log_lines(self) -> list[str]:
        return self.follower.ring.lines() if self.follower is not None else []

    # -- start ----------------------------------------------------------------------------------

    def start(self, plan: Plan | ResolvedPlan, timeout: float = DEFAULT_STARTUP_TIMEOUT_S) -> None:
        """Check and start the server (asynchronously; the signals say how it went).

        A ``ResolvedPlan`` starts as resolved (its build, target and MTP: what the pages
        showed), replanned first only where this computer cannot run it as it is; a bare
        ``Plan`` is resolved here, with the build the finder names.
        """
        if self.busy:
            self.start_refused.emit("A server is already starting or running; stop it first.")
            return
        self.prepared = self.result = self.state = None
        self.last_health = None
        self._failed_health = None
        self._timeout = timeout
        self._set_phase(ServerPhase.PREPARING)
        finder = self._find_build

        def job(token: CancelToken) -> PreparedLaunch:
            if isinstance(plan, ResolvedPlan):
                return prepare_resolved_launch(replan_for_here(plan))
            return prepare_launch(plan, finder(plan))

        self._tasks.run(
            job,
            self._on_prepared,
            self._on_prepare_failed,
            key="server-prepare",
        )

    def refuse(self, sentence: str) -> None:
        """Refuse a start before it begins (the caller found why): FAILED, ``start_refused``."""
        if self.busy:
            self.start_refused.emit("A server is already starting or running; stop it first.")
            return
        self._set_phase(ServerPhase.FAILED)
        self.start_refused.emit(sentence)

    def _on_prepare_failed(self, exc: BaseException) -> None:
        self._set_phase(ServerPhase.FAILED)
        self.start_refused.emit(error_sentence(exc))

    def _on_prepared(self, prepared: PreparedLaunch) -> None:
        self.prepared = prepared
        spec = prepared.process
        try:
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            spec.cwd.mkdir(parents=True, exist_ok=True)
            spec.log_path.write_bytes(b"")
        except OSError as exc:
            self._set_phase(ServerPhase.FAILED)
            self.start_refused.emit(
                f"Cannot write the server log {spec.log_path}: {exc.strerror or exc}. Check that "
                "the state folder (XDG_STATE_HOME) is writable."
            )
            return
        proc = QProcess(self)
        proc.setProgram(spec.argv[0])
        proc.setArguments(list(spec.argv[1:]))
        env = QProcessEnvironment()
        for key, value in spec.env.items():
            env.insert(key, value)
        proc.setProcessEnvironment(env)
        proc.setWorkingDirectory(str(spec.cwd))  # ik writes llama.log there
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        proc.setStandardOutputFile(str(spec.log_path), QProcess.OpenModeFlag.Append)
        proc.setStandardInputFile(QProcess.nullDevice())
        flags = QProcess.UnixProcessFlag
        proc.setUnixProcessParameters(
            flags.CreateNewSession | flags.CloseFileDescriptors | flags.ResetSignalHandlers
        )
        proc.started.connect(self._on_started)
        proc.finished.connect(self._on_finished)
        proc.errorOccurred.connect(self._on_error_occurred)
        self.process = proc
        self.follower = LogFollower(spec.log_path)
        self._stop_requested = self._killed = False
        self._started_at = time.monotonic()
        self._guard = Watchdog.start(state_path(prepared.plan.server.port))
        proc.start()  # started() or errorOccurred(FailedToStart) follows

    def _on_started(self) -> None:
        if self.prepared is None:
            return
        if self._guard is not None:
            self._guard.watch(self.pid, procfs.start_ticks(self.pid))
        self._record(None)
        self._set_phase(ServerPhase.LOADING)
        self._log_timer.start()
        self._wait_for_health(self.prepared, self._timeout)

    def _on_error_occurred(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self.process is not None:
            self._release_guard()
            self._log_timer.stop()
            self._set_phase(ServerPhase.FAILED)
            self.start_refused.emit(
                f"Cannot start {self.process.program()}: {self.process.errorString()}. Check the "
                "engine binary path on the Engine page."
            )

    def _wait_for_health(self, prepared: PreparedLaunch, timeout: float) -> None:
        pid = self.pid
        host, port = prepared.plan.server.host, prepared.plan.server.port

        # The pool task polls this _Watched; cancelling the task would drop its answer, so
        # the token the watcher reads is a separate one, set by stop().
        self._watch_token = CancelToken()
        watched = self._watched = _Watched(self._watch_token)

        def job(token: CancelToken) -> HealthResult:
            return wait_healthy(
                watched, host, port, timeout, owns_port=lambda: procfs.listens_on(pid, port)
            )

        self._tasks.run(job, self._on_health_answered, key="server-health")

    def _on_health_answered(self, health: HealthResult) -> None:
        prepared = self.prepared
        if prepared is None or self.phase is not ServerPhase.LOADING:
            return
        self._poll_log()
        report = parse_load_log(read_text(prepared.process.log_path))
        seconds = time.monotonic() - self._started_at
        if health.state is not HealthState.HEALTHY:
            self._failed_health = (health, report, seconds)
            if self.running:
                self.stop(grace=2.0)  # _on_finished explains it
            else:
                self._explain_failure(health, report, seconds)
            return
        self._record(health.seconds)
        self._release_guard()  # healthy and recorded: it may outlive the window now
        note: Diagnosis | None = None
        plan = prepared.plan
        if report.drafting_disabled and (plan.mtp.enabled or plan.draft.path is not None):
            note = diagnose(report, plan, self._outcome(), health, model=prepared.model)
        self.result = LaunchResult(
            prepared, health, report, self._outcome(), seconds, state=self.state, diagnosis=note
        )
        self.last_health = health.last
        self._set_phase(ServerPhase.HEALTHY)
        self._health_timer.start()
        self.became_healthy.emit(self.result)
        if self._predict:
            self._measure(self.result)

    def _record(self, healthy_after: float | None) -> None:
        if self.prepared is None:
            return
        try:
            self.state = record_state(self.prepared, self, healthy_after)
        except MtpStudioError as exc:
            self.lines_logged.emit([f"[mtpstudio] server state not recorded: {exc}"])

    def _release_guard(self) -> None:
        if self._guard is not None:
            self._guard.release()
            self._guard = None

    def _measure(self, result: LaunchResult) -> None:
        prepared = result.prepared
        report = result.report

        def job(token: CancelToken) -> tuple[Reconciliation | None, str | None]:
            return measure_launch(prepared, report)

        def done(answer: tuple[Reconciliation | None, str | None]) -> None:
            rec, error = answer
            if self.result is None or self.result.prepared is not prepared:
                return
            self.result = replace(self.result, reconciliation=rec, prediction_error=error)
            self.measured.emit(self.result)

        def failed(exc: BaseException) -> None:
            if self.result is not None and self.result.prepared is prepared:
                self.result = replace(self.result, prediction_error=error_sentence(exc))
                self.measured.emit(self.result)

        self._tasks.run(job, done, failed, key="server-measure")

    # -- follow ---------------------------------------------------------------------------------

    def _poll_log(self) -> None:
        if self.follower is None:
            return
        lines = self.follower.poll()
        if lines:
            self.lines_logged.emit(lines)

    def _on_log_timer(self) -> None:
        self._poll_log()

    def _on_health_timer(self) -> None:
        if self.prepared is None or self._tasks.is_running("server-probe"):
            return
        host, port = self.prepared.plan.server.host, self.prepared.plan.server.port

        def job(token: CancelToken) -> HealthAnswer:
            return probe_health(host, port)

        self._tasks.run(job, self._on_probed, key="server-probe")

    def _on_probed(self, answer: HealthAnswer) -> None:
        if self.phase is ServerPhase.HEALTHY:
            self.last_health = answer
            self.health_polled.emit(answer)

    # -- stop -----------------------------------------------------------------------------------

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM the server's process group; SIGKILL after ``grace`` s (non-blocking)."""
        if self.phase is ServerPhase.PREPARING:
            self._tasks.run(lambda t: None, lambda _: None, key="server-prepare")  # drop it
            self._set_phase(ServerPhase.STOPPED)
            return
        if not self.running:
            return
        self._stop_requested = True
        if self._watch_token is not None:
            self._watch_token.cancel()
        self._set_phase(ServerPhase.STOPPING)
        self._signal(signal.SIGTERM)
        self._kill_timer.start(int(grace * 1000))

    def stop_now(self, grace: float = 5.0) -> ProcessOutcome:
        """Stop and wait here (the window is closing): SIGTERM, wait, SIGKILL, wait."""
        if self.running and self.process is not None:
            self._stop_requested = True
            if self._watch_token is not None:
                self._watch_token.cancel()
            self._signal(signal.SIGTERM)
            if not self.process.waitForFinished(int(grace * 1000)):
                self._killed = True
                self._signal(signal.SIGKILL)
                self.process.waitForFinished(5000)
        return self._outcome()

    def leave_running(self) -> None:
        """Let the server outlive the window (its state stays recorded for the CLI)."""
        self._log_timer.stop()
        self._health_timer.stop()
        if self.process is not None and self.running:
            self.process.finished.disconnect(self._on_finished)
            # ~QProcess kills a process it still counts as running; this one is handed over.
            self.process.setProcessState(QProcess.ProcessState.NotRunning)
            self.process = None
        self._set_phase(ServerPhase.LEFT_RUNNING)

    def _on_grace_over(self) -> None:
        if self.running:
            self._killed = True
            self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        # QProcess reaps only in this thread's event loop, so while it reports the process as
        # running its pid (= the group id, own session) cannot have been reused.
        pid = self.pid
        if pid <= 0 or not self.running:
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    # -- exit -----------------------------------------------------------------------------------

    def _outcome(self) -> ProcessOutcome:
        proc = self.process
        if proc is None or proc.state() != QProcess.ProcessState.NotRunning:
            return ProcessOutcome(None, self._stop_requested, self._killed)
        code = _returncode(proc.exitCode(), proc.exitStatus())
        return ProcessOutcome(code, self._stop_requested, self._killed)

    def _on_finished(self, exit_code: int, status: QProcess.ExitStatus) -> None:
        self._kill_timer.stop()
        self._health_timer.stop()
        self._log_timer.stop()
        if self._watched is not None:
            self._watched.set(_returncode(exit_code, status))
        self._poll_log()
        if self.follower is not None:
            tail = self.follower.ring.flush()
            if tail:
                self.lines_logged.emit(tail)
        if self.state is not None:
            with contextlib.suppress(OSError):
                remove_state(self.state)
        self._release_guard()  # the GUI saw it end: nothing left for the watchdog
        outcome = self._outcome()
        prepared = self.prepared
        failed = self._failed_health
        if failed is not None:
            self._failed_health = None
            self._explain_failure(*failed)
            return
        if self.phase is ServerPhase.LOADING:
            return  # the health wait sees the exit and explains it
        if self._stop_requested or prepared is None:
            self._set_phase(ServerPhase.STOPPED)
            self.stopped.emit(outcome)
            return
        report = parse_load_log(read_text(prepared.process.log_path))
        health = self.result.health if self.result is not None else None
        diagnosis = diagnose(report, prepared.plan, outcome, health, model=prepared.model)
        seconds = time.monotonic() - self._started_at
        self.result = LaunchResult(
            prepared,
            health or HealthResult(HealthState.EXITED, seconds, HealthAnswer(None, ""), 0),
            report,
            outcome,
            seconds,
            diagnosis=diagnosis,
            reconciliation=self.result.reconciliation if self.result is not None else None,
        )
        self._set_phase(ServerPhase.FAILED)
        self.died.emit(self.result)

    def _explain_failure(self, health: HealthResult, report: LoadReport, seconds: float) -> None:
        prepared = self.prepared
        assert prepared is not None
        report = parse_load_log(read_text(prepared.process.log_path))
        done = self._outcome()
        # Only a timeout made us stop it; an exit on its own is the server's doing.
        timed_out = health.state is HealthState.TIMEOUT
        outcome = ProcessOutcome(done.returncode, timed_out, self._killed and timed_out)
        diagnosis = diagnose(report, prepared.plan, outcome, health, model=prepared.model)
        self.result = LaunchResult(prepared, health, report, outcome, seconds, diagnosis=diagnosis)
        self._set_phase(ServerPhase.FAILED)
        self.launch_failed.emit(self.result)

    def _set_phase(self, phase: ServerPhase) -> None:
        if phase is not self.phase:
            self.phase = phase
            self.phase_changed.emit(phase.value)
