"""``mtpstudio poststart``: after a unit's engine loads, its buffers against the plan
(``ExecStartPost=``).

Its words are the ones ``helper/prestart_shape.py`` writes into the unit. It goes on in the
background (the start does not wait for the load): it waits for ``/health``, reads this start's
journal and prints one line per device, which the journal keeps.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "poststart",
        help="after a unit's engine loads: its buffers in the journal against the plan",
    )
    p.add_argument("--unit", required=True, help="the unit's name, for the journal's lines")
    p.add_argument("--host", default="127.0.0.1", help="the address the engine listens on")
    p.add_argument("--port", type=int, required=True, help="its port")
    p.add_argument("--load", action="append", default=[], metavar="DEVICE=MIB",
                   help="the MiB of buffers the plan puts on a device (repeat)")  # fmt: skip
    p.add_argument("--foreground", action="store_true",
                   help="wait here instead of in the background")  # fmt: skip
    p.set_defaults(func=cmd_poststart)


def _compare(args: argparse.Namespace) -> int:
    from mtpstudio.core.usecases.prestart import compare_after_load

    for line in compare_after_load(args.unit, args.host, args.port, args.load, os.environ):
        print(line, flush=True)
    return 0


def cmd_poststart(args: argparse.Namespace) -> int:
    if args.foreground:
        return _compare(args)
    sys.stdout.flush()
    if os.fork() != 0:
        return 0  # systemd's ExecStartPost= ends here; the child stays in the unit's cgroup
    code = 1
    try:
        code = _compare(args)
    except Exception as exc:
        print(f"mtpstudio: {args.unit}: load: not compared ({type(exc).__name__}: {exc})",
              flush=True)  # fmt: skip
    finally:
        sys.stdout.flush()
        os._exit(code)
