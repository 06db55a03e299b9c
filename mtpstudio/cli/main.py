"""Command line: ``mtpstudio COMMAND …`` over the Qt-free core; one module per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from mtpstudio import __version__
from mtpstudio.cli import apply, bench, detect, gui, launch, plan, render, server, tune
from mtpstudio.core.errors import MtpStudioError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mtpstudio",
        description="Plan, launch and benchmark llama-server with multi-token prediction.",
    )
    parser.add_argument("--version", action="version", version=f"mtpstudio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plan.register(sub)
    gui.register(sub)
    render.register(sub)
    detect.register(sub)
    apply.register(sub)
    bench.register(sub)
    launch.register(sub)
    server.register(sub)
    tune.register(sub)
    return parser


def one_line_error(exc: MtpStudioError) -> str:
    """The error and what to do next, on one line."""
    text = f"mtpstudio: {exc}"
    if exc.hint:
        text += f" — {exc.hint}"
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = getattr(args, "func", gui.cmd_default)
    try:
        return func(args)
    except MtpStudioError as exc:
        print(one_line_error(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
