"""Plan + LaunchSpec -> the text of the unit, environment file and launch script (the desktop's
session files: ``core.desktop.session_files``).

Pure: nothing here writes files or runs commands (``core.service.export.write_files`` does that).
Templates are Jinja2 files shipped as package data (``mtpstudio.templates``), rendered in the
helper's sandboxed environment (``helper.templating``: ``StrictUndefined``, autoescape off, the
quoting filters of ``core.quoting``); the unit and its environment file are the helper's own
renders (``helper.unit_shape``), and every rendered ``ExecStart=`` is split back with systemd's
rules and compared with the LaunchSpec's argv before it is returned.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from mtpstudio.core import paths
from mtpstudio.core.engines.spec import LaunchSpec
from mtpstudio.core.errors import RenderError
from mtpstudio.core.plan.choices import LoadMode
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.quoting.shell import shell_join
from mtpstudio.core.quoting.systemd import (
    parse_unit_file,
    split_systemd_command_line,
)
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.prestart import placement_words, without_placement
from mtpstudio.helper import unit_shape
from mtpstudio.helper.prestart_shape import PrestartShape
from mtpstudio.helper.templating import render_template
from mtpstudio.helper.unit_shape import UnitShape

__all__ = [
    "ServiceLayout",
    "UnitScope",
    "render_service_files",
]

_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")


class UnitScope(StrEnum):
    """A system unit (runs at boot as ``User=``) or a user unit (the user's own manager)."""

    SYSTEM = "system"
    USER = "user"


@dataclass(frozen=True)
class ServiceLayout:
    """Where the unit, the environment file and the launch script go."""

    scope: UnitScope
    unit_path: Path
    env_path: Path
    script_path: Path

    @classmethod
    def for_plan(
        cls,
        plan: Plan,
        scope: UnitScope = UnitScope.SYSTEM,
        *,
        config_dir: Path | None = None,
        data_dir: Path | None = None,
    ) -> ServiceLayout:
        """The standard places: ``/etc/systemd/system`` + ``/etc/mtpstudio`` for a system
        unit, ``$XDG_CONFIG_HOME/systemd/user`` + ``$XDG_CONFIG_HOME/mtpstudio`` for a user
        unit; the script in ``plan.outputs.export_dir`` or ``$XDG_DATA_HOME/mtpstudio``.
        """
        out = plan.outputs
        config = config_dir or paths.config_home()
        export = out.export_dir or (data_dir or paths.data_home()) / "mtpstudio"
        unit_name = f"{out.service_name}.service"
        if scope is UnitScope.SYSTEM:
            unit = Path("/etc/systemd/system") / unit_name
            env = Path("/etc/mtpstudio") / out.env_file
        else:
            unit = config / "systemd" / "user" / unit_name
            env = config / "mtpstudio" / out.env_file
        return cls(scope, unit, env, export / out.launch_script)


# --------------------------------------------------------------------------------------------
# service files


def _notes_context(spec: LaunchSpec) -> list[dict[str, str]]:
    return [{"flag": n.flag, "explanation": n.explanation} for n in spec.flags]


def _check_exec_start(text: str, spec: LaunchSpec, name: str, *, swaps: bool = False) -> None:
    """Split the rendered ExecStart back (systemd's rules) and compare with ``spec``'s argv
    (with ``swaps``: ``spec`` is the command without its placement, which must be followed by
    ``$MTPSTUDIO_PLACEMENT``)."""
    values = [v for s, k, v in parse_unit_file(text) if (s, k) == ("Service", "ExecStart")]
    try:
        command, ref = unit_shape.without_placement_ref(values[0]) if len(values) == 1 else ("", [])
        argv = split_systemd_command_line(command) if bool(ref) == swaps else None
    except ValueError:
        argv = None
    if argv != list(spec.argv):
        raise RenderError(f"the ExecStart= written into {name} does not reproduce the command")


def _drop_patterns(prefixes: Sequence[str]) -> list[str]:
    return [p + "*" if p.endswith("_") else p for p in prefixes]


def _script_lines(spec: LaunchSpec) -> list[str]:
    """The script's argument lines, one flag with its values each."""
    lines = []
    start = 1
    for note in spec.flags:
        lines.append(shell_join(spec.argv[start : start + len(note.words)]))
        start += len(note.words)
    return lines


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def render_service_files(
    plan: Plan,
    spec: LaunchSpec,
    *,
    scope: UnitScope = UnitScope.SYSTEM,
    user: str | None = None,
    layout: ServiceLayout | None = None,
    prestart: PrestartShape | None = None,
) -> dict[str, RenderedFile]:
    """The systemd unit, its environment file and the launch script for ``spec``.

    Args:
        plan: the plan the spec was built from (names, load mode, model label).
        spec: the command, from ``engines.build_launch_spec``.
        scope: system unit (``User=``, hardening, boot start) or user unit.
        user: the account a system unit runs as (required for ``UnitScope.SYSTEM``).
        layout: where the files go; default ``ServiceLayout.for_plan(plan, scope)``.
        prestart: the check before the engine starts (``ExecStartPre=`` and the script's
            first command; None: none).

    Returns:
        ``{"unit": …, "env": …, "script": …}``.

    Raises:
        RenderError: a value cannot be written safely (e.g. a newline in a path), or a
            system unit without a user.
    """
    layout = layout or ServiceLayout.for_plan(plan, scope)
    if layout.scope is not scope:
        raise RenderError(f"the file layout is for a {layout.scope} unit, not a {scope} unit")
    if scope is UnitScope.SYSTEM:
        if user is None:
            raise RenderError(
                "a system unit needs the account it runs as",
                hint="Pass the desktop user (or a dedicated 'llama' account).",
            )
        if not _USER_NAME.match(user):
            raise RenderError(f"{user!r} is not a valid user name for User=")
    if not layout.env_path.is_absolute():
        raise RenderError(f"the environment file path {layout.env_path} must be absolute")
    out = plan.outputs
    unit_name = f"{out.service_name}.service"
    mlock = plan.runtime.load_mode is LoadMode.MLOCK
    model_name = spec.note_for("-m") or spec.note_for("--model")
    model_file = Path(model_name.values[0]).name if model_name and model_name.values else "model"
    unit_warnings: list[str] = []
    remote = [r.endpoint for r in plan.split.rpc if not _is_loopback_host(r.host)]
    if remote and plan.server.is_loopback and scope is UnitScope.SYSTEM:
        unit_warnings.append(
            "The unit does not restrict the addresses it may reach (IPAddressDeny=): it must "
            f"reach the rpc-server{'s' * (len(remote) > 1)} at {', '.join(remote)}; the server "
            "still listens on loopback only."
        )
    if mlock and scope is UnitScope.USER:
        unit_warnings.append(
            "Locking the weights in RAM from a user unit is capped by the user manager's "
            "memory-lock limit (8 MiB by default); use a system unit, or raise LimitMEMLOCK "
            "for user@.service."
        )
    swaps = prestart is not None and prestart.swaps_placement
    runs = without_placement(spec) if swaps else spec  # the placement: $MTPSTUDIO_PLACEMENT
    if swaps and prestart is not None and placement_words(spec) != prestart.placement:
        raise RenderError("the check's placement is not the command's own placement flags")
    context = {  # the launch script's (the unit and its env file: helper.unit_shape)
        "notes": _notes_context(spec),
        "warnings": [*spec.warnings, *unit_warnings],
        "env": sorted(spec.env.items()),
        "model_file": model_file,
        "script_name": out.launch_script,
        "argv0": spec.argv[0],
        "arg_lines": _script_lines(spec),
        "drop_patterns": _drop_patterns(spec.drop_env_prefixes),
        "prestart": None if prestart is None else list(prestart.argv(spec.argv[0], script=swaps)),
        "placement": list(prestart.placement) if prestart is not None and swaps else [],
    }
    if swaps:
        context["arg_lines"] = _script_lines(runs)
    shape = UnitShape(
        system=scope is UnitScope.SYSTEM,
        unit_name=unit_name,
        env_path=str(layout.env_path),
        user=user,
        model_file=model_file,
        argv=tuple(runs.argv),
        arg_groups=tuple(runs.arg_groups),
        notes=tuple((n.flag, n.explanation) for n in spec.flags),
        warnings=(*spec.warnings, *unit_warnings),
        mlock=mlock,
        loopback=plan.server.is_loopback and not remote,
        env=tuple(sorted(spec.env.items())),
        prestart=prestart,
    )
    unit_text = unit_shape.render_unit(shape)
    _check_exec_start(unit_text, runs, unit_name, swaps=swaps)
    env_text = unit_shape.render_env(unit_name, shape.env)
    system = scope is UnitScope.SYSTEM
    return {
        "unit": RenderedFile(
            name=unit_name,
            text=unit_text,
            mode=0o644,
            install_path=layout.unit_path,
            explanation=(
                f"systemd {'system' if system else 'user'} unit that runs llama-server"
                + (f" as {user} at boot" if system else " in your session")
                + "; restarts it after a crash."
            ),
            privileged=system,
            warnings=tuple(unit_warnings),
            params=shape.params() if system else None,
        ),
        "env": RenderedFile(
            name=out.env_file,
            text=env_text,
            mode=0o644,
            install_path=layout.env_path,
            explanation="Environment of the unit (EnvironmentFile=); add your own variables here.",
            privileged=system,
        ),
        "script": RenderedFile(
            name=out.launch_script,
            text=render_template("launch.sh.j2", **context),
            mode=0o755,
            install_path=layout.script_path,
            explanation="The same command as a bash script, for running by hand.",
        ),
    }
