"""``mtpstudio prestart``: the check a unit runs before its engine starts (``ExecStartPre=``).

Its words are the ones ``helper/prestart_shape.py`` writes into the unit; it prints one line per
finding (the journal keeps them) and exits 1 when the engine must not start.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "prestart",
        help="the check a unit runs before its engine starts (free VRAM, the engine's build)",
    )
    p.add_argument("--unit", required=True, help="the unit's name, for the journal's lines")
    p.add_argument("--on-short", choices=["refuse", "warn", "fit"], default="refuse")
    p.add_argument(
        "--fallback",
        action="append",
        default=[],
        help="a word of the engine's fit that replaces the placement when the VRAM is short "
        "(--on-short fit), as --fallback=--fit",
    )
    p.add_argument(
        "--print-fallback",
        action="store_true",
        help="the launch script's form: the findings on stderr, and on stdout the engine's fit "
        "words when it starts with them",
    )
    p.add_argument("--need", action="append", default=[], metavar="DEVICE=ENGINE_MIB,DESKTOP_MIB")
    p.add_argument("--engine", required=True, help="the engine binary the unit starts")
    p.add_argument("--engine-size", metavar="BYTES")
    p.add_argument("--engine-mtime-ns", metavar="NS")
    p.add_argument(
        "--flag",
        action="append",
        default=[],
        help="a flag the unit passes, as --flag=-m (one word: the flag begins with a dash)",
    )
    p.set_defaults(func=cmd_prestart)


def _words(args: argparse.Namespace) -> list[str]:
    """The check's words in the order the unit writes them (read back and checked)."""
    words = ["--unit", args.unit, "--on-short", args.on_short]
    words += [f"--fallback={word}" for word in args.fallback]
    if args.print_fallback:
        words.append("--print-fallback")
    for need in args.need:
        words += ["--need", need]
    words += ["--engine", args.engine]
    if args.engine_size is not None:
        words += ["--engine-size", args.engine_size]
    if args.engine_mtime_ns is not None:
        words += ["--engine-mtime-ns", args.engine_mtime_ns]
    words += [f"--flag={flag}" for flag in args.flag]
    return words


def cmd_prestart(args: argparse.Namespace) -> int:
    from mtpstudio.core.usecases.prestart import check_before_start, shape_from_words

    shape = shape_from_words(sys.executable, _words(args), args.unit, args.engine)
    script = args.print_fallback
    outcome = check_before_start(shape, Path(args.engine), None if script else os.environ)
    for line in outcome.lines:
        print(line, file=sys.stderr if script else sys.stdout, flush=True)
    if script and outcome.start and outcome.fit_instead:
        print(" ".join(shape.fallback), flush=True)
    return 0 if outcome.start else 1
