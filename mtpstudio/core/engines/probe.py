"""Which flags a llama-server build accepts: candidate table and `<flag> <value> --version` probe.

Both engines parse argv in order and exit 0 on reaching ``--version``; an unknown flag (or a
bad value) placed before it makes them exit non-zero (engines.md §1). Every spelling the Plan
may emit is probed, aliases separately, so an adapter can ask ``build.accepts("-ctk")`` for the
exact spelling it is about to write.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from mtpstudio.core.engines.flags import CANDIDATE_FLAGS, SPEC_TYPES, FlagSpec
from mtpstudio.core.runner import Runner

PROBE_TIMEOUT_S = 5.0

__all__ = [
    "CANDIDATE_FLAGS",
    "PROBE_TIMEOUT_S",
    "SPEC_TYPES",
    "FlagProbe",
    "FlagSpec",
    "ProbeOutcome",
    "probe_argv",
    "probe_flag",
    "probe_flags",
    "spec_type_specs",
    "table_fingerprint",
]


class ProbeOutcome(StrEnum):
    """How a probe ended."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TIMEOUT = "timeout"
    FAILED = "failed"  # could not run at all


@dataclass(frozen=True)
class FlagProbe:
    """The answer for one flag (or one ``--spec-type`` value)."""

    flag: str
    outcome: ProbeOutcome
    args: tuple[str, ...] = ()
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.outcome is ProbeOutcome.ACCEPTED


def probe_argv(binary: Path, flag: str, values: Sequence[str]) -> list[str]:
    """``[binary, flag, *values, "--version"]``."""
    return [str(binary), flag, *values, "--version"]


def probe_flag(binary: Path, spec: FlagSpec, runner: Runner, timeout: float) -> FlagProbe:
    """Try each form of ``spec``; accepted on the first exit status 0."""
    last = FlagProbe(spec.flag, ProbeOutcome.REJECTED)
    for values in spec.forms:
        result = runner(probe_argv(binary, spec.flag, values), timeout)
        if result.ok:
            return FlagProbe(spec.flag, ProbeOutcome.ACCEPTED, tuple(values))
        if result.timed_out:
            outcome = ProbeOutcome.TIMEOUT
        elif result.error is not None:
            outcome = ProbeOutcome.FAILED
        else:
            outcome = ProbeOutcome.REJECTED
        last = FlagProbe(spec.flag, outcome, tuple(values), result.reason(timeout))
        if outcome is not ProbeOutcome.REJECTED:
            break  # a hang or a missing binary will not improve with another form
    return last


def spec_type_specs(types: Iterable[str] = SPEC_TYPES) -> list[FlagSpec]:
    """``--spec-type <value>`` probes, one per candidate value (value syntaxes such as
    ``mtp:n_max=1,p_min=0.0`` included: a build is described by what it answered)."""
    return [FlagSpec("--spec-type", ((t,),), f"speculative type {t}") for t in types]


def default_workers() -> int:
    return max(2, min(8, (os.cpu_count() or 2) * 2))


def probe_flags(
    binary: Path,
    specs: Sequence[FlagSpec],
    runner: Runner,
    timeout: float = PROBE_TIMEOUT_S,
    workers: int | None = None,
) -> list[FlagProbe]:
    """Probe every spec in parallel; results in the order of ``specs``.

    Threading: ``runner`` is called from up to ``workers`` threads at once.
    """
    if not specs:
        return []
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda s: probe_flag(binary, s, runner, timeout), specs))


def table_fingerprint(spec_types: Sequence[str] = SPEC_TYPES) -> str:
    """Changes whenever the candidate table changes, so cached probe results are redone."""
    text = repr((CANDIDATE_FLAGS, tuple(spec_types))).encode()
    return hashlib.sha256(text).hexdigest()[:16]
