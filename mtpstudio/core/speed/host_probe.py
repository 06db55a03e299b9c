"""A short probe of this computer's CPU and RAM, run once in a child process and cached.

It measures what the speed model needs of the host (``host_rates.HostRates``): how many bytes per
second the RAM delivers to 1, 2, 4 … threads reading a buffer far larger than any cache, and how
many multiply-adds per second one core does in a matrix-vector product whose matrix stays in its
own cache (the shape of the engine's decode kernels, with the memory taken out). Each figure is
the best of a few short repeats, so another program's burst lowers it less.

Run as ``python -m mtpstudio.core.speed.host_probe [MAX_THREADS]``: it prints one JSON object.
The parent sets ``OPENBLAS_NUM_THREADS=1`` (and its kin) so one call is one core's work.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PROBE_VERSION = 2  # 2: the interpreter's cost of a call taken out of the arithmetic
READ_BYTES = 512 * 1024 * 1024
"""The buffer the RAM is read through: 16 times a large desktop L3 cache."""
GEMV_ROWS, GEMV_COLS = 256, 512
"""A 512 KiB float32 matrix: it stays in one core's L2 cache."""
REPEATS = 5


def _best(run: Callable[[], float], repeats: int = REPEATS) -> float:
    return max(run() for _ in range(repeats))


def thread_counts(max_threads: int) -> list[int]:
    """1, 2, 4 … up to ``max_threads``, and ``max_threads`` itself."""
    counts, n = [], 1
    while n < max_threads:
        counts.append(n)
        n *= 2
    counts.append(max(1, max_threads))
    return counts


def read_bandwidth(max_threads: int) -> dict[int, float]:
    """Bytes per second read from RAM by 1, 2, 4 … threads (a bitwise-or over 64-bit words:
    numpy's loop releases the interpreter lock and does one instruction per eight bytes)."""
    import numpy as np

    words = np.ones(READ_BYTES // 8, dtype=np.uint64)
    np.bitwise_or.reduce(words)  # touch every page once before timing
    out: dict[int, float] = {}
    for n in thread_counts(max_threads):
        parts = np.array_split(words, n)

        def once(parts: list[Any] = parts) -> float:
            workers = [threading.Thread(target=np.bitwise_or.reduce, args=(p,)) for p in parts]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            return words.nbytes / (time.perf_counter() - start)

        out[n] = _best(once)
    return out


def call_seconds(calls: int) -> float:
    """The least time ``calls`` products of a 1×8 matrix take: what the interpreter and numpy
    cost per call, with next to no arithmetic. The probes below take it out, so a core's rate
    is its arithmetic's, as the engine's kernels (no interpreter between rows) meet it."""
    import numpy as np

    m, v = np.ones((1, 8), dtype=np.float32), np.ones(8, dtype=np.float32)
    m @ v

    def once() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            m @ v
        return time.perf_counter() - start

    return min(once() for _ in range(REPEATS))


def _product_rate(m: Any, x: Any, flops: float, calls: int) -> float:
    """Operations per second of ``calls`` products ``m @ x`` of ``flops`` each, the cost of
    the calls themselves taken out (the best of a few repeats)."""
    m @ x
    overhead = call_seconds(calls)

    def once() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            m @ x
        spent = time.perf_counter() - start
        return flops * calls / max(spent - overhead, spent / 2)

    return _best(once, REPEATS)


def gemv_flops() -> float:
    """Floating-point operations per second of one core in a cache-resident matrix-vector
    product (two per multiply-add)."""
    import numpy as np

    rng = np.random.default_rng(0)
    m = rng.random((GEMV_ROWS, GEMV_COLS), dtype=np.float32)
    v = rng.random(GEMV_COLS, dtype=np.float32)
    return _product_rate(m, v, 2.0 * GEMV_ROWS * GEMV_COLS, 400)


def gemm_flops() -> float:
    """The same for a batch of 64 vectors (prompt processing multiplies many tokens at once)."""
    import numpy as np

    rng = np.random.default_rng(1)
    m = rng.random((GEMV_ROWS, GEMV_COLS), dtype=np.float32)
    b = rng.random((GEMV_COLS, 64), dtype=np.float32)
    return _product_rate(m, b, 2.0 * GEMV_ROWS * GEMV_COLS * 64, 40)


def measure(max_threads: int) -> dict[str, Any]:
    """Every figure of the probe, as the JSON the parent reads."""
    started = time.perf_counter()
    bandwidth = read_bandwidth(max_threads)
    return {
        "version": PROBE_VERSION,
        "read_bytes_per_s": {str(k): v for k, v in bandwidth.items()},
        "gemv_flop_per_s": gemv_flops(),
        "gemm_flop_per_s": gemm_flops(),
        "seconds": time.perf_counter() - started,
    }


def main(argv: list[str]) -> int:
    max_threads = int(argv[0]) if argv else 1
    print(json.dumps(measure(max(1, min(max_threads, 256)))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
