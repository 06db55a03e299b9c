"""A ServerLauncher for tests: the Plan's real command line (engine adapter) run by start_server.

It stands in for the server-launch work until that is wired into ``mtpstudio bench --plan``;
the command is the one the adapters build for the plan, so the servers are the real thing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.engines.base import describe_build
from mtpstudio.core.engines.registry import build_launch_spec, documented_build
from mtpstudio.core.plan import Plan, plan_with

from .servers import LlamaServer, free_port, start_server


class PlanLauncher:
    """``launcher(plan, label=..., env=...)`` -> context of a BenchTarget; records its servers."""

    def __init__(self, log_dir: Path, extra_args: tuple[str, ...] = ("--metrics",)) -> None:
        self.log_dir = log_dir
        self.extra_args = extra_args
        self.servers: list[LlamaServer] = []
        self.labels: list[str] = []

    @contextmanager
    def __call__(self, plan: Plan, *, label: str, env: Mapping[str, str]) -> Iterator[BenchTarget]:
        assert plan.engine.binary is not None, "test plans name their engine binary"
        plan = plan_with(plan, {"server.port": free_port()})
        build = documented_build(plan.engine.flavour, plan.engine.binary)
        spec = build_launch_spec(plan, build, assume_documented=True)
        server = start_server(
            plan.engine.binary,
            None,
            [*spec.args, *self.extra_args],
            log_dir=self.log_dir,
            engine=plan.engine.flavour.value,
            port=plan.server.port,
            threads=None,
            ctx_size=None,
            parallel=None,
            attempts=1,
            env={**spec.env, **env},
        )
        self.servers.append(server)
        self.labels.append(label)
        try:
            yield BenchTarget(
                base_url=server.base_url,
                flavour=plan.engine.flavour,
                label=label,
                drafting_requested=plan.mtp.enabled,
                plan=plan,
                engine_build=describe_build(build),
                device=plan.device,
                env=dict(env),
            )
        finally:
            server.stop()
