"""The check before a unit's engine starts (``mtpstudio prestart``), for the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mtpstudio.core.detect.nvidia import detect_nvidia
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.core.service.prestart import CheckOutcome, run_prestart
from mtpstudio.core.usecases.words import MtpStudioError
from mtpstudio.helper.prestart_shape import PrestartShape, prestart_from_argv
from mtpstudio.helper.safefs import Refused

__all__ = ["CheckOutcome", "PrestartShape", "check_before_start", "shape_from_words"]


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
