"""``mtpstudio gui`` and the default with no subcommand (the wizard, or the demo plan)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpstudio.core.errors import MtpStudioError

if TYPE_CHECKING:
    from mtpstudio.core.plan.schema import Plan

GUI_HINT = "To open the wizard, run `mtpstudio gui` in a graphical session."


def register(sub: Any) -> None:
    """Add ``gui`` to the main parser's subparsers."""
    p_gui = sub.add_parser("gui", help="open the wizard")
    which = p_gui.add_mutually_exclusive_group()
    which.add_argument("--plan", type=Path, help="open this plan")
    which.add_argument("--model", "-m", type=Path, help="open this GGUF model (a new plan)")
    p_gui.add_argument(
        "--demo",
        action="store_true",
        help="start from the demo plan (demo model card on a catalogue RTX 4070 SUPER)",
    )
    p_gui.add_argument(
        "--screenshots",
        type=Path,
        metavar="DIR",
        help="render every page to DIR/NN-<page>.png and exit (no display needed)",
    )
    p_gui.set_defaults(func=cmd_gui)


def has_display(environ: dict[str, str] | None = None) -> bool:
    """True when a GUI can open: an X11/Wayland display, or an explicit Qt platform."""
    env = os.environ if environ is None else environ
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or env.get("QT_QPA_PLATFORM"))


def cmd_gui(args: argparse.Namespace) -> int:
    screenshots: Path | None = getattr(args, "screenshots", None)
    if screenshots is not None and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # screenshots need no display
    if not has_display():
        raise MtpStudioError(
            "no display is available for the wizard",
            hint="Run it in a graphical session, or use `mtpstudio plan --demo` here.",
        )
    from mtpstudio.core.usecases.gui_platform import check_xcb_platform

    check_xcb_platform()
    from mtpstudio.core.plan.io import load_plan

    plan = load_plan(args.plan) if getattr(args, "plan", None) else None
    model: Path | None = getattr(args, "model", None)
    if model is not None:
        plan = _model_plan(model)
    if screenshots is not None:
        from mtpstudio.ui.app import run_screenshots

        try:
            files = run_screenshots(screenshots, plan)
        except (OSError, RuntimeError) as exc:
            raise MtpStudioError(f"cannot render the screenshots: {exc}") from None
        for path in files:
            print(path)
        return 0
    from mtpstudio.ui.app import run_app

    return run_app(plan, demo=bool(getattr(args, "demo", False)))


def _model_plan(model: Path) -> Plan:
    """A new plan for ``model`` (checked like `plan --model`: a readable GGUF file)."""
    from mtpstudio.core.plan.schema import ModelChoice, Plan

    path = model.expanduser().absolute()
    if not path.is_file():
        raise MtpStudioError(
            f"the model {path} is not a file",
            hint="Give the path of a .gguf file (the first part of a split model).",
        )
    return Plan(model=ModelChoice(path=path))


def cmd_default(args: argparse.Namespace) -> int:
    """No subcommand: open the wizard when there is a display, else print the demo plan."""
    if has_display():
        return cmd_gui(argparse.Namespace(plan=None))
    from mtpstudio.cli import plan

    parser = argparse.ArgumentParser(prog="mtpstudio")
    plan.register(parser.add_subparsers())
    code = plan.cmd_plan(parser.parse_args(["plan", "--demo"]))
    print(f"\nNo display found. {GUI_HINT}")
    return code
