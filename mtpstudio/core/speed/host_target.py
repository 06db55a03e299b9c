"""Another PC's CPU and RAM rates, for a plan that is not for this computer.

A plan names a catalogue CPU (``--cpu ryzen-7-9700x``) and its RAM (``--ram ddr5-6000x2``, or a
bandwidth: ``--ram 65GB/s``); either may be left out (the CPU's commonly run RAM, or this
computer's CPU). The rates follow from what this computer measured (``host_rates``) by one rule:

* **a core's arithmetic** scales with the clock: this computer's probed rate per core times the
  other CPU's boost clock over this one's. The engines' CPU kernels for quantized weights are
  256-bit (AVX2) code, so a 512-bit datapath does not speed them: the vector width counts only
  below 256 bits (none of the catalogue's CPUs);
* **the cores** are the performance cores (upstream's default thread count on a hybrid Intel
  part counts those; E-cores are left out of the threads a plan assumes);
* **the RAM** reads ``RAM_READ_SHARE`` of its peak (channels × data rate × 8 bytes) once enough
  threads read it; one thread reads what this computer's one thread read, scaled by the clock
  like the arithmetic, and more threads add that much each until the RAM is saturated.

Every figure made so is an estimate, and its source says whose CPU and RAM it assumes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from mtpstudio.core.catalog.cpus import CpuSpec, cpu_spec
from mtpstudio.core.errors import CatalogError
from mtpstudio.core.speed.host_rates import HostRates

GB = 1e9
RAM_READ_SHARE = 0.7
"""The share of the RAM's peak a many-threaded read reaches: assumed (memory benchmarks of
dual-channel DDR4 and DDR5 desktops read 65-80 % of the peak; AM5's DDR5-6000, 96 GB/s peak,
reads about 65 GB/s)."""
KERNEL_VECTOR_BITS = 256
"""The vector width the engines' quantized CPU kernels are written for (AVX2)."""
THIS_CLOCK_FALLBACK_GHZ = 3.0
"""This computer's clock where neither cpufreq nor /proc/cpuinfo says it."""

_RAM = re.compile(r"^(ddr4|ddr5|lpddr5x?|lpddr4x?)-(\d{3,5})(?:x(\d{1,2}))?$")
_BANDWIDTH = re.compile(r"^(\d+(?:\.\d+)?)\s*gb/s$")


@dataclass(frozen=True)
class RamSpec:
    """A PC's RAM as a plan gives it: a type at a data rate on some channels, or a bandwidth."""

    text: str
    peak_bytes_per_s: float
    read_bytes_per_s: float
    words: str
    given_read: bool = False


def parse_ram(text: str, cpu: CpuSpec | None = None) -> RamSpec:
    """``ddr5-6000x2`` (type, MT/s, 64-bit channels; the channels default to the CPU's, else
    2), or a read bandwidth ``65GB/s``.

    Raises:
        CatalogError: anything else, with the forms it takes.
    """
    raw = text.strip().casefold().replace(" ", "")
    found = _BANDWIDTH.match(raw.replace("gbps", "gb/s"))
    if found and 0 < float(found.group(1)) <= 2000:
        read = float(found.group(1)) * GB
        return RamSpec(
            text, read / RAM_READ_SHARE, read, f"RAM read at {float(found.group(1)):g} GB/s", True
        )
    found = _RAM.match(raw)
    if found and 800 <= int(found.group(2)) <= 20000:
        channels = int(found.group(3) or (cpu.memory_channels if cpu is not None else 2))
        if 1 <= channels <= 16:
            mts = int(found.group(2))
            peak = mts * 1e6 * 8 * channels
            kind = found.group(1).upper()
            return RamSpec(
                text,
                peak,
                peak * RAM_READ_SHARE,
                f"{kind}-{mts} × {channels} channel{'s' if channels != 1 else ''} "
                f"({peak / GB:.0f} GB/s peak)",
            )
    raise CatalogError(
        f"--ram {text!r} is not a RAM spec",
        hint="Write the type, its MT/s and the channels (ddr5-6000x2, ddr4-3200x2) or a read "
        "bandwidth (65GB/s).",
    )


def default_ram(cpu: CpuSpec) -> RamSpec:
    """The RAM a catalogue CPU's owners commonly run, on all its channels."""
    return parse_ram(f"{cpu.memory_type.lower()}-{cpu.memory_mts}x{cpu.memory_channels}", cpu)


@functools.cache
def this_clock_ghz() -> float:
    """This computer's highest core clock (cpufreq's maximum, else /proc/cpuinfo's)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", encoding="ascii") as f:
            return int(f.read().strip()) / 1e6
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", f.read(), re.M)]
    except OSError:
        mhz = []
    return max(mhz) / 1000 if mhz else THIS_CLOCK_FALLBACK_GHZ


def vector_factor(bits: int, here_bits: int = KERNEL_VECTOR_BITS) -> float:
    """The kernels' vector width on a CPU over this one's: both capped at the kernels' own."""
    return min(bits, KERNEL_VECTOR_BITS) / min(here_bits, KERNEL_VECTOR_BITS)


def other_host(
    here: HostRates,
    cpu: CpuSpec | None,
    ram: RamSpec | None,
    *,
    here_ghz: float | None = None,
) -> HostRates:
    """The rates of a PC with ``cpu`` (None: this computer's CPU) and ``ram`` (None: the CPU's
    commonly run RAM; this computer's own when ``cpu`` is None too)."""
    if cpu is None and ram is None:
        return here
    clock = here_ghz or here.clock_ghz or this_clock_ghz()
    scale = 1.0 if cpu is None else cpu.boost_ghz / clock * vector_factor(cpu.simd_datapath_bits)
    cores = here.cores if cpu is None else cpu.performance_cores
    if ram is None and cpu is not None:
        ram = default_ram(cpu)
    one = here.read_bandwidth(1) * scale
    if ram is None:
        reads = tuple((t, b * scale) for t, b in here.read_bytes_per_s)
        ram_words = "this computer's RAM"
    else:
        total = ram.read_bytes_per_s
        one = min(one, total)
        saturated = max(1, min(cores, -(-total // one)))
        points = {1: one, int(saturated): total, max(cores, int(saturated)): total}
        reads = tuple(sorted(points.items()))
        ram_words = ram.words
    who = "this computer's CPU" if cpu is None else cpu.name
    return HostRates(
        read_bytes_per_s=reads,
        gemv_flop_per_s=here.gemv_flop_per_s * scale,
        gemm_flop_per_s=here.gemm_flop_per_s * scale,
        cores=cores,
        source=(
            f"estimate for another PC: {who}"
            + ("" if cpu is None else f" at {cpu.boost_ghz:g} GHz, {cores} performance cores")
            + f", {ram_words}"
            + (
                ""
                if ram is None or ram.given_read
                else f" read at {RAM_READ_SHARE:.0%} of its peak (assumed)"
            )
            + f"; this computer's probe scaled by the clock ({clock:.2f} GHz here)"
        ),
        measured=False,
        machine="" if cpu is None else cpu.name,
        clock_ghz=clock if cpu is None else cpu.boost_ghz,
    )


def host_for(here: HostRates, cpu: str | None, ram: str | None) -> HostRates:
    """The rates a plan's ``host`` section names (catalogue id or name, RAM spec).

    Raises:
        CatalogError: an unknown CPU or a RAM spec that does not parse.
    """
    spec = cpu_spec(cpu) if cpu else None
    return other_host(here, spec, parse_ram(ram, spec) if ram else None)
