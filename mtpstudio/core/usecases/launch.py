"""Launch and measure: a Plan resolved on this machine, its server prepared, started, reconciled.

One path for ``mtpstudio launch``, ``bench --plan`` and ``tune``: ``prepare_launch`` finds
nothing by itself (the build is given), checks the files, resolves the plan once with
``planning.resolve`` (target, MTP, the command line for the resolved target) and hands the
server layer a finished command plus the budget prediction to reconcile against. The GUI's
Start button runs ``prepare_resolved_launch``: the plan exactly as the pages resolved and showed
it (its build, target, MTP, budget), nothing detected again (Vorta's prepare, then run);
``run_launch`` (the CLI's subprocess) or the GUI's ``QProcess`` start it; ``measure_launch``
sets the prediction against the logged sizes; ``bench_target`` hands the server to the
benchmark. The plain types the GUI needs are re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.catalog.gpus import gpu_card
from mtpstudio.core.detect.engines import probe_engine_file
from mtpstudio.core.detect.gather import detect_all
from mtpstudio.core.engines.apikey import plan_api_key
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.registry import describe_build
from mtpstudio.core.errors import MtpStudioError, ServerError
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import load_plan, plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    ResolvedPlan,
    budget_for,
    launch_spec_for,
    machine_for,
    resolve,
)
from mtpstudio.core.runner import SubprocessRunner
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
from mtpstudio.core.server.preflight import check_binary, check_model
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
    "prepare_resolved_launch",
    "record_state",
    "refuse_unresolved",
    "replan_for_here",
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
    return _prepared(
        resolved,
        build,
        path,
        environ=environ,
        log_path=log_path,
        die_with_parent=die_with_parent,
    )


def replan_for_here(resolved: ResolvedPlan) -> ResolvedPlan:
    """The plan the pages resolved, replanned for what this computer runs it on: a binary the
    plan names that detection did not probe is probed (cached) and the plan resolved with it; a
    plan for a catalogue card this computer does not have is resolved for what it has
    (``card_not_here`` says so on the Launch page). Unchanged when neither applies. Run it
    before ``prepare_resolved_launch``, which refuses a plan that needs it.

    Raises:
        ServerError: the named binary is missing or does not answer like a llama-server build.
    """
    if not resolved.build.probed and resolved.plan.engine.binary is not None:
        resolved = _with_named_build(resolved, Path(resolved.plan.engine.binary))
    if card_not_here(resolved.plan, resolved.pctx.machine) is not None:
        resolved = resolved.with_changes({"device": "auto"})
    return resolved


def prepare_resolved_launch(
    resolved: ResolvedPlan,
    *,
    environ: Mapping[str, str] | None = None,
    log_path: Path | None = None,
) -> PreparedLaunch:
    """Check the files and the port and build the command of exactly this resolved plan.

    Nothing is detected or resolved again: the build, the target, MTP and the budget
    prediction are the ones ``resolved`` carries. A plan that would need replanning to run
    here (a catalogue card this computer lacks, a named binary never probed) is refused with
    "replan first" (``replan_for_here`` does it). The plan is pinned to the build's binary.

    Raises:
        ServerError / AdapterError / GgufError: something would make the start fail (no engine
            build was found, the plan needs replanning, a file, the port); nothing has started.
    """
    _refuse_unplanned_here(resolved)
    build = resolved.build.build
    if resolved.plan.engine.binary is None:  # the build shown, named (no decision changes)
        named = {"engine.binary": str(build.binary)}
        resolved = dataclasses.replace(
            resolved,
            plan=plan_with(resolved.plan, named),
            effective=plan_with(resolved.effective, named),
        )
    path, _, _ = preflight(resolved.plan, build)
    return _prepared(resolved, build, path, environ=environ, log_path=log_path)


def _refuse_unplanned_here(resolved: ResolvedPlan) -> None:
    """Refuse a resolved plan that is not the one that runs on this computer.

    Raises:
        ServerError: no build was probed for it, or it was planned for a card not here.
    """
    plan = resolved.plan
    if not resolved.build.probed and plan.engine.binary is not None:
        raise ServerError(
            f"the plan was planned with the documented flags, not the engine at "
            f"{plan.engine.binary}",
            hint="Replan first: probe that build (Refresh on the Hardware page) and plan again.",
        )
    if not resolved.build.probed:
        raise ServerError(
            f"no {plan.engine.flavour.value} llama-server was found",
            hint="Pick a build on the Engine & options page, or add its folder to $PATH and "
            "press Refresh on the Hardware page.",
        )
    if card_not_here(plan, resolved.pctx.machine) is not None:
        raise ServerError(
            f"the plan's budget and command are for the catalogue {gpu_card(plan.device).name}, "
            "which is not in this computer",
            hint="Replan first for what this computer has (device auto), then start.",
        )


def _with_named_build(resolved: ResolvedPlan, binary: Path) -> ResolvedPlan:
    """``resolved`` on the same facts with the build at ``binary`` probed (the probe cached).

    Raises:
        ServerError: no program there, or it does not answer like a llama-server build.
    """
    check_binary(binary)
    build = probe_engine_file(binary, SubprocessRunner()).to_build()
    if build is None:
        raise ServerError(
            f"{binary} did not answer like a llama-server build mtpstudio knows",
            hint="Pick another build on the Engine & options page (Browse…).",
        )
    pctx = resolved.pctx
    machine = dataclasses.replace(pctx.machine, builds=(*pctx.machine.builds, build))
    return resolve(resolved.plan, dataclasses.replace(pctx, machine=machine))


def refuse_unresolved(plan: Plan) -> NoReturn:
    """Why a plan the pages could not resolve (its model unread) cannot start, in the order a
    launch checks: the binary it names, the model file, else that the header is still being
    read. Nothing is detected.

    Raises:
        ServerError / GgufError: always.
    """
    if plan.engine.binary is not None:
        check_binary(Path(plan.engine.binary))
    if plan.model.path is None:
        raise ServerError(
            f"the plan uses the demo card {plan.model.card}, which has no model file to run",
            hint="Open your GGUF file on the Model page.",
        )
    check_model(Path(plan.model.path))
    raise ServerError(
        "the model's header has not been read yet",
        hint="Wait until the Model page shows it, then press Start again.",
    )


def _prepared(
    resolved: ResolvedPlan,
    build: EngineBuild,
    path: Path,
    *,
    environ: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    die_with_parent: bool = False,
) -> PreparedLaunch:
    """The resolved plan's command (``-lv 4`` added) and budget as a process to start."""
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
