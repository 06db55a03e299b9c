"""Render every file of a Plan (unit, env file, script, session files, README) and write them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.atomic import write_bytes_atomic, write_text_atomic
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.plan import Plan
from mtpstudio.core.service.render import (
    RenderedFile,
    SessionSettings,
    UnitScope,
    render_reclaim_files,
    render_service_files,
    template_environment,
)
from mtpstudio.core.service.rpc_unit import render_rpc_server_unit

README_NAME = "README.md"


@dataclass(frozen=True)
class ExportResult:
    """What was written where, and what was kept aside."""

    written: tuple[Path, ...]
    backups: tuple[Path, ...]


def render_all(
    plan: Plan,
    spec: LaunchSpec,
    *,
    scope: UnitScope,
    user: str | None,
    session: SessionSettings | None = None,
) -> dict[str, RenderedFile]:
    """Every file the plan needs, plus a README saying what each is and how to install it."""
    files = render_service_files(plan, spec, scope=scope, user=user)
    files |= render_reclaim_files(plan.desktop, session)
    rpc_files = {
        f"rpc-server-{i}": render_rpc_server_unit(server) for i, server in enumerate(plan.split.rpc)
    }
    files |= rpc_files
    service = [files["unit"], files["env"], files["script"]]
    session_files = [
        f for key, f in files.items() if key not in {"unit", "env", "script"} | set(rpc_files)
    ]
    warnings = list(spec.warnings) + [w for f in files.values() for w in f.warnings]
    mtp = f"on, draft max {plan.mtp.draft_max}" if plan.mtp.enabled else "off"
    text = (
        template_environment()
        .get_template("export/README.md.j2")
        .render(
            model_label=plan.model.label,
            engine=plan.engine.flavour.value,
            ctx=plan.runtime.ctx,
            mtp=mtp,
            count=len(files) + 1,
            files=list(files.values()),
            unit=service[0],
            env=service[1],
            script=service[2],
            scope=scope.value,
            session_files=session_files,
            desktop=plan.desktop.value,
            rpc_files=list(rpc_files.values()),
            rpc_servers=list(plan.split.rpc),
            warnings=list(dict.fromkeys(warnings)),
        )
    )
    files["readme"] = RenderedFile(
        name=README_NAME,
        text=text,
        mode=0o644,
        install_path=Path(README_NAME),
        explanation="What each file is and how to install it.",
    )
    return files


def write_files(files: dict[str, RenderedFile], out_dir: Path) -> ExportResult:
    """Write ``files`` into ``out_dir`` atomically; a different existing file is kept as .bak."""
    written: list[Path] = []
    backups: list[Path] = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for f in files.values():
        target = out_dir / f.name
        if target.is_file():
            old = target.read_bytes()
            if old != f.text.encode("utf-8"):
                backup = target.with_name(f"{target.name}.bak-{stamp}")
                write_bytes_atomic(backup, old)
                backups.append(backup)
        write_text_atomic(target, f.text, f.mode)
        written.append(target)
    return ExportResult(tuple(written), tuple(backups))
