"""The memory model over architectures: zero-weight models of realistic sizes on upstream (CPU).

Usage: python benchmarks/arch_accuracy.py [--binary PATH] [--subset] [--only NAME] [--workdir DIR]

Loads every model of ``devkit.arch_table`` (llama dense and MoE, qwen2, qwen3,
qwen3moe, gemma3, glm4moe with its MTP draft, qwen35moe, qwen35; then phi3 and qwen2moe, which
mtpstudio does not model) with a real llama-server, one load at a time, and prints predicted vs
logged MiB per segment and the largest error per segment. Replayed architectures must be exact
to 0.01 MiB and compute within 5 % (never more than 2 % low); unmodelled ones must plan their
compute buffer at or above the engine's. Exit status 1 on a miss. Run it under the heavy-work
lock on a shared machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # devkit/ sits in the checkout; the wheel does not ship it

from devkit.arch_table import CI_SUBSET, TABLE, UNMODELLED_TABLE, write_model  # noqa: E402
from devkit.budget_check import LoadConfig, SegmentRow, render_table  # noqa: E402
from devkit.fullsize import LoadFailure, run_fullsize  # noqa: E402


def _default_binary() -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from support.servers import engine_binary  # test support, not a package

    return engine_binary("upstream")


def _run(
    binary: Path, workdir: Path, table: dict[str, tuple[LoadConfig, ...]]
) -> tuple[list[SegmentRow], list[LoadFailure]]:
    return run_fullsize(
        binary,
        workdir,
        table,
        progress=lambda s: print(s, file=sys.stderr, flush=True),
        write=write_model,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, help="upstream llama-server (default: the cache)")
    parser.add_argument("--subset", action="store_true", help="only the CI subset")
    parser.add_argument("--only", action="append", help="only this model (repeatable)")
    parser.add_argument("--workdir", type=Path, help="keep GGUF logs here (default: a temp dir)")
    args = parser.parse_args()
    binary = args.binary or _default_binary()
    modelled = CI_SUBSET if args.subset else TABLE
    unmodelled = {} if args.subset else UNMODELLED_TABLE
    if args.only:
        modelled = {k: v for k, v in modelled.items() if k in args.only}
        unmodelled = {k: v for k, v in unmodelled.items() if k in args.only}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mtpstudio-arch-") as tmp:
        workdir = args.workdir or Path(tmp)
        rows, failures = _run(binary, workdir, modelled)
        rough, rough_failures = _run(binary, workdir, unmodelled)
    print("replayed architectures (exact terms to 0.01 MiB, compute within 5 %, never 2 % low):")
    for line in render_table(rows):
        print(line)
    if rough:
        print()
        print("not modelled (compute = fitted estimate + safety margin; must not be low):")
        for line in render_table(rough, is_ok=lambda r: r.safe):
            print(line)
    for f in failures + rough_failures:
        print(f"did not load: {f.model} / {f.config} (log: {f.log_path})")
    n_loads = sum(map(len, modelled.values())) + sum(map(len, unmodelled.values()))
    print(f"runtime: {time.monotonic() - started:.0f} s for {n_loads} loads")
    ok = all(r.ok for r in rows) and all(r.safe for r in rough)
    return 0 if ok and not failures and not rough_failures else 1


if __name__ == "__main__":
    sys.exit(main())
