"""Launch a server from a prepared command: find the build, check, start, wait, explain.

The steps are separate so the GUI can run them on its own terms (a ``QProcess`` for the
process): ``find_build`` (probe, cached), ``preflight`` (binary, model files; raises before
anything starts), ``prepare_process`` (the port, the process spec for a given LaunchSpec),
``run_launch`` (start, health wait, log parse, diagnosis or reconciliation). The command and
the predicted budget come from the planner, through the launch use case
(``core.usecases.launch``); this module never plans.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.registry import describe_build, memory_facts
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.errors import MtpStudioError, ServerError
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.measured import Reconciliation, build_key
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.runner import Runner, SubprocessRunner
from mtpstudio.core.server import procfs
from mtpstudio.core.server.diagnosis import Diagnosis, diagnose
from mtpstudio.core.server.health import (
    DEFAULT_STARTUP_TIMEOUT_S,
    HealthAnswer,
    HealthResult,
    HealthState,
    wait_healthy,
)
from mtpstudio.core.server.load_log import LoadReport, parse_load_log
from mtpstudio.core.server.preflight import check_binary, check_model, check_port
from mtpstudio.core.server.process import ProcessOutcome, ProcessSpec, ServerProcess, process_spec
from mtpstudio.core.server.reconcile import reconcile, save_measurement
from mtpstudio.core.server.state import (
    ServerState,
    logs_dir,
    remove_state,
    run_dir,
    save_state,
    servers_dir,
    state_path,
)
from mtpstudio.core.server.watchdog import Watchdog

PREDICT_AFTER_S = 0.25


def find_build(
    plan: Plan,
    environ: Mapping[str, str] | None = None,
    runner: Runner | None = None,
    cache_path: Path | None = None,
) -> EngineBuild:
    """The probed engine build the plan names (``engine.binary``), else the first build of
    its flavour found by detection (``$MTPSTUDIO_ENGINES``, ``$PATH``, …). Probes are cached.

    Raises:
        ServerError: no such build, or it is of the other flavour.
    """
    from mtpstudio.core.detect.engines import detect_engines

    env = os.environ if environ is None else environ
    wanted = plan.engine.binary
    if wanted is not None:
        check_binary(Path(wanted))
    extra = [Path(wanted)] if wanted is not None else []
    found = detect_engines(env, runner or SubprocessRunner(env), extra, cache_path=cache_path)
    builds = [b for b in (e.to_build() for e in found.engines) if b is not None]
    if wanted is not None:
        real = Path(wanted).resolve()
        build = next((b for b in builds if Path(b.binary).resolve() == real), None)
        if build is None:
            raise ServerError(
                f"{wanted} did not answer like a llama-server build mtpstudio knows",
                hint="Run `mtpstudio detect` to see what it answered.",
            )
        if build.flavour is not plan.engine.flavour:
            raise ServerError(
                f"the plan is for {plan.engine.flavour.value} but {describe_build(build)} is "
                f"{build.flavour.value}",
                hint="Set engine.flavour to match the binary, or choose another binary.",
            )
        return build
    build = next((b for b in builds if b.flavour is plan.engine.flavour), None)
    if build is None:
        raise ServerError(
            f"no {plan.engine.flavour.value} llama-server was found",
            hint="Put its path in the plan (--engine PATH), or add its folder to "
            "MTPSTUDIO_ENGINES; `mtpstudio detect` shows where mtpstudio looked.",
        )
    return build


Prediction = Callable[[], tuple[Budget, str]]
"""Computes the budget the planner predicts for a launch, and the device id it is for."""


@dataclass(frozen=True)
class PreparedLaunch:
    """Everything checked and built before a process starts.

    ``prediction`` (from the planner) computes the predicted budget while the server loads;
    None: nothing to reconcile the logged sizes with.
    """

    plan: Plan
    build: EngineBuild
    model: ModelInfo
    spec: LaunchSpec
    process: ProcessSpec
    draft_model: ModelInfo | None = None
    prediction: Prediction | None = field(default=None, compare=False, repr=False)


def new_log_path(port: int, now: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = logs_dir() / f"server-{port}-{stamp}"
    path, n = base.with_suffix(".log"), 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}.{n}.log")
    return path


def preflight(plan: Plan, build: EngineBuild) -> tuple[Path, ModelInfo, ModelInfo | None]:
    """Check the binary and the model file(s): the model's path and header, the draft's header.

    Raises:
        ServerError / GgufError: something would make the start fail; nothing has started.
    """
    path = plan.model.path
    if path is None:
        raise ServerError(
            f"the plan uses the demo card {plan.model.card}, which has no model file to run",
            hint="Choose your GGUF file (mtpstudio plan --model PATH --save plan.json).",
        )
    check_binary(build.binary)
    info = check_model(Path(path))
    return Path(path), info, _check_draft(plan)


def prepare_process(
    plan: Plan,
    build: EngineBuild,
    spec: LaunchSpec,
    model: ModelInfo,
    draft_model: ModelInfo | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    die_with_parent: bool = False,
    prediction: Prediction | None = None,
) -> PreparedLaunch:
    """Check the port and turn the planner's command into a process spec.

    Raises:
        ServerError: the port is taken; nothing has started.
    """
    check_port(plan.server.host, plan.server.port)
    env = os.environ if environ is None else environ
    log = log_path or new_log_path(plan.server.port)
    pspec = process_spec(spec, log, env, cwd=run_dir(), die_with_parent=die_with_parent)
    return PreparedLaunch(plan, build, model, spec, pspec, draft_model, prediction)


def _check_draft(plan: Plan) -> ModelInfo | None:
    if plan.draft.path is None:
        return None
    return check_model(Path(plan.draft.path), role="draft model")


@dataclass(frozen=True)
class LaunchResult:
    """What a launch did. ``ok``: healthy and recorded; otherwise ``diagnosis`` says why not."""

    prepared: PreparedLaunch
    health: HealthResult
    report: LoadReport
    outcome: ProcessOutcome
    seconds: float
    state: ServerState | None = None
    diagnosis: Diagnosis | None = None
    reconciliation: Reconciliation | None = None
    prediction_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.health.state is HealthState.HEALTHY and self.state is not None

    @property
    def log_path(self) -> Path:
        return self.prepared.process.log_path


class _Prediction(threading.Thread):
    """Computes the predicted budget while the server loads (detection takes a moment)."""

    def __init__(self, prepared: PreparedLaunch) -> None:
        super().__init__(name="mtpstudio-predict", daemon=True)
        self._prepared = prepared
        self.result: tuple[Budget, str] | None = None
        self.error: str | None = None

    def run(self) -> None:
        predict = self._prepared.prediction
        if predict is None:
            self.error = "the launch was prepared without a prediction"
            return
        try:
            self.result = predict()
        except MtpStudioError as exc:
            self.error = str(exc)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"


def _read_log(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def run_launch(
    prepared: PreparedLaunch,
    *,
    timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
    on_line: Callable[[str], None] | None = None,
    predict: bool = True,
    record: bool = True,
) -> tuple[LaunchResult, ServerProcess | None]:
    """Start, wait for health, and explain. Never leaves a failed process behind.

    Returns the result and, when healthy, the running ServerProcess (the caller owns it:
    leave it running detached, or stop it). ``record`` writes the server state and the
    measurement; ``predict`` computes the reconciliation.
    """
    started = time.monotonic()
    plan = prepared.plan
    # The prediction (detection + budget) runs while the engine loads, once the load takes
    # longer than PREDICT_AFTER_S, so it does not compete with a quick start for the CPU.
    prediction = _Prediction(prepared) if predict and prepared.prediction is not None else None
    # A server meant to outlive this process dies with it until it is healthy (watchdog.py);
    # one that never outlives it has the kernel's parent-death signal instead.
    record_file = state_path(plan.server.port)
    guard = None if prepared.process.die_with_parent else Watchdog.start(record_file)
    try:
        proc = ServerProcess.start(prepared.process)
    except BaseException:
        if guard is not None:
            guard.release()
        raise
    spawned = time.monotonic()
    predicting = False

    def tick(answer: HealthAnswer) -> None:
        nonlocal predicting
        loading = answer.status != 200 and time.monotonic() - spawned > PREDICT_AFTER_S
        if prediction is not None and loading and not predicting:
            prediction.start()
            predicting = True
        lines = proc.read_log()
        if on_line is not None:
            for line in lines:
                on_line(line)

    loading_state: ServerState | None = None
    try:
        if guard is not None:
            guard.watch(proc.pid, procfs.start_ticks(proc.pid))
        if record:  # before the wait: `server status/stop` see a loading server too
            loading_state = record_state(prepared, proc, None)
        health = wait_healthy(
            proc,
            plan.server.host,
            plan.server.port,
            timeout,
            on_tick=tick,
            owns_port=lambda: procfs.listens_on(proc.pid, plan.server.port),
        )
    except BaseException:  # Ctrl-C or a bug while waiting: never leave the server behind
        proc.kill()
        _forget(loading_state, guard)
        raise
    seconds = time.monotonic() - started
    if health.state is not HealthState.HEALTHY:
        outcome = proc.stop(grace=2.0)
        _forget(loading_state, guard)
        tick(health.last)
        report = parse_load_log(_read_log(prepared.process.log_path))
        diagnosis = diagnose(report, plan, outcome, health, model=prepared.model)
        result = LaunchResult(prepared, health, report, outcome, seconds, diagnosis=diagnosis)
        return result, None
    tick(health.last)
    report = parse_load_log(_read_log(prepared.process.log_path))
    state: ServerState | None = None
    try:
        if record:
            state = record_state(prepared, proc, health.seconds)
    except BaseException:
        proc.kill()
        _forget(loading_state, guard)
        raise
    if guard is not None:
        guard.release()  # healthy and recorded: from here on it outlives this process
    rec: Reconciliation | None = None
    error: str | None = None
    if prediction is not None:
        if predicting:
            prediction.join()
        else:
            prediction.run()  # healthy at the first probe: predict now, in this thread
        error = prediction.error
        if prediction.result is not None:
            rec, error = reconcile_launch(prepared, report, *prediction.result, record=record)
    note: Diagnosis | None = None
    if report.drafting_disabled and (plan.mtp.enabled or plan.draft.path is not None):
        note = diagnose(report, plan, proc.outcome, health, model=prepared.model)
    result = LaunchResult(
        prepared,
        health,
        report,
        proc.outcome,
        seconds,
        state=state,
        diagnosis=note,
        reconciliation=rec,
        prediction_error=error,
    )
    return result, proc


def _forget(state: ServerState | None, guard: Watchdog | None) -> None:
    """The server was stopped here: drop its record, and the watchdog with nothing to do."""
    if state is not None:
        remove_state(state)
    if guard is not None:
        guard.release()


def reconcile_launch(
    prepared: PreparedLaunch, report: LoadReport, budget: Budget, device: str, *, record: bool
) -> tuple[Reconciliation, str | None]:
    """The predicted budget against the logged sizes; ``record`` stores it for "last measured"."""
    rec = reconcile(budget, report, memory_facts(prepared.build), build_key(prepared.build), device)
    if record:
        try:
            save_measurement(rec)
        except MtpStudioError as exc:
            return rec, f"measurement not saved: {exc}"
    return rec, None


def measure_launch(
    prepared: PreparedLaunch, report: LoadReport, *, record: bool = True
) -> tuple[Reconciliation | None, str | None]:
    """Compute the prediction (off the GUI thread) and set it against the logged sizes.

    Returns the reconciliation (None when nothing could be predicted) and what went wrong, as
    one sentence, if anything did.
    """
    if prepared.prediction is None:
        return None, "the launch was prepared without a prediction"
    try:
        budget, device = prepared.prediction()
    except MtpStudioError as exc:
        return None, str(exc)
    return reconcile_launch(prepared, report, budget, device, record=record)


class HasPid(Protocol):
    """A started server process as ``record_state`` needs it (core's or the GUI's)."""

    @property
    def pid(self) -> int: ...


def record_state(
    prepared: PreparedLaunch, proc: HasPid, healthy_after: float | None
) -> ServerState | None:
    """Save the plan copy and the server state in the XDG state dir (``healthy_after`` None
    while it loads). None when the process is already gone: without its start time a record
    could not be told from a later program with the same pid, so none is written."""
    start = procfs.start_ticks(proc.pid)
    if start is None:
        return None
    plan = prepared.plan
    plan_path = servers_dir() / f"{plan.server.port}.plan.json"
    save_plan(plan, plan_path)
    state = ServerState(
        pid=proc.pid,
        start_ticks=start,
        host=plan.server.host,
        port=plan.server.port,
        log_path=str(prepared.process.log_path),
        plan_path=str(plan_path),
        flavour=plan.engine.flavour.value,
        binary=str(prepared.build.binary),
        argv=list(prepared.spec.argv),
        healthy_after_s=None if healthy_after is None else round(healthy_after, 3),
    )
    save_state(state)
    return state
