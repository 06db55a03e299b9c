"""The speed estimate's inputs on this computer: its probed rates and its stored benchmarks."""

from __future__ import annotations

import logging

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.speed.host_rates import ASSUMED_HOST, load_host_rates
from mtpstudio.core.speed.inputs import SpeedInputs, runs_from_history

log = logging.getLogger(__name__)


def load_speed_inputs(*, probe: bool = True, history: BenchHistory | None = None) -> SpeedInputs:
    """This computer's rates (probed once, cached; ``probe=False``: only a cached probe) and
    its stored benchmark runs (a history that cannot be read counts as none, said once)."""
    host = load_host_rates(probe=probe) or ASSUMED_HOST
    try:
        runs = runs_from_history((history or BenchHistory()).entries())
    except MtpStudioError as exc:
        log.warning("mtpstudio: %s; speed estimates use no stored benchmark.", exc)
        runs = ()
    return SpeedInputs(host, runs)
