"""Render every file of a Plan (unit, env file, script, session files, README) and write them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.atomic import write_bytes_atomic, write_text_atomic
from mtpstudio.core.desktop.session_files import SessionSettings, render_reclaim_files
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.render import UnitScope, render_service_files
from mtpstudio.core.service.rpc_unit import render_rpc_server_unit
from mtpstudio.helper.prestart_shape import PrestartShape
from mtpstudio.helper.templating import template_environment

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
    prestart: PrestartShape | None = None,
) -> dict[str, RenderedFile]:
    """Every file the plan needs, plus a README saying what each is and how to install it
    (``prestart``: the check before the engine starts)."""
    files = render_service_files(plan, spec, scope=scope, user=user, prestart=prestart)
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


INSTALL_SCRIPT = "install-{name}.sh"


@dataclass(frozen=True)
class ServiceSet:
    """The unit, its environment file and the script that installs both, as written."""

    folder: Path
    files: dict[str, RenderedFile]
    written: tuple[Path, ...]
    backups: tuple[Path, ...]
    commands: tuple[str, ...]  # the exact commands that install and start it

    def message(self) -> str:
        """What was written and what to run, for the CLI and the Service page."""
        lines = [f"Wrote {len(self.written)} files to {self.folder}:"]
        for key, f in self.files.items():
            where = "runs the install steps below" if key == "install" else f"-> {f.install_path}"
            lines.append(f"  {f.name} {where}")
        lines.append("Install and start it:")
        lines += [f"  {c}" for c in self.commands]
        return "\n".join(lines)


def service_set(files: dict[str, RenderedFile], scope: UnitScope) -> dict[str, RenderedFile]:
    """``unit``, ``env`` and ``install`` (a shell script doing the exact install steps)."""
    unit, env = files["unit"], files["env"]
    name = unit.name.removesuffix(".service")
    script_name = INSTALL_SCRIPT.format(name=name)
    system = scope is UnitScope.SYSTEM
    start = f"{'sudo ' if system else ''}systemctl {'' if system else '--user '}start {unit.name}"
    text = (
        template_environment()
        .get_template("export/install.sh.j2")
        .render(
            scope=scope.value,
            unit=unit,
            files=[env, unit],
            script_name=script_name,
            start=start,
            reload="systemctl daemon-reload" if system else "systemctl --user daemon-reload",
        )
    )
    script = RenderedFile(
        name=script_name,
        text=text if text.endswith("\n") else text + "\n",
        mode=0o755,
        install_path=Path(script_name),
        explanation="Installs the unit and its environment file where systemd reads them.",
    )
    return {"unit": unit, "env": env, "install": script}


def install_commands(folder: Path, files: dict[str, RenderedFile], scope: UnitScope) -> list[str]:
    from mtpstudio.core.quoting.shell import shell_quote

    system = scope is UnitScope.SYSTEM
    script = shell_quote(str(folder / files["install"].name))
    unit = files["unit"].name
    if system:
        return [f"sudo sh {script}", f"sudo systemctl start {unit}",
                f"sudo systemctl enable {unit}   # also at every boot"]  # fmt: skip
    return [f"sh {script}", f"systemctl --user start {unit}",
            f"systemctl --user enable {unit}   # also at every login"]  # fmt: skip


def write_service_set(files: dict[str, RenderedFile], scope: UnitScope, folder: Path) -> ServiceSet:
    """Write the unit, its env file and their install script into ``folder``."""
    chosen = service_set(files, scope)
    folder = folder.absolute()
    result = write_files(chosen, folder)
    commands = install_commands(folder, chosen, scope)
    return ServiceSet(folder, chosen, result.written, result.backups, tuple(commands))
