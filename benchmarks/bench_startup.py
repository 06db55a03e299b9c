"""Benchmark: the start-up cost of the command line, in CPU seconds of the whole process.

Runs each command as a user does (``python -m mtpstudio ...`` in a fresh interpreter, output
thrown away) several times and prints the median CPU time (user + sys of the child, which a
busy machine inflates far less than wall time) beside the load average, then the modules that
``python -X importtime`` says cost the most (cumulative microseconds) for each command.

Targets (issue 35): ``mtpstudio --help`` and a one-line error (an empty GGUF file) under
0.25 s, ``mtpstudio plan --demo`` under 0.5 s. A figure, not a timed assert.

``plan --demo`` is run twice over: as a first run (the replay cache, ``replays.json`` in the
user's cache folder, removed before each run, so every compute buffer is replayed and the file
written again) and as every later run (the answers read back). The line above the figures says
whether Python reads its compiled bytecode (``__pycache__`` beside mtpstudio's sources, which
an installed wheel has) or compiles every module at each start (``PYTHONDONTWRITEBYTECODE`` and
no ``__pycache__``, as in a fresh checkout): that alone moves every figure by about 0.1 s.

    .venv/bin/python benchmarks/bench_startup.py [--runs 7] [--top 12]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGETS_S = {"--help": 0.25, "empty GGUF": 0.25, "plan --demo": 0.5, "plan --demo 1st": 0.5}
REPLAY_CACHE = "replays.json"
FIRST_RUN = "plan --demo 1st"


def commands(empty: Path) -> dict[str, list[str]]:
    return {
        "--help": ["--help"],
        "empty GGUF": ["plan", "--model", str(empty)],
        FIRST_RUN: ["plan", "--demo"],
        "plan --demo": ["plan", "--demo"],
    }


def child_output(code: str) -> str:
    """What ``python -c CODE`` prints, with mtpstudio imported as the commands import it."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip()


def bytecode_line() -> str:
    """Whether the children read compiled bytecode or compile mtpstudio at every start."""
    package = Path(child_output("import mtpstudio; print(mtpstudio.__file__)")).parent
    cached = any(package.rglob("__pycache__/*.pyc"))
    writes = not os.environ.get("PYTHONDONTWRITEBYTECODE")
    if cached or writes:
        return f"bytecode: read from __pycache__ ({package})"
    return f"bytecode: none (PYTHONDONTWRITEBYTECODE set, no __pycache__ in {package})"


def cpu_seconds(args: list[str]) -> float:
    """User + sys CPU seconds of one ``python -m mtpstudio ARGS`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "mtpstudio", *args], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_costs(args: list[str]) -> list[tuple[int, int, str]]:
    """(cumulative us, self us, module) per module ``python -X importtime`` reports."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "mtpstudio", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)  # fmt: skip
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        own, total, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        if own.isdigit() and total.isdigit():
            rows.append((int(total), int(own), name))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per command (7); medians")
    ap.add_argument("--top", type=int, default=12, help="importtime entries shown (12)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.gguf"
        empty.write_bytes(b"")
        cmds = commands(empty)
        cpu_seconds(cmds["plan --demo"])  # writes the demo card once (not part of a run)
        replays = Path(child_output("from mtpstudio.core.paths import cache_dir; "
                                    "print(cache_dir())")) / REPLAY_CACHE  # fmt: skip
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.runs} runs each")
        print(bytecode_line())
        for label, argv in cmds.items():
            load = os.getloadavg()[0]
            runs = []
            for _ in range(args.runs):
                if label == FIRST_RUN:
                    replays.unlink(missing_ok=True)
                runs.append(cpu_seconds(argv))
            median = statistics.median(runs)
            verdict = "ok" if median < TARGETS_S[label] else "over"
            spread = f"min {min(runs):.3f}, max {max(runs):.3f}"
            print(f"  {label:<16} median {median:.3f} s CPU ({spread}); "
                  f"target {TARGETS_S[label]} s: {verdict}; load {load:.2f}")  # fmt: skip
        for label, argv in cmds.items():
            if label == FIRST_RUN:
                continue
            rows = import_costs(argv)
            mtp = sum(1 for _, _, name in rows if name.strip().startswith("mtpstudio"))
            print(f"\n-X importtime, {label}: {len(rows)} modules ({mtp} of mtpstudio), the "
                  f"{args.top} costliest (cumulative / self, us)")  # fmt: skip
            for total, own, name in sorted(rows, reverse=True)[: args.top]:
                print(f"  {total:>8} {own:>8}  {name.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
