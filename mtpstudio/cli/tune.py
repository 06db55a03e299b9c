"""``mtpstudio tune``: find the plan with the most tokens per second that fits, by measuring."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from mtpstudio.core.errors import BenchError
from mtpstudio.core.plan.choices import CacheType
from mtpstudio.core.usecases.files import write_text_atomic


def register(sub: Any) -> None:
    """Add the ``tune`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "tune",
        help="search draft depth, p-min, cache types, MoE offload and threads for the most tok/s",
        description="Start from a plan, skip what the memory model says will not fit, launch and "
        "benchmark the rest on a few categories, drop the slower half each round, and measure "
        "the finalists on all nine categories. The starting plan is measured as the baseline. "
        "Ctrl-C stops the search and prints what was measured.",
    )
    p.add_argument("--plan", type=Path, required=True, help="the starting plan")
    p.add_argument("--ctx-floor", type=int, metavar="N", help="every candidate keeps ctx >= N")
    p.add_argument("--minutes", type=float, metavar="M", help="time budget for the search")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the whole result as JSON")
    p.add_argument("--save-best", type=Path, metavar="P2", help="save the best plan here")
    p.add_argument("--kv-types", metavar="A,B", help="main K/V cache types allowed (default: "
                   "the plan's)")  # fmt: skip
    p.add_argument("--draft-max", metavar="1,2,..", help="draft depths to try (default 1-4)")
    p.add_argument("--p-min", metavar="X,Y", help="draft p-min values to try")
    p.add_argument("--draft-cache", metavar="A,B", help="MTP draft cache types to try")
    p.add_argument("--threads", metavar="N,M", help="thread counts to try")
    p.add_argument("--max-candidates", type=int, metavar="N", help="launch at most N candidates")
    p.add_argument("--finalists", type=int, default=2, metavar="N", help="finalists (2)")
    p.add_argument("--short", type=int, default=2, metavar="N",
                   help="categories in the first round (2)")  # fmt: skip
    p.add_argument("--n-predict", type=int, default=192, metavar="N", help="tokens per request")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="requests per category per run (steadier when busy)")  # fmt: skip
    p.add_argument("--categories", metavar="A,B", help="only these categories")
    p.add_argument("--timeout", type=float, metavar="S", help="seconds a server may take to load")
    p.add_argument("--all", action="store_true", help="also list candidates that never ran")
    p.add_argument("--no-history", action="store_true", help="do not store the result")
    p.add_argument("--keep-slower", action="store_true",
                   help="launch candidates the speed model predicts slower too")  # fmt: skip
    p.set_defaults(func=cmd_tune, launcher=None)


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _cache_types(text: str | None, what: str) -> tuple[CacheType, ...]:
    out = []
    for t in _split(text):
        try:
            out.append(CacheType(t))
        except ValueError:
            raise BenchError(
                f"{t!r} is not a cache type ({what})",
                hint="Choose from: " + ", ".join(c.value for c in CacheType) + ".",
            ) from None
    return tuple(out)


def _numbers(text: str | None, kind: Callable[[str], Any], what: str) -> tuple[Any, ...]:
    try:
        return tuple(kind(t) for t in _split(text))
    except ValueError:
        raise BenchError(f"{what} must be a comma-separated list of numbers") from None


CANCELLING = "\ncancelling: finishing with what was measured (Ctrl-C again to stop now)\n"


@contextmanager
def _ctrl_c_cancels(cancel: Any) -> Iterator[None]:
    """The first Ctrl-C cancels the search (what was measured is kept); a second one stops."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt
        cancel.cancel()
        # Straight to the descriptor: the handler can interrupt a print to sys.stderr, and a
        # second write into the same buffered writer raises "reentrant call".
        os.write(sys.stderr.fileno(), CANCELLING.encode())

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _progress(step: Any) -> None:
    remaining = "?" if step.remaining_s is None else f"~{step.remaining_s:.0f}s"
    text = (f"[{step.done} done, {step.left} left, {step.elapsed_s:.0f}s, {remaining} to go] "
            f"{step.stage}: {step.label}")  # fmt: skip
    if sys.stderr.isatty():
        print("\r" + text[:100].ljust(100), end="", file=sys.stderr, flush=True)
    else:
        print(text, file=sys.stderr, flush=True)


def cmd_tune(args: argparse.Namespace) -> int:
    from mtpstudio.core.bench.history import BenchHistory
    from mtpstudio.core.bench.results import BenchSettings
    from mtpstudio.core.bench.target import CancelToken
    from mtpstudio.core.bench.tune import TuneConstraints
    from mtpstudio.core.plan.io import load_plan, save_plan
    from mtpstudio.core.plan.settings import MIN_CTX
    from mtpstudio.core.usecases.tune import (
        load_prompts,
        render_tune_text,
        run_tuning,
        select,
        tune_setup,
    )

    if min(args.n_predict, args.finalists, args.short, args.repeat) < 1:
        raise BenchError("--n-predict, --repeat, --finalists and --short must be at least 1")
    if args.ctx_floor is not None and args.ctx_floor < MIN_CTX:
        raise BenchError(f"--ctx-floor must be at least {MIN_CTX} tokens")
    if args.max_candidates is not None and args.max_candidates < 0:
        raise BenchError("--max-candidates must not be negative")
    if args.minutes is not None and args.minutes <= 0:
        raise BenchError("--minutes must be more than 0")
    kv_types = _cache_types(args.kv_types, "--kv-types")
    overrides: dict[str, Any] = {}
    if args.draft_max:
        overrides["draft_max"] = _numbers(args.draft_max, int, "--draft-max")
    if args.p_min:
        overrides["p_min"] = _numbers(args.p_min, float, "--p-min")
    if args.draft_cache:
        overrides["draft_cache"] = _cache_types(args.draft_cache, "--draft-cache")
    if args.threads:
        overrides["threads"] = _numbers(args.threads, int, "--threads")
    start = load_plan(args.plan)
    prompts = select(load_prompts(), _split(args.categories) or None)
    from mtpstudio.core.usecases.speed import load_speed_inputs

    setup = tune_setup(start, kv_types=kv_types, overrides=overrides, speed=load_speed_inputs())
    if setup.ignored:
        print(f"mtpstudio: {setup.ignored}", file=sys.stderr)
    constraints = TuneConstraints(
        ctx_floor=args.ctx_floor,
        time_budget_s=None if args.minutes is None else args.minutes * 60.0,
        max_candidates=args.max_candidates,
        short_categories=args.short,
        finalists=args.finalists,
        skip_slower=not args.keep_slower,
    )
    cancel = CancelToken()
    with _ctrl_c_cancels(cancel):
        settings = BenchSettings(n_predict=args.n_predict, repeats=args.repeat)
        outcome = run_tuning(setup, prompts, launcher=args.launcher, constraints=constraints,
                             settings=settings, cancel=cancel, progress=_progress,
                             history=None if args.no_history else BenchHistory(),
                             timeout=args.timeout)  # fmt: skip
    result = outcome.result
    if sys.stderr.isatty():
        print("\r" + " " * 100 + "\r", end="", file=sys.stderr, flush=True)
    if outcome.history_error is not None:
        raise outcome.history_error
    sys.stdout.write(render_tune_text(result, all_rows=args.all))
    if args.save_best is not None and result.best_plan is not None:
        save_plan(result.best_plan, args.save_best)
        print(f"Best plan saved to {args.save_best}")
    if result.history_id is not None:
        print(f"Stored in the benchmark history as run {result.history_id}.")
    if args.json is not None:
        write_text_atomic(args.json, json.dumps(result.to_dict(), indent=2) + "\n")
    if result.best is None:
        return 2
    return 130 if result.cancelled else 0
