"""Wait until a starting server answers ``/health`` with 200, while watching the process."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

PROBE_TIMEOUT_S = 0.5
FIRST_DELAY_S = 0.005
MAX_DELAY_S = 0.05
DEFAULT_STARTUP_TIMEOUT_S = 300.0


class HealthState(StrEnum):
    """Where a start ended up."""

    HEALTHY = "healthy"
    EXITED = "exited"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class HealthAnswer:
    """One probe: the HTTP status (None: no answer) and what was said."""

    status: int | None
    detail: str

    @property
    def loading(self) -> bool:
        """Upstream answers 503 'Loading model' while loading; ik answers nothing."""
        return self.status == 503 or self.status is None


@dataclass(frozen=True)
class HealthResult:
    """How waiting ended, after how long, and the last thing the server said."""

    state: HealthState
    seconds: float
    last: HealthAnswer
    probes: int


class Watched(Protocol):
    """The process being waited on (``ServerProcess`` or the GUI's wrapper)."""

    def poll(self) -> int | None: ...


def connect_host(host: str) -> str:
    """Where to reach a server listening on ``host`` from this machine."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def probe_health(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> HealthAnswer:
    """GET /health once. Never raises; a refused or silent socket is ``status=None``."""
    import http.client  # here, not at the top: `mtpstudio --help` reads this module

    conn = http.client.HTTPConnection(connect_host(host), port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        body = response.read(500).decode("utf-8", errors="replace")
        return HealthAnswer(response.status, body.strip())
    except ConnectionRefusedError:
        return HealthAnswer(None, "connection refused")
    except TimeoutError:
        return HealthAnswer(None, "no answer (still loading)")
    except (OSError, http.client.HTTPException) as exc:
        return HealthAnswer(None, f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def wait_healthy(
    process: Watched,
    host: str,
    port: int,
    timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
    *,
    on_tick: Callable[[HealthAnswer], None] | None = None,
    probe: Callable[[str, int], HealthAnswer] = probe_health,
    owns_port: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> HealthResult:
    """Poll until 200, the process exits, or ``timeout`` s pass (bounded loop).

    ``owns_port`` (when given) must confirm that the 200 came from this process, not a
    stranger that took the port; ``on_tick`` sees every answer (the CLI reads the log there).
    """
    start = clock()
    delay = FIRST_DELAY_S
    last = HealthAnswer(None, "not asked yet")
    probes = 0
    while True:
        if process.poll() is not None:
            return HealthResult(HealthState.EXITED, clock() - start, last, probes)
        last = probe(host, port)
        probes += 1
        if on_tick is not None:
            on_tick(last)
        if last.status == 200 and (owns_port is None or owns_port()):
            return HealthResult(HealthState.HEALTHY, clock() - start, last, probes)
        if process.poll() is not None:
            return HealthResult(HealthState.EXITED, clock() - start, last, probes)
        if clock() - start > timeout:
            return HealthResult(HealthState.TIMEOUT, clock() - start, last, probes)
        sleep(delay)
        delay = min(delay * 1.5, MAX_DELAY_S)
