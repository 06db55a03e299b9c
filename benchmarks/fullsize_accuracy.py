"""The memory model at full size: zero-weight Qwen3.6 cards on the real upstream CPU build.

Usage: python benchmarks/fullsize_accuracy.py [--binary PATH] [--subset] [--workdir DIR]

Prints predicted vs logged MiB per segment, the largest error per segment and the runtime.
Exit status 1 when a segment misses its target (exact terms 0.01 MiB, compute 5 %).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # devkit/ sits in the checkout; the wheel does not ship it

from devkit.budget_check import render_table  # noqa: E402
from devkit.fullsize import CI_SUBSET, FULLSIZE, all_ok, run_fullsize  # noqa: E402


def _default_binary() -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from support.servers import engine_binary  # test support, not a package

    return engine_binary("upstream")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, help="upstream llama-server (default: the cache)")
    parser.add_argument("--subset", action="store_true", help="only the CI subset")
    parser.add_argument("--workdir", type=Path, help="keep GGUF logs here (default: a temp dir)")
    args = parser.parse_args()
    binary = args.binary or _default_binary()
    configs = CI_SUBSET if args.subset else FULLSIZE
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mtpstudio-fullsize-") as tmp:
        workdir = args.workdir or Path(tmp)
        rows, failures = run_fullsize(
            binary, workdir, configs, progress=lambda s: print(s, file=sys.stderr, flush=True)
        )
    for line in render_table(rows):
        print(line)
    for f in failures:
        print(f"did not load: {f.model} / {f.config} (log: {f.log_path})")
    print(
        f"runtime: {time.monotonic() - started:.0f} s for {sum(map(len, configs.values()))} loads"
    )
    return 0 if all_ok(rows) and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
