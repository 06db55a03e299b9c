"""The check before a unit's engine starts (``mtpstudio prestart``), for the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mtpstudio.core.detect.nvidia import detect_nvidia
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.service.prestart import CheckOutcome, check_engine, run_prestart
from mtpstudio.core.usecases.words import MtpStudioError
from mtpstudio.helper.prestart_shape import PrestartShape, prestart_from_argv
from mtpstudio.helper.safefs import Refused

__all__ = [
    "CheckOutcome",
    "PrestartShape",
    "check_before_start",
    "installed_unit_check",
    "shape_from_words",
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


def check_before_start(shape: PrestartShape, engine: Path) -> CheckOutcome:
    """Read the GPUs now (NVML), ask a changed engine about its flags: the journal's lines."""
    return run_prestart(shape, engine, detect_nvidia(None), SubprocessRunner())


def installed_unit_check(unit_file: Path) -> list[str]:
    """What ``mtpstudio status`` says of an installed unit with mtpstudio's check: whether its
    engine is still the build the unit was made for (a changed one asked about its flags);
    empty for a file that is not such a unit or cannot be read."""
    from mtpstudio.core.quoting.systemd import parse_unit_file, split_systemd_command_line

    try:
        values = {(s, k): v for s, k, v in parse_unit_file(unit_file.read_text("utf-8"))}
        pre = split_systemd_command_line(values[("Service", "ExecStartPre")])
        engine = split_systemd_command_line(values[("Service", "ExecStart")])[0]
        shape = prestart_from_argv(pre, unit_file.name, engine)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError, Refused):
        return []
    outcome = check_engine(shape, Path(engine), SubprocessRunner())
    if outcome.lines:
        return list(outcome.lines)
    if shape.engine_size is None:
        return [f"{unit_file.name}: its engine {engine} was not probed when the unit was made"]
    return [f"{unit_file.name}: its engine {engine} is the build the unit was made for"]
