"""The check before a unit's engine starts (``mtpstudio prestart``), for the CLI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mtpstudio.core.detect.nvidia import detect_nvidia
from mtpstudio.core.errors import ServerError
from mtpstudio.core.runner import Runner, SubprocessRunner
from mtpstudio.core.server.systemd import UnitRef, require_installed
from mtpstudio.core.service.poststart import (
    MainProcess,
    load_lines,
    load_mark,
    poststart_lines,
    read_start_log,
    wait_for_load,
)
from mtpstudio.core.service.prestart import (
    CheckOutcome,
    check_engine,
    placement_file,
    run_prestart,
    write_fit_instead,
)
from mtpstudio.core.usecases.words import MtpStudioError
from mtpstudio.helper.prestart_shape import PrestartShape, prestart_from_argv
from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.unit_shape import without_placement_ref

__all__ = [
    "CheckOutcome",
    "PrestartShape",
    "check_before_start",
    "compare_after_load",
    "installed_unit_check",
    "installed_unit_load",
    "load_mark",
    "service_load_lines",
    "shape_from_words",
    "unit_load_lines",
]


class PrestartError(MtpStudioError):
    """The check's own words do not parse (a unit edited by hand)."""


def shape_from_words(python: str, words: Sequence[str], unit: str, engine: str) -> PrestartShape:
    """The check's values from its command line (as the unit's ``ExecStartPre=`` passes them).

    Raises:
        PrestartError: they are not the words mtpstudio writes.
    """
    try:
        return prestart_from_argv([python, "-m", "mtpstudio", "prestart", *words], unit, engine)
    except Refused as exc:
        raise PrestartError(str(exc)) from None


def check_before_start(
    shape: PrestartShape, engine: Path, environ: Mapping[str, str] | None = None
) -> CheckOutcome:
    """Read the GPUs now (NVML), ask a changed engine about its flags: the journal's lines.

    With ``environ`` (a unit's: ``$RUNTIME_DIRECTORY``) the engine's fit instead of the
    placement is written where the unit's ``EnvironmentFile=`` reads it; without it (the
    launch script) the caller prints the fit's words."""
    outcome = run_prestart(shape, engine, detect_nvidia(None), SubprocessRunner())
    if environ is None:
        return outcome
    failed = write_fit_instead(shape, outcome, environ.get("RUNTIME_DIRECTORY"))
    if failed:
        return CheckOutcome((*outcome.lines, failed), False, outcome.fit_instead)
    return outcome


def installed_unit_check(unit_file: Path) -> list[str]:
    """What ``mtpstudio status`` says of an installed unit with mtpstudio's check: whether its
    engine is still the build the unit was made for (a changed one asked about its flags);
    empty for a file that is not such a unit or cannot be read."""
    from mtpstudio.core.quoting.systemd import parse_unit_file, split_systemd_command_line

    try:
        values = {(s, k): v for s, k, v in parse_unit_file(unit_file.read_text("utf-8"))}
        pre = split_systemd_command_line(values[("Service", "ExecStartPre")])
        command, _ = without_placement_ref(values[("Service", "ExecStart")])
        engine = split_systemd_command_line(command)[0]
        shape = prestart_from_argv(pre, unit_file.name, engine)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError, Refused):
        return []
    outcome = check_engine(shape, Path(engine), SubprocessRunner())
    if outcome.lines:
        return list(outcome.lines)
    if shape.engine_size is None:
        return [f"{unit_file.name}: its engine {engine} was not probed when the unit was made"]
    return [f"{unit_file.name}: its engine {engine} is the build the unit was made for"]


def compare_after_load(
    unit: str,
    host: str,
    port: int,
    loads: Sequence[str],
    environ: Mapping[str, str],
    runner: Runner | None = None,
) -> list[str]:
    """Wait for the unit's engine to load, then its buffers in this start's journal against
    the plan (``loads``: ``DEVICE=MIB`` as the unit's ``ExecStartPost=`` passes them).

    Raises:
        PrestartError: a load figure that is not ``DEVICE=MIB``.
    """
    pairs = []
    for word in loads:
        device, _, mib = word.partition("=")
        if not device or not mib.isdigit():
            raise PrestartError(f"--load {word!r} is not DEVICE=MIB")
        pairs.append((device, int(mib)))
    shape = PrestartShape(python="", unit=unit, needs=(), host=host, port=port,
                          loads=tuple(pairs))  # fmt: skip
    fitted = placement_file(environ.get("RUNTIME_DIRECTORY"))
    fit_line = (
        [
            f"{load_mark(unit)} this start runs the engine's fit instead of the planned "
            "placement (the VRAM was short when it started): the buffers below are the fit's."
        ]
        if fitted is not None and fitted.is_file()
        else []
    )
    main_pid = environ.get("MAINPID", "")
    wait = wait_for_load(shape, MainProcess(int(main_pid) if main_pid.isdigit() else None))
    invocation = environ.get("INVOCATION_ID", "")
    if not invocation:
        journal: tuple[str, str | None] = ("", "not started by systemd: no $INVOCATION_ID")
    else:
        journal = read_start_log(invocation, runner or SubprocessRunner())
    return fit_line + poststart_lines(shape, wait, journal)


def installed_unit_load(unit: UnitRef, runner: Runner | None = None) -> list[str]:
    """What the unit's comparison after its last start wrote to the journal (empty: none, or
    the unit is not running)."""
    from mtpstudio.core.server.systemd import SYSTEMCTL_TIMEOUT_S

    run = runner or SubprocessRunner()
    shown = run(
        ["systemctl", *unit.scope_args, "show", unit.name, "--property=InvocationID", "--value"],
        SYSTEMCTL_TIMEOUT_S,
    )
    invocation = shown.stdout.strip() if shown.ok else ""
    if not invocation:
        return []
    text, unreadable = read_start_log(invocation, run)
    if unreadable is not None:
        return [f"{unit.name}: its last start's journal cannot be read ({unreadable})"]
    return load_lines(text, unit.name)


def service_load_lines(service_name: str, runner: Runner | None = None) -> list[str]:
    """The comparison after the last start of the installed unit ``service_name`` (the plan's
    ``outputs.service_name``), system unit first, then the user unit; empty: neither is
    installed by mtpstudio, running, or compared."""
    for user in (False, True):
        try:
            unit = UnitRef.of(service_name, user)
        except ServerError:
            return []
        try:
            require_installed(unit)
        except ServerError:
            continue
        lines = installed_unit_load(unit, runner)
        if lines:
            return lines
    return []


def unit_load_lines(name: str, *, user: bool) -> list[str]:
    """``installed_unit_load`` of the unit file named ``name`` (system or user manager)."""
    try:
        return installed_unit_load(UnitRef.of(name, user))
    except ServerError:
        return []
