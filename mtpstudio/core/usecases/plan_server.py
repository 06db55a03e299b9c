"""The ServerLauncher behind ``bench --plan`` and ``tune``: a plan's server started through the
launch use case on a free loopback port, handed over as a BenchTarget, stopped afterwards."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.engines.apikey import plan_api_key
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.registry import describe_build
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.errors import ServerError
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts
from mtpstudio.core.server.diagnosis import Diagnosis
from mtpstudio.core.server.health import DEFAULT_STARTUP_TIMEOUT_S
from mtpstudio.core.server.moe_cache_log import parse_moe_cache_log
from mtpstudio.core.server.state import remove_state
from mtpstudio.core.usecases.launch import find_build, launch_machine, prepare_launch, run_launch

LOOPBACK = "127.0.0.1"
# Settings whose flags mean the server drafts (MTP, or a separate draft model).
DRAFTING_SETTINGS = frozenset({"mtp.enabled", "draft.path"})


class BenchLaunchError(ServerError):
    """A plan's server did not come up for the benchmark; ``diagnosis`` says why."""

    def __init__(
        self,
        message: str,
        hint: str = "",
        diagnosis: Diagnosis | None = None,
        log_path: Path | None = None,
    ) -> None:
        super().__init__(message, hint)
        self.diagnosis = diagnosis
        self.log_path = log_path


@dataclass(frozen=True)
class LaunchRecord:
    """One server a launcher started: the plan as launched (its port) and the plan's command
    (without what the benchmark adds, e.g. ``--metrics``)."""

    plan: Plan
    argv: tuple[str, ...]


def free_loopback_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def bench_plan(plan: Plan, port: int) -> Plan:
    """The plan as the benchmark runs it: on loopback, on ``port`` (pure)."""
    return plan_with(plan, {"server.host": LOOPBACK, "server.port": port})


def with_metrics(spec: LaunchSpec, build: EngineBuild) -> tuple[str, ...]:
    """``--metrics`` when the build takes it and the spec lacks it (the totals' cross-check)."""
    if spec.note_for("--metrics") is not None or not build.accepts("--metrics"):
        return ()
    return ("--metrics",)


def drafting_requested(spec: LaunchSpec) -> bool:
    """Whether the command asks the engine to draft (MTP or a draft model), as emitted."""
    return any(note.setting in DRAFTING_SETTINGS for note in spec.flags)


class PlanServerLauncher:
    """``launcher(plan, label=..., env=...)`` -> context yielding a BenchTarget.

    Each call starts the plan's server on a free loopback port through ``prepare_launch`` /
    ``run_launch`` (preflight, the plan resolved for this machine, health wait, diagnosis,
    reconciliation stored), with ``env`` added and ``--metrics`` on; leaving the context stops
    and reaps it. The servers die with the thread that started them, so a killed benchmark
    leaves none behind. Each build is probed, and the machine detected, once per launcher.

    Attributes:
        timeout: seconds each server may take to become healthy.
        log_dir: where the server logs go (None: the state dir's logs folder).
        measure: predict and store the reconciliation of each launch (the tuner, which starts
            many short-lived servers, turns it off).
        started: (label, pid, log path) of every server started, in order.
        launched: every server asked for (the plan as launched and its argv), in order.
        events: ``start LABEL`` / ``stop LABEL`` in the order they happened.
        moe_cache: (label, the engine's own MoE cache line) of each stopped server whose log
            has one (upstream b11549 on prints its hits and hit rate when it stops).
    """

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        log_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
        measure: bool = True,
        machine: MachineFacts | None = None,
    ) -> None:
        self.timeout = timeout
        self.log_dir = log_dir
        self.environ = environ
        self.measure = measure
        self.started: list[tuple[str, int, Path]] = []
        self.launched: list[LaunchRecord] = []
        self.events: list[str] = []
        self.moe_cache: list[tuple[str, str]] = []
        self._builds: dict[str, EngineBuild] = {}
        self._machine = machine

    def _build(self, plan: Plan) -> EngineBuild:
        """The plan's build, probed once per launcher (the tuner starts the same one often)."""
        key = f"{plan.engine.flavour.value}:{plan.engine.binary}"
        if key not in self._builds:
            self._builds[key] = find_build(plan, self.environ)
        return self._builds[key]

    @contextmanager
    def __call__(self, plan: Plan, *, label: str, env: Mapping[str, str]) -> Iterator[BenchTarget]:
        plan = bench_plan(plan, free_loopback_port())
        build = self._build(plan)
        log = None
        if self.log_dir is not None:
            log = self.log_dir / f"{label or 'server'}-{plan.server.port}.log"
        if self._machine is None:
            self._machine = launch_machine(build)
        prepared = prepare_launch(plan, build, environ=self.environ, log_path=log,
                                  die_with_parent=True, machine=self._machine)  # fmt: skip
        extra = with_metrics(prepared.spec, build)
        process = dataclasses.replace(
            prepared.process,
            argv=(*prepared.process.argv, *extra),
            env={**prepared.process.env, **env},
        )
        prepared = dataclasses.replace(prepared, process=process)
        self.launched.append(LaunchRecord(plan, tuple(prepared.spec.argv)))  # w/o --metrics
        result, proc = run_launch(
            prepared, timeout=self.timeout, predict=self.measure, record=self.measure
        )
        if proc is None:  # not healthy (``result.ok`` also needs a recorded state)
            raise BenchLaunchError(
                f"the server for {label or 'the plan'} did not start: {_cause(result.diagnosis)}",
                hint=_hint(result.diagnosis, result.log_path),
                diagnosis=result.diagnosis,
                log_path=result.log_path,
            )
        self.started.append((label, proc.pid, result.log_path))
        self.events.append(f"start {label}")
        device = result.reconciliation.device if result.reconciliation else plan.device
        try:
            yield BenchTarget(
                base_url=f"http://{LOOPBACK}:{plan.server.port}",
                flavour=plan.engine.flavour,
                label=label,
                drafting_requested=drafting_requested(prepared.spec),
                api_key=plan_api_key(plan.server.api_key_file),
                plan=plan,
                engine_build=describe_build(build),
                device=device,
                env=dict(env),
            )
        finally:
            proc.stop()
            self.events.append(f"stop {label}")
            if result.state is not None:
                remove_state(result.state)
            words = moe_cache_words(result.log_path)
            if words is not None:
                self.moe_cache.append((label, words))


def moe_cache_words(log_path: Path) -> str | None:
    """What a stopped server's log says of its MoE cache (its hit rate; None: nothing)."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return parse_moe_cache_log(text).words()


def _cause(diagnosis: Diagnosis | None) -> str:
    return diagnosis.cause.rstrip(".") if diagnosis else "it ended before answering /health"


def _hint(diagnosis: Diagnosis | None, log: Path) -> str:
    """The most likely fix, then where the full log is."""
    first = diagnosis.fixes[0] if diagnosis and diagnosis.fixes else None
    if first is None:
        return f"Read the log: {log}."
    changes = ", ".join(f"{k}={v}" for k, v in first.changes.items())
    return f"Try: {first.label} ({changes}). Full log: {log}."
