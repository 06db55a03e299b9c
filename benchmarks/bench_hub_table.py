"""Time ``mtpstudio models hf`` on ten full-size quants served by a local Hub; bytes per file.

Run: .venv/bin/python benchmarks/bench_hub_table.py
Target: every file listed with its plan in under 2 s, at most a few MB read per file.

The repository (Qwen3.6-35B-A3B at ten quants, two of them split, zero-weight and full size)
is served over real HTTP by ``devkit.hub_server``; the command runs as a user runs
it, in a fresh process with HF_ENDPOINT pointing at the server, and the figures per file come
from the server's own counters (body bytes it sent, ranges asked for).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # devkit/ sits in the checkout; the wheel does not ship it

from devkit.hub_repo import QWEN_QUANTS, quant_repo  # noqa: E402
from devkit.hub_server import HubTestServer  # noqa: E402
from mtpstudio.core.catalog.qwen36 import QWEN36_35B_A3B_IQ4_XS  # noqa: E402

REPO = "unsloth/Qwen3.6-35B-A3B-GGUF"
RUNS = 3


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mtpstudio-hub-bench-") as tmp:
        root = Path(tmp)
        repo = quant_repo(root / "repo", REPO, QWEN36_35B_A3B_IQ4_XS, QWEN_QUANTS)
        env = {
            **os.environ,
            "HF_HOME": str(root / "hf"),  # no token from this machine
            "XDG_CACHE_HOME": str(root / "cache"),
            "XDG_DATA_HOME": str(root / "data"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_STATE_HOME": str(root / "state"),
        }
        command = [
            sys.executable, "-m", "mtpstudio.cli.main", "models", "hf", REPO,
            "--gpu", "rtx-4070-super", "--ctx", "32k",
        ]  # fmt: skip
        with HubTestServer([repo]) as hub:
            env["HF_ENDPOINT"] = hub.endpoint
            subprocess.run(command, env=env, capture_output=True, check=True)  # warm caches
            times, cpu = [], []
            output = ""
            for _ in range(RUNS):
                hub.reset_counters()
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                times.append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                output = done.stdout
            sent, ranges = dict(hub.bytes_sent), {k: list(v) for k, v in hub.ranges.items()}
        sizes = {f.path: f.size for f in repo.files}
    print(output)
    n_models = len(QWEN_QUANTS)
    print(f"`mtpstudio models hf {REPO}` on {n_models} models ({len(sent)} files read):")
    print(
        f"  wall time over {RUNS} runs: median {statistics.median(times):.2f} s, "
        f"min {min(times):.2f} s, max {max(times):.2f} s (target < 2 s, process start included)"
    )
    print(
        f"  CPU time of the command (user + sys): median {statistics.median(cpu):.2f} s; "
        f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print("  bytes the server sent per file (last run):")
    for path, size in sizes.items():
        if not path.endswith(".gguf"):
            continue
        got = sent.get(path, 0)
        asked = ranges.get(path, [])
        shown = ", ".join(f"{a:,}-{b - 1:,}" for a, b in asked) or "none"
        print(
            f"    {path:52} {got / 2**20:5.2f} MiB of {size / 1e9:5.1f} GB"
            f"  ({len(asked)} range requests: {shown})"
        )
    total = sum(sent.values())
    print(
        f"  total {total / 2**20:.1f} MiB; most for one file {max(sent.values()) / 2**20:.2f} MiB"
    )


if __name__ == "__main__":
    main()
