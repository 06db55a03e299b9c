"""Command line: ``mtpstudio COMMAND …`` over the Qt-free core; one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from mtpstudio import __version__
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.usecases.words import visible

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
    "setup-helper": "apply",
    "status": "apply",
    "verify-session": "apply",
    "bench": "bench",
    "launch": "launch",
    "server": "server",
    "tune": "tune",
    "models": "models",
    "prestart": "prestart",
    "poststart": "poststart",
}


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, when it names one before any option (pure)."""
    first = argv[0] if argv else None
    return first if first in COMMAND_MODULES else None


ENGINE_SPELLINGS = {
    "--spec-type": "--mtp / --no-mtp (MTP drafting) or --draft-model GGUF: mtpstudio writes "
    "the --spec-type the build takes",
    "-fitt": "--fit-margin MIB",
    "-md": "--draft-model GGUF",
    "--model-draft": "--draft-model GGUF",
    "--gpu-layers": "--n-gpu-layers N",
    "--mlock": "--load-mode mlock",
    "--no-mmap": "--load-mode no-mmap",
    "-lm": "--load-mode mmap|no-mmap|mlock",
    "-ot": "--n-cpu-moe N (the experts of the first N layers in system RAM)",
    "--override-tensor": "--n-cpu-moe N (the experts of the first N layers in system RAM)",
    "-np": "--parallel N",
}
"""Engine flags that mtpstudio spells another way (the rest are accepted as aliases)."""


class Parser(argparse.ArgumentParser):
    """argparse, whose "unrecognized arguments" names mtpstudio's option for an engine flag."""

    def error(self, message: str) -> NoReturn:
        words = message.split(":", 1)[1].split() if "unrecognized arguments" in message else []
        said = [f"{w} is {ENGINE_SPELLINGS[w.split('=')[0]]}" for w in words
                if w.split("=")[0] in ENGINE_SPELLINGS]  # fmt: skip
        if said:
            message += " (in mtpstudio: " + "; ".join(said) + ")"
        super().error(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or only ``command``'s module registered."""
    parser = Parser(
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
    except BrokenPipeError:
        # the reader went away (`mtpstudio plan | head`): stop quietly, like other tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
