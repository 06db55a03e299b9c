"""Launch and measure: a Plan resolved on this machine, its server prepared, started, reconciled.

One path for ``mtpstudio launch``, ``bench --plan``, ``tune`` and the GUI's Start button:
``prepare_launch`` finds nothing by itself (the build is given), checks the files, resolves the
plan once with ``planning.resolve`` (target, MTP, the command line for the resolved target) and
hands the server layer a finished command plus the budget prediction to reconcile against;
``run_launch`` (the CLI's subprocess) or the GUI's ``QProcess`` start it; ``measure_launch``
sets the prediction against the logged sizes; ``bench_target`` hands the server to the
benchmark. The plain types the GUI needs are re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.detect.gather import detect_all
from mtpstudio.core.engines.apikey import plan_api_key
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.registry import describe_build
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.memory.budget import Budget
from mtpstudio.core.model.catalog.gpus import gpu_card
from mtpstudio.core.plan import EngineFlavour, Plan, load_plan, plan_with
from mtpstudio.core.planning import (
    MachineFacts,
    ResolvedPlan,
    budget_for,
    launch_spec_for,
    machine_for,
    resolve,
)
from mtpstudio.core.server.health import connect_host
from mtpstudio.core.server.launch import (
    LaunchResult,
    PreparedLaunch,
    find_build,
    measure_launch,
    preflight,
    prepare_process,
    record_state,
    run_launch,
)
from mtpstudio.core.server.process import ProcessOutcome, stop_pid
from mtpstudio.core.server.state import (
    Liveness,
    ServerState,
    load_states,
    prune_stale,
    remove_state,
)
from mtpstudio.core.usecases.planning_context import planning_context_for

__all__ = [
    "LaunchResult",
    "PreparedLaunch",
    "attached_target",
    "bench_target",
    "card_not_here",
    "find_build",
    "launch_machine",
    "measure_launch",
    "prepare_launch",
    "record_state",
    "resolve_launch",
    "run_launch",
    "servers_elsewhere",
    "stop_elsewhere",
]


def launch_machine(build: EngineBuild, machine: MachineFacts | None = None) -> MachineFacts:
    """This machine as the planner sees it (detected now unless given), with ``build`` only."""
    found = machine if machine is not None else machine_for(detect_all(include_engines=False))
    return dataclasses.replace(found, builds=(build,))


def card_not_here(plan: Plan, machine: MachineFacts) -> str | None:
    """The plan is for a catalogue card this computer does not have: where the engine runs
    instead, in one sentence (None: the plan's device is here, or is auto or the CPU)."""
    try:
        card = gpu_card(plan.device)
    except MtpStudioError:
        return None
    if any(g.name.lower() == card.name.lower() for g in machine.gpus):
        return None
    here = machine.gpus[0] if machine.gpus else None
    where = f"{here.id} ({here.name})" if here is not None else "the CPU"
    return (
        f"The plan is for the catalogue {card.name}, which is not in this computer: the server "
        f"runs on {where}, and its memory is compared with what {where} holds"
    )


def resolve_launch(
    plan: Plan, build: EngineBuild, machine: MachineFacts | None = None
) -> tuple[Path, ResolvedPlan]:
    """Check the binary and the model file(s), then resolve the plan for ``build`` here.

    A plan for a catalogue card this computer does not have is resolved for what it has (the
    detected GPU, else the CPU): that is where the engine runs (``card_not_here`` says so).

    Raises:
        MtpStudioError: a file is missing or broken, or the plan cannot be resolved.
    """
    path, model, draft = preflight(plan, build)
    facts = launch_machine(build, machine)
    if card_not_here(plan, facts) is not None:
        plan = plan_with(plan, {"device": "auto"})
    pctx = planning_context_for(plan, facts, model, draft=draft)
    return path, resolve(plan, pctx)


def prepare_launch(
    plan: Plan,
    build: EngineBuild,
    *,
    environ: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    die_with_parent: bool = False,
    machine: MachineFacts | None = None,
) -> PreparedLaunch:
    """Check the files and the port, resolve the plan once, and build the command.

    The command is the one ``mtpstudio plan`` shows for this machine (``-lv 4`` added so the
    log carries the buffer sizes); the prediction is the same plan's budget.

    Raises:
        ServerError / AdapterError / GgufError: something would make the start fail; nothing
            has started.
    """
    path, resolved = resolve_launch(plan, build, machine)
    spec, _ = launch_spec_for(resolved, for_mtpstudio_launch=True, model_path=path)

    def predict() -> tuple[Budget, str]:
        return budget_for(resolved), resolved.target.device.id

    return prepare_process(
        resolved.effective,
        build,
        spec,
        resolved.model,
        resolved.pctx.draft_model,
        environ=environ,
        log_path=log_path,
        die_with_parent=die_with_parent,
        prediction=predict,
    )


def bench_target(prepared: PreparedLaunch, base_url: str, label: str | None = None) -> BenchTarget:
    """The launched server as the benchmark sees it (drafting requested, build, device)."""
    plan = prepared.plan
    return BenchTarget(
        base_url=base_url,
        flavour=plan.engine.flavour,
        label=label or plan.model.label,
        drafting_requested=bool(plan.mtp.enabled) or plan.draft.path is not None,
        api_key=plan_api_key(plan.server.api_key_file),
        plan=plan,
        engine_build=describe_build(prepared.build),
        device=plan.device,
    )


# ------------------------------------------------------------------------------------------------
# servers mtpstudio started elsewhere (the CLI, another window)


def servers_elsewhere(own_pid: int = 0) -> list[ServerState]:
    """The running servers mtpstudio recorded (``launch``, another window), but ``own_pid``."""
    states = load_states()
    prune_stale(states)  # records of servers that are gone
    return [s for s in states if s.liveness() is Liveness.RUNNING and s.pid != own_pid]


def attached_target(state: ServerState) -> BenchTarget:
    """A server started elsewhere, as the benchmark sees it (its plan, when still readable)."""
    plan: Plan | None
    try:
        plan = load_plan(Path(state.plan_path))
    except MtpStudioError:
        plan = None
    return BenchTarget(
        base_url=f"http://{connect_host(state.host)}:{state.port}",
        flavour=EngineFlavour(state.flavour),
        label=f"port {state.port}",
        drafting_requested=None,  # the server's own answers say
        plan=plan,
        device=plan.device if plan is not None else None,
    )


def stop_elsewhere(state: ServerState) -> ProcessOutcome:
    """Stop a server started elsewhere (as `mtpstudio server stop` does) and forget it."""
    outcome = stop_pid(state.pid, state.start_ticks)
    remove_state(state)
    return outcome
