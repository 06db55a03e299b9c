"""This computer's CPU and RAM rates for the speed model: probed once, cached, or stated.

``load_host_rates`` returns the cached probe of this computer (``host_probe``), running it once
(about a second, in a child process) when the cache is missing or was made on other hardware.
``ASSUMED_HOST`` stands in where nothing was measured (tests, a probe that failed); every
estimate built on it says so.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mtpstudio.core.atomic import WriteError, write_text_atomic
from mtpstudio.core.paths import cache_dir
from mtpstudio.core.runner import Runner, SubprocessRunner
from mtpstudio.core.speed.host_probe import PROBE_VERSION
from mtpstudio.core.state_files import SchemaError, load_cache

log = logging.getLogger(__name__)

CACHE_NAME = "host-rates.json"
CACHE_MAX_BYTES = 64 * 1024
PROBE_TIMEOUT_S = 120.0
GB = 1e9


@dataclass(frozen=True)
class HostRates:
    """How fast this computer's CPU reads RAM and multiplies.

    Attributes:
        read_bytes_per_s: (threads, bytes per second read from RAM), threads ascending.
        gemv_flop_per_s: one core's floating-point operations per second in a cache-resident
            matrix-vector product (decoding: one token against every weight).
        gemm_flop_per_s: the same for a batch of 64 vectors (prompt processing).
        cores: physical cores (the engines' default thread count).
        source: where the figures come from, in words.
        measured: probed on this computer (False: ``ASSUMED_HOST``).
    """

    read_bytes_per_s: tuple[tuple[int, float], ...]
    gemv_flop_per_s: float
    gemm_flop_per_s: float
    cores: int
    source: str
    measured: bool = True
    machine: str = ""
    """The CPU model and its logical CPUs (``machine_name``): empty where not probed."""
    clock_ghz: float | None = None
    """The probed machine's highest core clock where it was recorded with the rates (a
    recording's); None: this computer's (``host_target.this_clock_ghz``)."""

    def read_bandwidth(self, threads: int) -> float:
        """Bytes per second ``threads`` threads read from RAM (between probed counts: linear;
        beyond the last: the last, since more threads than were probed share the same RAM)."""
        points = self.read_bytes_per_s
        if threads <= points[0][0]:
            return points[0][1]
        for (t0, b0), (t1, b1) in itertools.pairwise(points):
            if threads <= t1:
                return b0 + (b1 - b0) * (threads - t0) / (t1 - t0)
        return max(b for _, b in points)

    def decode_flops(self, threads: int) -> float:
        """Floating-point operations per second of ``threads`` threads decoding (one per
        physical core counts; more threads share the cores)."""
        return self.gemv_flop_per_s * max(1, min(threads, self.cores))

    def prefill_flops(self, threads: int) -> float:
        return self.gemm_flop_per_s * max(1, min(threads, self.cores))

    def to_json(self) -> dict[str, Any]:
        return {
            "read_gb_per_s": {str(t): round(b / GB, 2) for t, b in self.read_bytes_per_s},
            "gemv_gflop_per_s_per_core": round(self.gemv_flop_per_s / GB, 2),
            "gemm_gflop_per_s_per_core": round(self.gemm_flop_per_s / GB, 2),
            "cores": self.cores,
            "source": self.source,
            "measured": self.measured,
        }


ASSUMED_HOST = HostRates(
    read_bytes_per_s=((1, 25 * GB), (4, 55 * GB), (8, 65 * GB)),
    gemv_flop_per_s=50 * GB,
    gemm_flop_per_s=110 * GB,
    cores=8,
    source="assumed: an 8-core desktop with dual-channel DDR5 (65 GB/s read by 8 threads, "
    "25 GB/s by one; 50 GFLOP/s per core in a matrix-vector product); nothing was measured",
    measured=False,
)
"""A typical desktop beside a 12-16 GB card, where this computer was not probed."""


@functools.cache
def _cpuinfo() -> tuple[str, int]:
    """(CPU model, physical cores) from /proc/cpuinfo (detection's parser), read once: the
    hardware key, the machine's name and its cores all ask for it."""
    from mtpstudio.core.detect.host import parse_cpuinfo

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            model, physical, _logical = parse_cpuinfo(handle.read(1 << 20))
    except OSError:
        model, physical = None, None
    return (model or "")[:200], physical or os.cpu_count() or 1


def hardware_key() -> dict[str, Any]:
    """What the cached probe belongs to: the CPU model, its threads and the RAM size."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        ram = 0
    return {
        "probe": PROBE_VERSION,
        "cpu": _cpuinfo()[0],
        "logical_cpus": os.cpu_count() or 1,
        "ram_gib": round(ram / 2**30),
    }


def machine_name() -> str:
    """This computer's CPU model and logical CPUs, as the kernel table names its machine."""
    return f"{_cpuinfo()[0]} ({os.cpu_count() or 1} CPUs)"


def physical_cores() -> int:
    return _cpuinfo()[1]


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise SchemaError(f"has a {what} that is not a positive number")
    if value > 1e15:
        raise SchemaError(f"has an impossible {what}")
    return float(value)


def rates_from_probe(data: Any, cores: int, source: str, machine: str = "") -> HostRates:
    """The probe's JSON as ``HostRates`` (SchemaError for anything else)."""
    if not isinstance(data, dict) or data.get("version") != PROBE_VERSION:
        raise SchemaError(f"is not probe version {PROBE_VERSION}")
    reads = data.get("read_bytes_per_s")
    if not isinstance(reads, dict) or not reads or len(reads) > 64:
        raise SchemaError("has no RAM bandwidth")
    points = []
    for key, value in reads.items():
        if not isinstance(key, str) or not key.isdigit() or not 0 < int(key) <= 4096:
            raise SchemaError("has a thread count that is not a number")
        points.append((int(key), _positive(value, "RAM bandwidth")))
    return HostRates(
        read_bytes_per_s=tuple(sorted(points)),
        gemv_flop_per_s=_positive(data.get("gemv_flop_per_s"), "matrix-vector rate"),
        gemm_flop_per_s=_positive(data.get("gemm_flop_per_s"), "matrix-matrix rate"),
        cores=max(1, cores),
        source=source,
        machine=machine[:200],
    )


BUSY_LOAD = 0.5
"""Load average per CPU above which a probe is taken as measured on a busy machine: its figures
are what was left over, and it is measured again once the machine is quieter."""


def load_per_cpu() -> float:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 0.0


def _source(when: str, load: float) -> str:
    busy = f", while it was busy: load {load:.1f} per CPU" if load > BUSY_LOAD else ""
    return f"measured on this computer ({when}{busy})"


def _cache_shape(data: Any) -> tuple[dict[str, Any], HostRates, float]:
    if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
        raise SchemaError("is not mtpstudio's host rates")
    cores = data.get("cores")
    if isinstance(cores, bool) or not isinstance(cores, int) or not 0 < cores <= 4096:
        raise SchemaError("has no core count")
    when = data.get("measured_at")
    when = when if isinstance(when, str) and len(when) <= 40 else "?"
    load = data.get("load_per_cpu", 0.0)
    if isinstance(load, bool) or not isinstance(load, int | float) or not 0 <= load < 1e6:
        raise SchemaError("has a load that is not a number")
    rates = rates_from_probe(data.get("probe"), cores, _source(when, float(load)))
    return data["key"], rates, float(load)


def cache_path() -> Path:
    return cache_dir() / CACHE_NAME


def run_probe(runner: Runner | None = None, max_threads: int | None = None) -> dict[str, Any]:
    """Run ``host_probe`` in a child process with one BLAS thread per call; its JSON.

    Raises:
        RuntimeError: the probe failed or answered something else (the message says why).
    """
    threads = max_threads or os.cpu_count() or 1
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    run = runner or SubprocessRunner(env=env)
    argv = [sys.executable, "-m", "mtpstudio.core.speed.host_probe", str(threads)]
    result = run(argv, PROBE_TIMEOUT_S)
    if not result.ok:
        raise RuntimeError(result.reason(PROBE_TIMEOUT_S))
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError("the probe printed no JSON") from None
    if not isinstance(data, dict):
        raise RuntimeError("the probe printed something else than its figures")
    return data


def load_host_rates(
    *, probe: bool = True, runner: Runner | None = None, load: float | None = None
) -> HostRates | None:
    """This computer's rates: the cached probe, else (``probe``) a new one, cached.

    None when nothing was measured and the probe is not run or fails (one logged sentence).
    ``load``: this machine's load average per CPU now (default: read).
    """
    path = cache_path()
    found = load_cache(path, "the host rates cache", _cache_shape, max_bytes=CACHE_MAX_BYTES)
    # a cache made on other hardware (a new CPU, more RAM) is measured again, and one made while
    # the machine was busy once it is quieter
    cached = found[1] if found is not None and found[0] == hardware_key() else None
    if cached is not None:  # the hardware key matched: the rates are this machine's
        cached = replace(cached, machine=machine_name())
    load_now = load_per_cpu() if load is None else load
    quieter = found is not None and found[2] > BUSY_LOAD and load_now < found[2] / 2
    if cached is not None and quieter and probe:
        cached = None
    if cached is not None or not probe:
        return cached
    try:
        data = run_probe(runner)
        cores = physical_cores()
        when = time.strftime("%Y-%m-%d")
        rates = rates_from_probe(data, cores, _source(when, load_now), machine_name())
    except (RuntimeError, SchemaError) as exc:
        log.warning("mtpstudio: the CPU and RAM probe failed (%s); speeds assume a desktop.", exc)
        return found[1] if found is not None and found[0] == hardware_key() else None
    document = {
        "key": hardware_key(),
        "cores": cores,
        "measured_at": when,
        "load_per_cpu": round(load_now, 2),
        "probe": data,
    }
    try:
        write_text_atomic(path, json.dumps(document, indent=1) + "\n")
    except WriteError as exc:
        log.warning("mtpstudio: %s; the probe runs again next time.", exc)
    return rates
