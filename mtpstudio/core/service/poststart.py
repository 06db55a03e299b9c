"""After the load: the engine's buffers in this start's journal against the plan.

A unit with mtpstudio's check runs ``mtpstudio poststart`` as its ``ExecStartPost=``. It waits
(in the background, so the start does not wait for the load) until the engine answers
``/health`` or its main process ends, reads this start's journal (``_SYSTEMD_INVOCATION_ID``),
parses the load log as a launch from the window does (``server.load_log``) and writes one line
per device: the MiB of buffers the engine logged against what the plan said. An allocation that
failed, a load that never finished, a journal the account cannot read: one line each, saying
so. ``mtpstudio status`` and the Launch page read these lines back (``load_mark``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from mtpstudio.core.memory.measured import HOST, MEASURED_WITHIN_FRACTION
from mtpstudio.core.runner import Runner
from mtpstudio.core.server.health import (
    HealthAnswer,
    HealthState,
    Watched,
    probe_health,
    wait_healthy,
)
from mtpstudio.core.server.load_log import LoadReport, parse_load_log
from mtpstudio.core.server.reconcile import actual_segments
from mtpstudio.helper.prestart_shape import PrestartShape

LOAD_WAIT_S = 1800.0
"""At most this long waiting for the engine to load (a large model from a slow disk)."""
POLL_S = 2.0
JOURNAL_TIMEOUT_S = 60.0
AS_PLANNED_MIB = 256
"""A device's buffers within this many MiB (or the measured share) of the plan: as planned."""
LOAD_MARK = "load:"
"""The word after the unit's name that marks the lines written here."""


def load_mark(unit: str) -> str:
    """How each line written here begins (``unit``: ``NAME.service``)."""
    return f"mtpstudio: {unit}: {LOAD_MARK}"


@dataclass(frozen=True)
class LoadWait:
    """How the wait for the engine ended: healthy, or why not."""

    healthy: bool
    why: str = ""


class MainProcess:
    """The unit's engine by its PID (systemd's ``$MAINPID``), as ``wait_healthy`` watches it."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        if self.pid is None:
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 1
        except PermissionError:
            return None  # alive, another account's
        return None


def wait_for_load(
    shape: PrestartShape,
    main: Watched,
    *,
    limit_s: float = LOAD_WAIT_S,
    probe: Callable[[str, int], HealthAnswer] = probe_health,
) -> LoadWait:
    """Wait until the engine answers ``/health``, its process ends, or ``limit_s`` passes."""
    port = shape.port or 0
    result = wait_healthy(
        main, shape.host, port, limit_s, probe=probe, sleep=lambda _: time.sleep(POLL_S)
    )
    if result.state is HealthState.HEALTHY:
        return LoadWait(True)
    if result.state is HealthState.EXITED:
        return LoadWait(False, "the engine stopped before it answered /health")
    return LoadWait(False, f"the engine did not answer /health within {limit_s:.0f} s")


def journal_argv(invocation: str) -> list[str]:
    """This start's journal lines, as the engine printed them. No ``--user``: a unit's lines
    are in the journal files of the account it runs as (journald splits them by user), which
    that account reads, whichever manager started it."""
    return ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "--no-pager", "-o", "cat"]


def read_start_log(invocation: str, runner: Runner) -> tuple[str, str | None]:
    """The journal text of this start, and why it could not be read (None: read)."""
    result = runner(journal_argv(invocation), JOURNAL_TIMEOUT_S)
    if not result.ok:
        return "", f"journalctl could not read it ({result.reason()})"
    return result.stdout, None


def loaded_mib(report: LoadReport) -> dict[str, float]:
    """The MiB of buffers the engine logged per device."""
    out: dict[str, float] = {}
    for (_, device), mib in actual_segments(report).items():
        out[device] = out.get(device, 0.0) + mib
    return out


def compare_load(shape: PrestartShape, report: LoadReport, wait: LoadWait) -> list[str]:
    """One line per device of the plan (and one per failure): the load against the plan."""
    who = load_mark(shape.unit)
    lines: list[str] = []
    for failure in report.allocation_failures[:3]:
        lines.append(f"{who} the engine could not allocate memory: {failure.line.strip()[:200]}")
    if not wait.healthy:
        lines.append(f"{who} {wait.why}; the buffers below are what it logged until then.")
    logged = loaded_mib(report)
    if not logged:
        lines.append(
            f"{who} this start's journal shows no buffer sizes, so the load is not compared "
            "(the engine logs them at -lv 4, which the unit passes; an engine that printed "
            "nothing, or a journal this account only partly reads?)."
        )
        return lines
    for device, planned in shape.loads:
        got = logged.get(device, 0.0)
        lines.append(f"{who} {_device_line(device, planned, got)}")
    for device in sorted(set(logged) - {d for d, _ in shape.loads}):
        lines.append(
            f"{who} {device} holds {logged[device]:,.0f} MiB of the engine's buffers, where "
            "the plan put none."
        )
    return lines


def _device_line(device: str, planned: int, got: float) -> str:
    delta = got - planned
    share = f" ({delta / planned:+.1%})" if planned else ""
    head = (
        f"{device} holds {got:,.0f} MiB of the engine's buffers; the plan said {planned:,} MiB"
        f"{share}"
    )
    if got < 1 and planned >= 1 and device != HOST:
        return (
            f"{head}: nothing was placed there (an engine build without this GPU's backend, "
            "or the GPU was not visible to the service?)."
        )
    if abs(delta) <= max(AS_PLANNED_MIB, MEASURED_WITHIN_FRACTION * planned):
        return f"{head}: as planned."
    if delta > 0:
        return (
            f"{head}: {delta:,.0f} MiB more than planned; the margin takes it until it is spent "
            "(plan again with this build: mtpstudio plan, then export the unit)."
        )
    return f"{head}: {-delta:,.0f} MiB less than planned."


def poststart_lines(
    shape: PrestartShape,
    wait: LoadWait,
    journal: tuple[str, str | None],
) -> list[str]:
    """The lines after the load from the wait's outcome and this start's journal."""
    text, unreadable = journal
    if unreadable is not None:
        return [
            f"{load_mark(shape.unit)} the load is not compared: this start's "
            f"journal cannot be read ({unreadable})."
        ]
    return compare_load(shape, parse_load_log(text), wait)


def load_lines(journal_text: str, unit: str) -> list[str]:
    """The comparison's lines in a journal's text (what ``status`` and the Launch page show)."""
    mark = load_mark(unit)
    return [line.strip() for line in journal_text.splitlines() if line.strip().startswith(mark)]
