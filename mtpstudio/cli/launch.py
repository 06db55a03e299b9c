"""``mtpstudio launch``: start the plan's server, wait until healthy, show predicted vs actual."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mtpstudio.core.server.health import DEFAULT_STARTUP_TIMEOUT_S
from mtpstudio.core.usecases.words import visible


def register(sub: Any) -> None:
    """Add the ``launch`` subcommand."""
    p = sub.add_parser(
        "launch",
        help="start the plan's llama-server, wait until it is healthy, compare its memory",
        description="Start llama-server from a plan file. Returns once the server answers "
        "/health (it keeps running; stop it with `mtpstudio server stop`), or stays attached "
        "with --foreground until Ctrl-C. A failed start prints why and what to change.",
    )
    p.add_argument("--plan", type=Path, required=True, help="the plan file (mtpstudio plan --save)")
    p.add_argument(
        "--foreground", action="store_true", help="stay attached, show the log, stop on Ctrl-C"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_STARTUP_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the server to load (default {DEFAULT_STARTUP_TIMEOUT_S:g})",
    )
    p.add_argument("--port", type=int, help="listen on this port instead of the plan's")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_launch)


def _result_json(result: Any) -> dict[str, Any]:
    prepared = result.prepared
    plan = prepared.plan
    out: dict[str, Any] = {
        "ok": result.ok,
        "engine": plan.engine.flavour.value,
        "binary": str(prepared.build.binary),
        "version": prepared.build.version,
        "url": f"http://{plan.server.host}:{plan.server.port}",
        "log": str(result.log_path),
        "argv": list(prepared.spec.argv),
        "seconds": round(result.seconds, 3),
        "exit": result.outcome.describe(),
        "n_ctx": result.report.n_ctx,
        "drafting": result.report.drafting,
        "drafting_disabled": result.report.drafting_disabled,
        "warnings": list(prepared.spec.warnings),
    }
    if result.state is not None:
        out["pid"] = result.state.pid
        out["healthy_after_s"] = result.state.healthy_after_s
        out["state_file"] = str(result.state.path)
    if result.diagnosis is not None:
        out["diagnosis"] = result.diagnosis.to_json()
    if result.reconciliation is not None:
        out["reconciliation"] = result.reconciliation.to_json()
    if result.prediction_error:
        out["prediction_error"] = result.prediction_error
    return out


def cmd_launch(args: argparse.Namespace) -> int:
    from mtpstudio.core.plan.io import load_plan, plan_with
    from mtpstudio.core.usecases.launch import (
        card_not_here,
        find_build,
        launch_machine,
        prepare_launch,
        run_launch,
    )
    from mtpstudio.core.usecases.server_watch import prune_stale

    plan = load_plan(args.plan)
    if args.port is not None:
        plan = plan_with(plan, {"server.port": args.port})
    prune_stale()
    build = find_build(plan)
    machine = launch_machine(build)
    elsewhere = card_not_here(plan, machine)
    if elsewhere is not None:
        print(f"Note: {elsewhere}.", file=sys.stderr)
    prepared = prepare_launch(plan, build, die_with_parent=args.foreground, machine=machine)
    echo = args.foreground and not args.json

    def on_line(line: str) -> None:
        print(visible(line, keep_tabs=True), file=sys.stderr)

    result, proc = run_launch(prepared, timeout=args.timeout, on_line=on_line if echo else None)
    if args.json:
        print(json.dumps(_result_json(result), indent=2))
    if not result.ok:
        if not args.json:
            assert result.diagnosis is not None
            why = result.diagnosis.render()
            print(f"mtpstudio: the server did not start. {why}", file=sys.stderr)
            print(f"Full log: {result.log_path}", file=sys.stderr)
        return 1
    assert proc is not None and result.state is not None
    if not args.json:
        _print_started(result)
    if not args.foreground:
        return 0
    return _stay_attached(proc, result, echo)


def _print_started(result: Any) -> None:
    plan = result.prepared.plan
    state = result.state
    print(
        f"{plan.engine.flavour.value} llama-server is healthy at "
        f"http://{plan.server.host}:{plan.server.port} after {state.healthy_after_s:.2f} s "
        f"(pid {state.pid})."
    )
    print(f"Log: {result.log_path}")
    if result.report.drafting:
        print(f"Drafting: {result.report.drafting} context active.")
    if result.diagnosis is not None:
        print(result.diagnosis.render())
    if result.reconciliation is not None:
        print(result.reconciliation.render())
    elif result.prediction_error:
        print(f"No prediction to compare with: {result.prediction_error}")
    print(f"Stop it with: mtpstudio server stop --port {plan.server.port}")
    sys.stdout.flush()  # --foreground stays attached: whoever reads a pipe sees this now


def _stay_attached(proc: Any, result: Any, echo: bool) -> int:
    """Until Ctrl-C (then stop the server) or until the server exits by itself."""
    from mtpstudio.core.usecases.server_watch import diagnose_ended, remove_state

    try:
        while proc.alive():
            for line in proc.read_log():
                if echo:
                    print(visible(line, keep_tabs=True), file=sys.stderr)
            time.sleep(0.2)
    except KeyboardInterrupt:
        outcome = proc.stop()
        remove_state(result.state)
        print(f"Stopped the server ({outcome.describe()}).", file=sys.stderr)
        return 0
    outcome = proc.stop()
    remove_state(result.state)
    diagnosis = diagnose_ended(
        Path(result.log_path), result.prepared.plan, outcome, result.prepared.model
    )
    print(f"mtpstudio: the server ended: {diagnosis.render()}", file=sys.stderr)
    return 1
