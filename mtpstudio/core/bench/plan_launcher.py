"""Start a Plan's server for a benchmark run (core/server launch) and hand it over as a BenchTarget.

The server listens on a free loopback port (the plan's own port may be taken by the user's
running server), is never recorded as the user's server, and is stopped when the context ends.
A failed start raises ``CandidateLaunchError`` carrying the launch diagnosis.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.engines.apikey import plan_api_key
from mtpstudio.core.engines.base import describe_build
from mtpstudio.core.engines.caps import EngineBuild
from mtpstudio.core.errors import ServerError
from mtpstudio.core.plan import Plan, plan_with
from mtpstudio.core.server.diagnosis import Diagnosis
from mtpstudio.core.server.health import DEFAULT_STARTUP_TIMEOUT_S
from mtpstudio.core.server.launch import find_build, prepare_launch, run_launch

LOOPBACK = "127.0.0.1"


class CandidateLaunchError(ServerError):
    """The server did not start; ``diagnosis`` says why (when the log or exit tells)."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        diagnosis: Diagnosis | None = None,
        log_path: Path | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.diagnosis = diagnosis
        self.log_path = log_path


def free_loopback_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def for_benchmark(plan: Plan, port: int) -> Plan:
    """The plan as launched for a measurement: loopback, the given port (pure)."""
    return plan_with(plan, {"server.host": LOOPBACK, "server.port": port})


@dataclass(frozen=True)
class LaunchRecord:
    """One server this launcher started: the plan as launched (its port) and its argv."""

    plan: Plan
    argv: tuple[str, ...]


@dataclass
class PlanServerLauncher:
    """``launcher(plan, label=..., env=...)`` -> context of a BenchTarget (a ServerLauncher).

    Attributes:
        timeout_s: how long a server may take to become healthy.
        launched: every server started (the plan as launched and its argv), in order.
    """

    timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    launched: list[LaunchRecord] = field(default_factory=list)
    _builds: dict[str, EngineBuild] = field(default_factory=dict)

    def _build(self, plan: Plan) -> EngineBuild:
        key = f"{plan.engine.flavour.value}:{plan.engine.binary}"
        if key not in self._builds:
            self._builds[key] = find_build(plan)
        return self._builds[key]

    @contextmanager
    def __call__(self, plan: Plan, *, label: str, env: Mapping[str, str]) -> Iterator[BenchTarget]:
        run_plan = for_benchmark(plan, free_loopback_port())
        build = self._build(run_plan)
        prepared = prepare_launch(
            run_plan, build, environ=None if not env else _with_env(env), die_with_parent=True
        )
        self.launched.append(LaunchRecord(run_plan, tuple(prepared.spec.argv)))
        result, proc = run_launch(prepared, timeout=self.timeout_s, predict=False, record=False)
        if proc is None:
            diagnosis = result.diagnosis
            cause = diagnosis.cause if diagnosis is not None else "the server did not start"
            raise CandidateLaunchError(
                f"{label}: {cause}",
                hint=f"See the server log {result.log_path}.",
                diagnosis=diagnosis,
                log_path=result.log_path,
            )
        try:
            yield BenchTarget(
                base_url=f"http://{LOOPBACK}:{run_plan.server.port}",
                flavour=run_plan.engine.flavour,
                label=label,
                drafting_requested=bool(prepared.plan.mtp.enabled)
                or run_plan.draft.path is not None,
                api_key=plan_api_key(run_plan.server.api_key_file),
                plan=plan,
                engine_build=describe_build(build),
                device=plan.device,
                env=dict(env),
            )
        finally:
            proc.stop(grace=3.0)


def _with_env(env: Mapping[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **env}
