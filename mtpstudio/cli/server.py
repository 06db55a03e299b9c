"""``mtpstudio server status|stop|logs|start``: the servers mtpstudio started, or its units."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mtpstudio.core.errors import ServerError
from mtpstudio.core.usecases.words import visible


def register(sub: Any) -> None:
    """Add ``server`` with its verbs."""
    p = sub.add_parser("server", help="status, stop and logs of servers mtpstudio started")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def unit_options(q: argparse.ArgumentParser) -> None:
        q.add_argument("--unit", help="act on this systemd unit mtpstudio installed instead")
        where = q.add_mutually_exclusive_group()
        where.add_argument("--user", dest="user_unit", action="store_true", default=True,
                           help="a user unit (default)")  # fmt: skip
        where.add_argument("--system", dest="user_unit", action="store_false",
                           help="a system unit")  # fmt: skip

    st = verbs.add_parser("status", help="is it running and healthy, where is its log")
    st.add_argument("--port", type=int, help="only the server on this port")
    st.add_argument("--json", action="store_true", help="print JSON")
    unit_options(st)
    st.set_defaults(func=cmd_status)

    sp = verbs.add_parser("stop", help="stop it (SIGTERM, then SIGKILL)")
    sp.add_argument("--port", type=int, help="only the server on this port (default: all)")
    sp.add_argument("--grace", type=float, default=10.0, metavar="S", help="seconds before SIGKILL")
    unit_options(sp)
    sp.set_defaults(func=cmd_stop)

    sa = verbs.add_parser("start", help="start an installed systemd unit")
    unit_options(sa)
    sa.set_defaults(func=cmd_start)

    lg = verbs.add_parser("logs", help="the server's log (or the unit's journal)")
    lg.add_argument("-n", "--lines", type=int, default=50, help="how many lines (default 50)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    lg.add_argument("--port", type=int, help="the server on this port")
    unit_options(lg)
    lg.set_defaults(func=cmd_logs)


def _unit(args: argparse.Namespace) -> Any:
    from mtpstudio.core.usecases.server_units import installed_unit

    return installed_unit(args.unit, args.user_unit)


def _states(port: int | None) -> tuple[list[Any], list[Any]]:
    """(live states, stale states removed), optionally only ``port``."""
    from mtpstudio.core.usecases.server_watch import servers_here

    return servers_here(port)


def cmd_status(args: argparse.Namespace) -> int:
    from mtpstudio.core.runner import SubprocessRunner
    from mtpstudio.core.usecases.server_watch import probe_health

    if args.unit:
        from mtpstudio.core.usecases.server_units import unit_status

        status = unit_status(_unit(args), SubprocessRunner())
        print(json.dumps(status.to_json(), indent=2) if args.json else status.describe())
        return 0 if status.active else 3
    live, stale = _states(args.port)
    rows: list[dict[str, Any]] = []
    for s in live:
        answer = probe_health(s.host, s.port, timeout=1.0)
        health = "healthy" if answer.status == 200 else f"not healthy ({answer.detail})"
        rows.append(
            {
                "pid": s.pid,
                "url": f"http://{s.host}:{s.port}",
                "port": s.port,
                "engine": s.flavour,
                "binary": s.binary,
                "state": "running" if s.healthy_after_s is not None else "loading",
                "health": health,
                "http_status": answer.status,
                "uptime_s": round(time.time() - s.started_at, 1),
                "log": s.log_path,
                "plan": s.plan_path,
            }
        )
    gone = [{"port": s.port, "pid": s.pid, "state": s.liveness().value} for s in stale]
    if args.json:
        print(json.dumps({"servers": rows, "stale_records_removed": gone}, indent=2))
    else:
        for g in gone:
            print(f"port {g['port']}: pid {g['pid']} is {g['state']}; removed its stale record")
        if not rows:
            print("No server started by mtpstudio is running.")
        for r in rows:
            print(
                f"{r['url']}  {r['engine']}  pid {r['pid']}  {r['state']}, {r['health']}, "
                f"up {r['uptime_s']:.0f} s\n  log:  {r['log']}\n  plan: {r['plan']}"
            )
    return 0 if rows else 3


def cmd_stop(args: argparse.Namespace) -> int:
    from mtpstudio.core.usecases.server_watch import remove_state, stop_pid

    if args.unit:
        from mtpstudio.core.runner import SubprocessRunner
        from mtpstudio.core.usecases.server_units import stop_unit

        unit = _unit(args)
        stop_unit(unit, SubprocessRunner())
        print(f"Stopped {unit.name}.")
        return 0
    live, _stale = _states(args.port)
    if not live:
        where = f" on port {args.port}" if args.port is not None else ""
        print(f"No server started by mtpstudio is running{where}.")
        return 0
    for s in live:
        outcome = stop_pid(s.pid, s.start_ticks, grace=args.grace, binary=s.binary)
        remove_state(s)
        how = "killed (it ignored SIGTERM)" if outcome.killed else "stopped"
        print(f"Server on port {s.port} (pid {s.pid}) {how}.")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from mtpstudio.core.runner import SubprocessRunner
    from mtpstudio.core.usecases.server_units import start_unit, unit_status

    if not args.unit:
        raise ServerError(
            "server start needs --unit (a unit mtpstudio installed)",
            hint="To start from a plan file, use `mtpstudio launch --plan PLAN`.",
        )
    unit = _unit(args)
    runner = SubprocessRunner()
    start_unit(unit, runner)
    print(unit_status(unit, runner).describe())
    return 0


def _log_path(port: int | None) -> Path:
    from mtpstudio.core.usecases.server_watch import load_states, logs_dir

    live = [s for s in load_states() if port is None or s.port == port]
    if len(live) > 1:
        ports = ", ".join(str(s.port) for s in live)
        raise ServerError(f"several servers are running (ports {ports})", hint="Pass --port.")
    if live:
        return Path(live[0].log_path)
    pattern = f"server-{port}-*.log" if port is not None else "server-*.log"
    logs = sorted(logs_dir().glob(pattern), key=lambda p: p.stat().st_mtime)
    if not logs:
        raise ServerError(
            "no server log found", hint="Start one with `mtpstudio launch --plan PLAN`."
        )
    return logs[-1]


def cmd_logs(args: argparse.Namespace) -> int:
    if args.unit:
        from mtpstudio.core.usecases.server_units import journal_argv

        unit = _unit(args)
        if args.follow:
            return subprocess.call(journal_argv(unit, args.lines, follow=True))
        from mtpstudio.core.runner import SubprocessRunner
        from mtpstudio.core.usecases.server_units import journal_tail

        text = journal_tail(unit, SubprocessRunner(), args.lines)
        sys.stdout.writelines(visible(line, keep_tabs=True) + "\n" for line in text.splitlines())
        return 0
    from mtpstudio.core.server.process import LogFollower

    path = _log_path(args.port)
    follower = LogFollower(path)
    lines = follower.poll()
    for line in lines[-args.lines :] if args.lines > 0 else []:
        print(visible(line, keep_tabs=True))
    if not args.follow:
        return 0
    sys.stdout.flush()  # the last lines now, not when the server next writes (a pipe buffers)
    from mtpstudio.core.usecases.server_watch import load_states

    try:
        while any(s.log_path == str(path) and s.liveness().value == "running"
                  for s in load_states()):  # fmt: skip
            for line in follower.poll():
                print(visible(line, keep_tabs=True), flush=True)
            time.sleep(0.25)
        for line in follower.poll():
            print(visible(line, keep_tabs=True))
    except KeyboardInterrupt:
        return 0
    return 0
