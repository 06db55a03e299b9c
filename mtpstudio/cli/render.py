"""``mtpstudio render`` and ``mtpstudio export-unit``: the plan's files, written to disk."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mtpstudio.core.plan import load_plan


def register(sub: Any) -> None:
    """Add ``render`` and ``export-unit`` to the main parser's subparsers."""
    p_render = sub.add_parser("render", help="write the unit, env file, script and session files")
    _add_export_options(p_render)
    p_render.add_argument("--out", type=Path, required=True, help="folder to write into")
    p_render.set_defaults(func=cmd_render)

    p_unit = sub.add_parser("export-unit", help="write just the systemd unit")
    _add_export_options(p_unit)
    p_unit.add_argument("-o", "--output", type=Path, required=True, help="the unit file to write")
    p_unit.set_defaults(func=cmd_export_unit)


def _export_files(args: argparse.Namespace) -> Any:
    """Render the plan's files the way the GUI's Export does (service_files.export_files)."""
    from mtpstudio.core.desktop.session_apply import desktop_facts
    from mtpstudio.core.detect.report import detect_for
    from mtpstudio.core.model.source import load_model_info
    from mtpstudio.core.planning import PlanningContext, machine_for
    from mtpstudio.core.service.render import UnitScope
    from mtpstudio.core.service.service_files import export_files

    plan = load_plan(args.plan)
    machine = machine_for(detect_for(plan))
    pctx = PlanningContext(machine, load_model_info(plan.model))
    session = desktop_facts(None).settings(machine.igpu_card)
    return export_files(plan, pctx, UnitScope(args.scope), args.user, session=session)


def cmd_render(args: argparse.Namespace) -> int:
    from mtpstudio.core.service.export import write_files

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
    from mtpstudio.core.service.service_files import write_unit_file

    out = _export_files(args)
    unit = write_unit_file(out, args.output)
    for line in out.messages:
        print(line)
    print(f"Wrote {args.output} — install it as {unit.install_path}")
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
