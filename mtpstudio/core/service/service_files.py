"""The service's files for a Plan: what ``apply unit`` installs and what ``export-unit`` writes.

One function per use, shared by the CLI and the Service page, so the GUI writes the same
bytes as the CLI (``mtpstudio export-unit``) and installs the same unit (``apply unit``).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core import paths
from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.engines.apikey import default_key_path, ensure_api_key
from mtpstudio.core.plan import Plan
from mtpstudio.core.planning import LaunchSpec, PlanningContext, launch_spec_for, resolve
from mtpstudio.core.service.export import render_all
from mtpstudio.core.service.render import (
    RenderedFile,
    ServiceLayout,
    SessionSettings,
    UnitScope,
    render_service_files,
)


@dataclass(frozen=True)
class ServiceFiles:
    """The rendered files, the command they run, and notes/messages for the user."""

    files: dict[str, RenderedFile]
    spec: LaunchSpec
    messages: tuple[str, ...]


def account_for(scope: UnitScope, account: str | None) -> str | None:
    """The account a system unit runs as (default: you); a user unit has none."""
    if scope is not UnitScope.SYSTEM:
        return None
    return account or getpass.getuser()


def install_files(
    plan: Plan, pctx: PlanningContext, scope: UnitScope, account: str | None = None
) -> ServiceFiles:
    """Unit, env file and script as ``mtpstudio apply unit`` installs them (the same command
    and key file as ``export-unit``)."""
    key_file, messages = export_key_file(plan, create=True)
    resolved = resolve(plan, pctx)
    plan = resolved.effective
    spec, notes = launch_spec_for(resolved, api_key_file=key_file)
    layout = ServiceLayout.for_plan(
        plan, scope, config_dir=paths.config_home(), data_dir=paths.data_home()
    )
    files = render_service_files(
        plan, spec, scope=scope, user=account_for(scope, account), layout=layout
    )
    return ServiceFiles(files, spec, tuple(messages + notes))


def export_key_file(plan: Plan, *, create: bool) -> tuple[Path | None, list[str]]:
    """The API key file the unit reads: the one the plan names, else the default one when the
    server listens beyond loopback (created when ``create``, so clients and server share one
    key); and what to tell the user."""
    named = plan.server.api_key_file
    key_file = Path(named) if named is not None else None
    if key_file is None and not plan.server.is_loopback:
        key_file = default_key_path()
    if key_file is None or not create:
        return key_file, []
    key = ensure_api_key(key_file)
    if key.created:
        return key.path, [f"New API key (shown once): {key.key} — stored in {key.path}"]
    return key.path, []


def export_files(
    plan: Plan,
    pctx: PlanningContext,
    scope: UnitScope,
    account: str | None = None,
    *,
    session: SessionSettings,
    create_key: bool = True,
) -> ServiceFiles:
    """Every file ``mtpstudio render`` / ``export-unit`` writes (``files["unit"]`` is the unit).

    ``session`` says what the desktop's session files run (the installed Plasma's own commands:
    ``core.desktop.session_apply.desktop_facts(...).settings(...)``, read once by the caller).
    ``create_key=False`` renders a preview without writing a new API key (same text: the key
    file's path does not depend on whether it exists yet).
    """
    key_file, messages = export_key_file(plan, create=create_key)
    resolved = resolve(plan, pctx)
    plan = resolved.effective  # the files say what the engine runs: MTP auto decided
    spec, notes = launch_spec_for(resolved, api_key_file=key_file)
    files = render_all(
        plan,
        spec,
        scope=scope,
        user=account or account_for(scope, None),
        session=session,
    )
    return ServiceFiles(dict(files), spec, tuple(messages + [f"warning: {n}" for n in notes]))


def write_unit_file(out: ServiceFiles, path: Path) -> RenderedFile:
    """Write just the unit (``mtpstudio export-unit -o PATH``), atomically; returns it."""
    unit = out.files["unit"]
    write_text_atomic(path, unit.text, unit.mode)
    return unit
