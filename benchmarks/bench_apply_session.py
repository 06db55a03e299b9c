"""Time `mtpstudio apply session --dry-run` on this machine (SDDM's facts read, nothing started).

Run: .venv/bin/python benchmarks/bench_apply_session.py [--runs N]
Target: under 2 s a run (it was 10.7 s while the version came from starting `sddm --version`).
Most of a run is Python's start-up and imports; the figure is the whole command, as a user waits.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, HOME=tempfile.mkdtemp(prefix="mtpstudio-bench-home-"))
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mtpstudio", "apply", "session", "--dry-run"],
                              capture_output=True, text=True, env=env, check=False)  # fmt: skip
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            print(f"apply session --dry-run failed ({done.returncode}): {done.stderr.strip()}")
            raise SystemExit(1)
    print(f"apply session --dry-run: {args.runs} runs, median {statistics.median(times):.2f} s, "
          f"min {min(times):.2f} s, max {max(times):.2f} s (load {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs)")  # fmt: skip


if __name__ == "__main__":
    main()
