"""Command line: ``mtpstudio COMMAND …`` over the Qt-free core; one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from mtpstudio import __version__
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.outside_text import visible

# The module (mtpstudio/cli/<name>.py) that registers each subcommand, in help order, so a
# command imports only its own module (launch stays quick); a test checks it is complete.
COMMAND_MODULES = {
    "plan": "plan",
    "gui": "gui",
    "render": "render",
    "export-unit": "render",
    "detect": "detect",
    "apply": "apply",
    "revert": "apply",
    "status": "apply",
    "verify-session": "apply",
    "bench": "bench",
    "launch": "launch",
    "server": "server",
    "tune": "tune",
    "models": "models",
}


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, when it names one before any option (pure)."""
    first = argv[0] if argv else None
    return first if first in COMMAND_MODULES else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or only ``command``'s module registered."""
    parser = argparse.ArgumentParser(
        prog="mtpstudio",
        description="Plan, launch and benchmark llama-server with multi-token prediction.",
    )
    parser.add_argument("--version", action="version", version=f"mtpstudio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = dict.fromkeys(COMMAND_MODULES.values())
    if command is not None:
        modules = {COMMAND_MODULES[command]: None}
    for name in modules:
        importlib.import_module(f"mtpstudio.cli.{name}").register(sub)
    return parser


def one_line_error(exc: MtpStudioError) -> str:
    """The error and what to do next, on one line."""
    text = f"mtpstudio: {exc}"
    if exc.hint:
        text += f" — {exc.hint}"
    return visible(" ".join(text.split()))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        from mtpstudio.cli.gui import cmd_default

        func = cmd_default
    try:
        return func(args)
    except MtpStudioError as exc:
        print(one_line_error(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
