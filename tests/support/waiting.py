"""Waits that hold on a busy machine: deadlines scale with its load, waits end on a condition."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

PATIENCE_ENV = "MTPSTUDIO_TEST_PATIENCE"
MAX_PATIENCE = 10.0

T = TypeVar("T")


def patience() -> float:
    """How many times longer than on an idle machine a wait may take now (1 to 10).

    ``MTPSTUDIO_TEST_PATIENCE`` when set; otherwise the 1-minute load average per CPU this
    process may run on (its affinity mask, so ``taskset -c 0`` counts one CPU): eight busy
    processes on two cores give 4.
    """
    explicit = os.environ.get(PATIENCE_ENV)
    if explicit:
        return max(1.0, float(explicit))
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return max(1.0, min(MAX_PATIENCE, load / max(1, cpus)))


def scaled(seconds: float) -> float:
    """``seconds`` on an idle machine, stretched by the current ``patience()``."""
    return seconds * patience()


def wait_for(condition: Callable[[], T], timeout: float, interval: float = 0.05) -> T:
    """Call ``condition`` until it returns something true or ``scaled(timeout)`` has passed.

    Returns its last answer (false when the time ran out), for the caller's assertion.
    """
    deadline = time.monotonic() + scaled(timeout)
    while True:
        answer = condition()
        if answer or time.monotonic() >= deadline:
            return answer
        time.sleep(interval)
