"""``mtpstudio render`` and ``mtpstudio export-unit``: the plan's files, written to disk."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``render`` and ``export-unit`` to the main parser's subparsers."""
    p_render = sub.add_parser("render", help="write the unit, env file, script and session files")
    _add_export_options(p_render)
    p_render.add_argument("--out", type=Path, required=True, help="folder to write into")
    p_render.set_defaults(func=cmd_render)

    p_unit = sub.add_parser(
        "export-unit",
        help="write the systemd unit, its environment file and their install script",
        description="Write the service as one installable set: the unit, the environment file "
        "it reads, and install-NAME.sh with the exact install steps; prints the commands that "
        "install and start it. Refused when the unit could not start (no engine build, a "
        "model that is not on this computer, a system unit as root).",
    )
    _add_export_options(p_unit)
    where = p_unit.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="the folder to write the set into")
    where.add_argument(
        "-o", "--output", type=Path, help="the unit file to write (the set goes beside it)"
    )
    p_unit.set_defaults(func=cmd_export_unit)


def _export_files(args: argparse.Namespace) -> Any:
    """Render the plan's files the way the GUI's Export does (service_files.export_files)."""
    from mtpstudio.core.plan.io import load_plan
    from mtpstudio.core.service.render import UnitScope
    from mtpstudio.core.usecases.desktop import desktop_facts
    from mtpstudio.core.usecases.machine import detect_for
    from mtpstudio.core.usecases.service import export_files
    from mtpstudio.core.usecases.workbench import resolved_for

    plan = load_plan(args.plan)
    resolved = resolved_for(plan, detect_for(plan))
    session = desktop_facts(None).settings(resolved.pctx.machine.igpu_card)
    return export_files(resolved, UnitScope(args.scope), args.user, session=session)


def cmd_render(args: argparse.Namespace) -> int:
    from mtpstudio.core.usecases.service import write_files

    out = _export_files(args)
    files = out.files
    result = write_files(files, args.out)
    for line in out.messages:
        print(line)
    for f in files.values():
        print(f"{args.out / f.name}  — {f.explanation}")
    for backup in result.backups:
        print(f"kept the previous version as {backup}")
    print(f"Wrote {len(result.written)} files; {args.out / 'README.md'} says how to install them.")
    return 0


def cmd_export_unit(args: argparse.Namespace) -> int:
    from mtpstudio.core.service.render import UnitScope
    from mtpstudio.core.usecases.service import write_service_set

    out = _export_files(args)
    files = dict(out.files)
    folder = args.out
    if args.output is not None:
        folder = args.output.parent
        files["unit"] = replace(files["unit"], name=args.output.name)
    written = write_service_set(files, UnitScope(args.scope), folder)
    for line in out.messages:
        print(line)
    print(written.message())
    for backup in written.backups:
        print(f"kept the previous version as {backup}")
    return 0


def _add_export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", type=Path, required=True, help="the plan file (mtpstudio plan --save)")
    p.add_argument(
        "--scope",
        choices=["system", "user"],
        default="system",
        help="system unit (starts at boot, runs as --user) or user unit (default: system)",
    )
    p.add_argument("--user", help="account a system unit runs as (default: you)")
