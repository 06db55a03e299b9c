"""The service's files for a resolved Plan: what ``apply unit`` installs and ``export-unit`` writes.

One function per use, shared by the CLI and the Service page, so the GUI writes the same
bytes as the CLI (``mtpstudio export-unit``) and installs the same unit (``apply unit``). Each
takes the plan as ``planning.resolve`` decided it (target, build, MTP) and decides nothing again.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, replace
from pathlib import Path

from mtpstudio.core import paths
from mtpstudio.core.desktop.session_files import SessionSettings
from mtpstudio.core.distro import read_os_release
from mtpstudio.core.engines.apikey import default_key_path, ensure_api_key
from mtpstudio.core.engines.build_hint import build_hint
from mtpstudio.core.errors import RenderError
from mtpstudio.core.model.file_state import require_whole_model
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import LaunchSpec, ResolvedPlan, budget_for, launch_spec_for
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.boot_placement import (
    BootPlacement,
    boot_placement,
    boot_placement_gap,
)
from mtpstudio.core.service.export import render_all
from mtpstudio.core.service.prestart import checked_devices, prestart_for, with_fit_instead
from mtpstudio.core.service.render import ServiceLayout, UnitScope, render_service_files
from mtpstudio.helper.prestart_shape import PrestartShape


class EngineNotHereError(RenderError):
    """The unit would start an engine binary that is not on this computer."""


class RootAccountError(RenderError):
    """A system unit would run the engine as root."""


def require_runnable(spec: LaunchSpec, scope: UnitScope, user: str | None, *, cuda: bool) -> None:
    """A unit is written only when it can start: its ``ExecStart`` is an engine build on this
    computer and a system unit does not run as root (the helper refuses that, and the engine
    needs no privileges).

    Raises:
        EngineNotHereError, RootAccountError: one sentence each, with what to do (the command
            line's words; the Service page says its own).
    """
    binary = spec.binary
    if spec.assumed_documented or not binary.is_file() or not os.access(binary, os.X_OK):
        why = (
            "no llama-server build was found, so it names the documented default"
            if spec.assumed_documented
            else "there is no program there"
        )
        raise EngineNotHereError(
            f"the unit would start {binary}, and {why}",
            hint="Pick the engine: `mtpstudio plan --engine PATH --save PLAN` with the path of "
            f"your llama-server. {build_hint(read_os_release(), cuda=cuda)}",
        )
    if scope is UnitScope.SYSTEM and user == "root":
        raise RootAccountError(
            "a system unit that runs the engine as root is refused (the engine needs no "
            "privileges, and mtpstudio's helper would not install it)",
            hint="Name the account it runs as with --user NAME (apply unit: --account NAME): "
            "your own, or a dedicated one such as 'llama'.",
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


def require_model_files(resolved: ResolvedPlan) -> None:
    """A unit is written only for model files on this computer that the engine can load: not
    for a demo card, nor a missing, header-only or unfinished file (model and draft model).

    Raises:
        RenderError: one sentence saying why and what to do instead.
    """
    plan, pctx = resolved.plan, resolved.pctx
    if plan.model.path is None:
        raise RenderError(
            f"the plan uses the demo card {plan.model.card}, not a model file on this computer, "
            "so a unit for it would start nothing",
            hint="Open the GGUF file first (Model page → Open GGUF…, or `mtpstudio plan "
            "--model FILE --save plan.json`), then export or install.",
        )
    _require_file(Path(plan.model.path), pctx.model, "model")
    if plan.draft.path is not None and pctx.draft_model is not None:
        _require_file(Path(plan.draft.path), pctx.draft_model, "draft model")


def _require_file(path: Path, info: ModelInfo, role: str) -> None:
    try:
        size = path.stat().st_size
    except OSError:
        raise RenderError(
            f"the {role} file {path} is not there, so the unit could not start it",
            hint="Check the path on the Model page (a moved or renamed download?).",
        ) from None
    if len(info.paths) <= 1:  # the size now: a download may have gone on since it was read
        info = replace(info, file_size=size)
    require_whole_model(info, path, role)


PRIVATE_TMP_DIRS = (Path("/tmp"), Path("/var/tmp"))


def hidden_by_private_tmp(plan: Plan, unit_text: str) -> list[str]:
    """Warnings for model files under /tmp or /var/tmp when the unit has ``PrivateTmp=yes``
    (the service gets its own empty /tmp and /var/tmp, so it would not find them)."""
    if "\nPrivateTmp=yes" not in unit_text:
        return []
    out = []
    for role, path in (("model", plan.model.path), ("draft model", plan.draft.path)):
        if path is None:
            continue
        where = next((d for d in PRIVATE_TMP_DIRS if Path(path).is_relative_to(d)), None)
        if where is not None:
            out.append(
                f"the {role} {path} is under {where}, which this system unit cannot see "
                f"(PrivateTmp=yes gives it its own empty {where}): move the file, e.g. into "
                "your home folder, before installing the unit"
            )
    return out


@dataclass(frozen=True)
class UnitPlan:
    """What a unit runs: the plan (its placement written out for a system unit that would
    leave it to the engine's fit at boot), its command, the check before it starts, and what
    to tell the user about the placement."""

    resolved: ResolvedPlan
    spec: LaunchSpec
    warnings: list[str]
    """What the command's own building said (``launch_spec_for``'s notes)."""
    prestart: PrestartShape | None
    boot: BootPlacement | None

    @property
    def placement_words(self) -> list[str]:
        """Why the placement is written out, and the two moments (empty: it is not)."""
        return [] if self.boot is None else self.boot.words()

    @property
    def notes(self) -> list[str]:
        """Everything to tell the user: the placement's words first, then the warnings."""
        return self.placement_words + self.warnings


def unit_plan(
    resolved: ResolvedPlan, scope: UnitScope, api_key_file: Path | None = None
) -> UnitPlan:
    """The unit's plan and command for ``scope`` (``boot_placement``: a system unit starts
    before the desktop, so the engine's fit is written out as the plan's placement)."""
    boot = boot_placement(resolved) if scope is UnitScope.SYSTEM else None
    runs = boot.resolved if boot is not None else resolved
    budget = boot.budget if boot is not None else budget_for(runs)
    checked = bool(checked_devices(runs, budget))  # its load is compared: the buffers logged
    spec, warnings = launch_spec_for(runs, api_key_file=api_key_file, for_mtpstudio_launch=checked)
    if boot is not None:
        spec = with_placement_reason(spec, boot.reason)
    gap = boot_placement_gap(resolved, boot) if scope is UnitScope.SYSTEM else None
    if gap is not None:
        warnings = [gap, *warnings]
    name = f"{runs.effective.outputs.service_name}.service"
    prestart = prestart_for(runs, budget, name, [n.flag for n in spec.flags])
    if prestart is not None:
        prestart = with_fit_instead(
            prestart, spec, resolved, runs, before_desktop=scope is UnitScope.SYSTEM
        )
    return UnitPlan(runs, spec, warnings, prestart, boot)


def with_placement_reason(spec: LaunchSpec, reason: str) -> LaunchSpec:
    """``spec`` whose placement flags (the fit off, the experts in RAM) say why they are
    written out."""
    placement = {"runtime.moe", "runtime.n_cpu_moe"}
    flags = tuple(
        replace(n, explanation=f"{n.explanation} {reason}") if n.setting in placement else n
        for n in spec.flags
    )
    return replace(spec, flags=flags)


def install_files(
    resolved: ResolvedPlan, scope: UnitScope, account: str | None = None
) -> ServiceFiles:
    """Unit, env file and script as ``mtpstudio apply unit`` installs them (the same command
    and key file as ``export-unit``); refused unless the model files can be loaded."""
    check_exportable(resolved, scope, account)
    key_file, messages = export_key_file(resolved.plan, create=True)
    made = unit_plan(resolved, scope, key_file)
    plan = made.resolved.effective
    layout = ServiceLayout.for_plan(
        plan, scope, config_dir=paths.config_home(), data_dir=paths.data_home()
    )
    files = render_service_files(
        plan,
        made.spec,
        scope=scope,
        user=account_for(scope, account),
        layout=layout,
        prestart=made.prestart,
    )
    notes = made.notes + hidden_by_private_tmp(plan, files["unit"].text)
    return ServiceFiles(files, made.spec, tuple(messages + notes))


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
    resolved: ResolvedPlan,
    scope: UnitScope,
    account: str | None = None,
    *,
    session: SessionSettings,
    preview: bool = False,
) -> ServiceFiles:
    """Every file ``mtpstudio render`` / ``export-unit`` writes (``files["unit"]`` is the unit);
    refused unless the model files can be loaded.

    ``session`` says what the desktop's session files run (the installed Plasma's own commands:
    ``core.desktop.session_apply.desktop_facts(...).settings(...)``, read once by the caller).
    ``preview=True`` renders the files to read them: no new API key is written (same text: the
    key file's path does not depend on whether it exists yet) and the model file is not checked.
    """
    if not preview:
        check_exportable(resolved, scope, account)
    key_file, messages = export_key_file(resolved.plan, create=not preview)
    made = unit_plan(resolved, scope, key_file)
    plan = made.resolved.effective  # the files say what the engine runs: MTP auto decided
    files = render_all(
        plan,
        made.spec,
        scope=scope,
        user=account or account_for(scope, None),
        session=session,
        prestart=made.prestart,
    )
    notes = made.warnings + hidden_by_private_tmp(plan, files["unit"].text)
    return ServiceFiles(
        dict(files),
        made.spec,
        tuple(messages + made.placement_words + [f"warning: {n}" for n in notes]),
    )


def _cuda(resolved: ResolvedPlan) -> bool:
    return resolved.target.device.is_cuda


def check_exportable(resolved: ResolvedPlan, scope: UnitScope, account: str | None = None) -> None:
    """What export and install refuse, checked before anything is asked or written: the model
    files (loadable, on this computer), the engine binary, the account.

    Raises:
        RenderError: one sentence saying why, with what to do.
    """
    require_model_files(resolved)
    key_file = export_key_file(resolved.plan, create=False)[0]
    spec, _ = launch_spec_for(resolved, api_key_file=key_file)
    require_runnable(spec, scope, account_for(scope, account), cuda=_cuda(resolved))
