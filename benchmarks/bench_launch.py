"""Benchmark: launch-to-healthy of ``mtpstudio launch`` next to a bare ``llama-server`` start.

Both start the same command line on the same tiny model (generated with the test bench) and
count until ``GET /health`` answers 200. "bare" spawns llama-server directly and polls /health
every 5 ms; "mtpstudio launch" is the whole CLI as a user runs it (Python start-up, plan load,
engine probe from cache, GGUF header check, port check, spawn, health wait) until it returns,
plus the time it reports itself from spawn to healthy, and the CPU time (user + sys) the CLI
process used, which a busy machine inflates far less than the wall times. Each round stops the
server before the next. Target: the CLI within 0.3 s of the bare start.

    MTPSTUDIO_ENGINES=<folder with llama-server> .venv/bin/python benchmarks/bench_launch.py \
        [--engine upstream|ik] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.servers import engine_binary, free_port
from support.tiny_models import make_model

from mtpstudio.core.plan.io import plan_with, save_plan
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.health import probe_health
from mtpstudio.core.usecases.launch import find_build, prepare_launch

TARGET_S = 0.3


def bare_start(argv: list[str], port: int, log: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = t0 + 120
        while time.perf_counter() < deadline:
            if probe_health("127.0.0.1", port, timeout=0.5).status == 200:
                return time.perf_counter() - t0
            if proc.poll() is not None:
                raise SystemExit(f"bare llama-server exited: see {log}")
            time.sleep(0.005)
        raise SystemExit("bare llama-server never became healthy")
    finally:
        proc.terminate()
        proc.wait(10)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_launch(plan_path: Path, port: int) -> tuple[float, float, float, float]:
    """(CLI start -> /health 200 seen from outside, CLI start -> return, its own figure,
    the CLI's CPU seconds)."""
    cmd = [sys.executable, "-m", "mtpstudio.cli.main", "launch", "--plan", str(plan_path),
           "--json"]  # fmt: skip
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    healthy = float("nan")
    while proc.poll() is None and time.perf_counter() - t0 < 180:
        if probe_health("127.0.0.1", port, timeout=0.5).status == 200:
            healthy = time.perf_counter() - t0
            break
        time.sleep(0.005)
    out, err = proc.communicate(timeout=180)
    wall = time.perf_counter() - t0
    cpu = _children_cpu() - cpu0  # the CLI only: the server it started is not its child
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if done.returncode != 0:
        raise SystemExit(f"mtpstudio launch failed: {done.stderr}")
    own = float(json.loads(done.stdout)["healthy_after_s"])
    stop = subprocess.run([sys.executable, "-m", "mtpstudio.cli.main", "server", "stop"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if stop.returncode != 0:
        raise SystemExit(f"mtpstudio server stop failed: {stop.stderr}")
    return healthy, wall, own, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["upstream", "ik"], default="upstream")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()

    binary = engine_binary(args.engine)  # before the XDG dirs move: the build cache stays
    work = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    for name in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        os.environ[name] = str(work / name.lower())
    model = make_model("dense", work / "dense.gguf")
    plan = plan_with(Plan(), {
        "device": "cpu", "model.path": str(model), "model.card": None,
        "engine.flavour": args.engine, "engine.binary": str(binary), "runtime.ctx": 512,
        "runtime.cache_type_k": "f16", "runtime.cache_type_v": "f16", "runtime.threads": 2,
        "mtp.enabled": False, "server.port": free_port(),
    })  # fmt: skip
    plan_path = work / "plan.json"
    save_plan(plan, plan_path)
    prepared = prepare_launch(plan, find_build(plan))  # probes once (cached for the CLI)
    argv = list(prepared.spec.argv)

    bare: list[float] = []
    healthy: list[float] = []
    wall: list[float] = []
    own: list[float] = []
    cpu: list[float] = []
    for i in range(args.rounds):
        bare.append(bare_start(argv, plan.server.port, work / f"bare-{i}.log"))
        h, w, o, c = cli_launch(plan_path, plan.server.port)
        cpu.append(c)
        healthy.append(h)
        wall.append(w)
        own.append(o)

    def line(label: str, xs: list[float]) -> str:
        return (f"{label:<40} median {statistics.median(xs):6.3f} s   min {min(xs):6.3f} s   "
                f"max {max(xs):6.3f} s")  # fmt: skip

    print(f"launch-to-healthy, {args.engine} llama-server, tiny dense model, {args.rounds} rounds")
    print(" ".join(argv))
    print(line("bare llama-server (spawn -> /health 200)", bare))
    print(line("mtpstudio launch (CLI start -> /health 200)", healthy))
    print(line("mtpstudio launch (CLI start -> returns)", wall))
    print(line("  its own spawn -> /health 200", own))
    print(line("  CPU time of the CLI (user + sys)", cpu))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    for label, xs in (("healthy", healthy), ("returns", wall)):
        gap = statistics.median(xs) - statistics.median(bare)
        verdict = "within" if gap <= TARGET_S else "OVER"
        print(f"difference of medians ({label}): {gap:+.3f} s ({verdict} the {TARGET_S} s target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
