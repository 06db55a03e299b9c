"""An rpc-server endpoint probed for a plan: the one door the GUI and the CLI use.

``probe_endpoint("HOST:PORT")`` reaches the server (``detect.rpc``), checks what it answers and
returns the plan's record of it; anything else raises ``RpcProbeError`` with one sentence, and
the caller leaves the plan as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.detect.rpc import (
    PROBE_TIMEOUT_S,
    RpcProbeError,
    parse_endpoint,
    plan_entry,
    probe_rpc,
)

__all__ = ["ProbedEndpoint", "RpcProbeError", "parse_endpoint", "probe_endpoint"]


@dataclass(frozen=True)
class ProbedEndpoint:
    """What an endpoint answered: the plan's ``split.rpc`` item and one line to show."""

    endpoint: str
    entry: dict[str, object]
    summary: str


def probe_endpoint(text: str, timeout: float = PROBE_TIMEOUT_S) -> ProbedEndpoint:
    """Probe ``HOST:PORT`` (raises ``RpcProbeError``: malformed, unreachable, silent, lying)."""
    host, port = parse_endpoint(text)
    report = probe_rpc(host, port, timeout)
    return ProbedEndpoint(report.endpoint, plan_entry(report), report.summary())
