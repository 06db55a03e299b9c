"""Command line: ``mtpstudio [plan|gui] …`` over the Qt-free core."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mtpstudio import __version__
from mtpstudio.cli import launch as launch_cli
from mtpstudio.cli import server as server_cli
from mtpstudio.cli.detect import add_detect_parser
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan import (
    CacheType,
    DesktopReclaim,
    EngineFlavour,
    FlashAttention,
    LoadMode,
    Plan,
    load_plan,
    plan_with,
    save_plan,
)

CACHE_TYPES = [c.value for c in CacheType]
GUI_HINT = "To open the wizard, run `mtpstudio gui` in a graphical session."


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    """Options shared by commands that build a Plan; defaults are None = 'not given'."""
    src = p.add_argument_group("model and target")
    which = src.add_mutually_exclusive_group()
    which.add_argument("--model", "-m", type=Path, help="GGUF file (first part of a split model)")
    which.add_argument(
        "--demo",
        nargs="?",
        const="",
        metavar="CARD",
        help="use a demo model card (default: Qwen3.6-35B-A3B IQ4_XS)",
    )
    src.add_argument("--gpu", help="auto, cpu, a device id (CUDA0) or a catalogue GPU id")
    src.add_argument("--plan", type=Path, help="start from this plan file")
    src.add_argument("--engine", help="upstream, ik, or the path of a llama-server binary")

    rt = p.add_argument_group("runtime")
    rt.add_argument("--ctx", "-c", type=int, help="context size in tokens")
    rt.add_argument("--cache-type-k", "-ctk", choices=CACHE_TYPES, help="K cache type")
    rt.add_argument("--cache-type-v", "-ctv", choices=CACHE_TYPES, help="V cache type")
    rt.add_argument(
        "--flash-attn", "-fa", choices=[f.value for f in FlashAttention], help="flash attention"
    )
    rt.add_argument("--batch", "-b", type=int, help="logical batch size")
    rt.add_argument("--ubatch", "-ub", type=int, help="physical batch size")
    rt.add_argument("--parallel", "-np", type=int, help="server slots (default 1)")
    rt.add_argument("--threads", "-t", type=int, help="CPU threads")
    rt.add_argument(
        "--n-cpu-moe", "-ncmoe", type=int, help="expert tensors of layers 0..N-1 on CPU"
    )
    rt.add_argument(
        "--cpu-moe", "-cmoe", action="store_true", default=None, help="all experts on CPU"
    )
    rt.add_argument(
        "--fit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let the engine's fit place experts (and shrink an auto context)",
    )
    rt.add_argument("--fit-margin", type=int, metavar="MIB", help="VRAM the fit leaves free")
    rt.add_argument("--n-gpu-layers", "-ngl", type=int, help="layers on the GPU")
    rt.add_argument("--load-mode", choices=[m.value for m in LoadMode], help="mmap, no-mmap, mlock")

    mtp = p.add_argument_group("multi-token prediction")
    mtp.add_argument(
        "--mtp", action=argparse.BooleanOptionalAction, default=None, help="MTP drafting"
    )
    mtp.add_argument("--draft-max", type=int, help="most drafted tokens per step")
    mtp.add_argument("--draft-min", type=int, help="fewest drafted tokens per step")
    mtp.add_argument("--draft-p-min", type=float, help="draft probability threshold")
    mtp.add_argument("--draft-cache-type-k", choices=CACHE_TYPES, help="draft K cache type")
    mtp.add_argument("--draft-cache-type-v", choices=CACHE_TYPES, help="draft V cache type")
    mtp.add_argument(
        "--draft-model", type=Path, metavar="GGUF", help="a separate draft model (turns MTP off)"
    )
    mtp.add_argument("--draft-gpu-layers", "-ngld", type=int, help="draft model layers on the GPU")

    srv = p.add_argument_group("server")
    srv.add_argument("--host", help="listen address (default 127.0.0.1)")
    srv.add_argument("--port", type=int, help="TCP port (default 8080)")
    srv.add_argument("--api-key", help="API key (needed beyond loopback)")
    srv.add_argument(
        "--desktop", choices=[d.value for d in DesktopReclaim], help="desktop VRAM reclamation"
    )


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The Plan the options describe: the --plan file (or defaults) with given options applied."""
    base = load_plan(args.plan) if args.plan else Plan()
    changes: dict[str, Any] = {}
    direct = {
        "ctx": "runtime.ctx",
        "cache_type_k": "runtime.cache_type_k",
        "cache_type_v": "runtime.cache_type_v",
        "flash_attn": "runtime.flash_attn",
        "batch": "runtime.batch",
        "ubatch": "runtime.ubatch",
        "parallel": "runtime.parallel",
        "threads": "runtime.threads",
        "fit_margin": "runtime.fit_margin_mib",
        "n_gpu_layers": "runtime.n_gpu_layers",
        "load_mode": "runtime.load_mode",
        "mtp": "mtp.enabled",
        "draft_max": "mtp.draft_max",
        "draft_min": "mtp.draft_min",
        "draft_p_min": "mtp.draft_p_min",
        "draft_cache_type_k": "mtp.cache_type_k",
        "draft_cache_type_v": "mtp.cache_type_v",
        "host": "server.host",
        "port": "server.port",
        "api_key": "server.api_key",
        "desktop": "desktop",
        "gpu": "device",
        "draft_gpu_layers": "draft.gpu_layers",
    }
    for attr, dotted in direct.items():
        value = getattr(args, attr)
        if value is not None:
            changes[dotted] = value
    if args.model is not None:
        changes["model.path"], changes["model.card"] = str(args.model), None
    elif args.demo is not None:
        from mtpstudio.core.model.catalog.models import DEFAULT_MODEL_CARD

        changes["model.path"], changes["model.card"] = None, args.demo or DEFAULT_MODEL_CARD
    if args.engine is not None:
        if args.engine in {f.value for f in EngineFlavour}:
            changes["engine.flavour"] = args.engine
        else:
            changes["engine.binary"] = args.engine
    if args.draft_model is not None:
        changes["draft.path"] = str(args.draft_model)
        if args.mtp is None:
            changes["mtp.enabled"] = False
    if args.n_cpu_moe is not None:
        changes["runtime.moe"] = "n_cpu_moe"
        changes["runtime.n_cpu_moe"] = args.n_cpu_moe
    if args.cpu_moe:
        changes["runtime.moe"] = "all_cpu"
    if args.fit is True:
        changes["runtime.moe"] = "fit"
    elif args.fit is False and base.runtime.moe.value == "fit":
        changes["runtime.moe"] = "n_cpu_moe"
    plan = plan_with(base, changes)
    _check_device(plan.device)
    return plan


def _check_device(device: str) -> None:
    if device in {"auto", "cpu"} or device.upper().startswith(("CUDA", "VULKAN", "ROCM")):
        return
    from mtpstudio.core.model.catalog.gpus import gpu_card

    gpu_card(device)  # raises CatalogError naming the known ids


def _cmd_plan(args: argparse.Namespace) -> int:
    from mtpstudio.core.budget_report import budget_report
    from mtpstudio.core.detect.report import detect_all
    from mtpstudio.core.memory.machine import machine_facts
    from mtpstudio.core.model.gguf import read_model_info
    from mtpstudio.core.model.source import load_model_info
    from mtpstudio.core.planning import PlanningContext, evaluate
    from mtpstudio.core.summary import plan_report

    plan = plan_from_args(args)
    info = load_model_info(plan.model)
    draft = read_model_info(plan.draft.path) if plan.draft.path is not None else None
    named = [plan.engine.binary] if plan.engine.binary is not None else []
    context = PlanningContext(machine_facts(detect_all(engine_paths=named)), info, draft)
    result = evaluate(plan, context)
    budget = replace(result.budget, warnings=result.warnings)
    if args.save:
        save_plan(plan, args.save)
    if args.json:
        print(json.dumps(budget.to_json(result.argv), indent=2))
    else:
        sys.stdout.write(plan_report(plan, info))
        print(f"\nTarget: {result.target.source}")
        sys.stdout.write(budget_report(budget, result.argv))
        from mtpstudio.core.server.reconcile import last_measured_text

        measured = last_measured_text(context.machine.build_for(plan), result.target.device.id)
        if measured:
            print(f"\n{measured}")
        if args.save:
            print(f"\nPlan saved to {args.save}")
    return 0


def _export_files(args: argparse.Namespace) -> tuple[Plan, dict[str, Any], list[str]]:
    """Render the plan's files the way the GUI's Export does (same core calls)."""
    import getpass

    from mtpstudio.core.detect.report import detect_all
    from mtpstudio.core.engines.apikey import ensure_api_key
    from mtpstudio.core.export import render_all
    from mtpstudio.core.memory.machine import machine_facts
    from mtpstudio.core.model.source import load_model_info
    from mtpstudio.core.planning import PlanningContext, launch_spec_for
    from mtpstudio.core.render import SessionSettings, UnitScope

    plan = load_plan(args.plan)
    machine = machine_facts(detect_all())
    ctx = PlanningContext(machine, load_model_info(plan.model))
    messages: list[str] = []
    key_file = None
    if not plan.server.is_loopback:
        key = ensure_api_key()
        key_file = key.path
        if key.created:
            messages.append(f"New API key (shown once): {key.key} — stored in {key.path}")
    spec, notes = launch_spec_for(plan, ctx, api_key_file=key_file)
    scope = UnitScope(args.scope)
    user = args.user or (getpass.getuser() if scope is UnitScope.SYSTEM else None)
    files = render_all(
        plan, spec, scope=scope, user=user, session=SessionSettings(igpu_card=machine.igpu_card)
    )
    return plan, dict(files), messages + [f"warning: {n}" for n in notes]


def _cmd_render(args: argparse.Namespace) -> int:
    from mtpstudio.core.export import write_files

    _plan, files, messages = _export_files(args)
    result = write_files(files, args.out)
    for line in messages:
        print(line)
    for f in files.values():
        print(f"{args.out / f.name}  — {f.explanation}")
    for backup in result.backups:
        print(f"kept the previous version as {backup}")
    print(f"Wrote {len(result.written)} files; {args.out / 'README.md'} says how to install them.")
    return 0


def _cmd_export_unit(args: argparse.Namespace) -> int:
    from mtpstudio.core.atomic import write_text_atomic

    _plan, files, messages = _export_files(args)
    unit = files["unit"]
    write_text_atomic(args.output, unit.text, unit.mode)
    for line in messages:
        print(line)
    print(f"Wrote {args.output} — install it as {unit.install_path}")
    return 0


def _add_export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", type=Path, required=True, help="the plan file (mtpstudio plan --save)")
    p.add_argument(
        "--scope",
        choices=["system", "user"],
        default="system",
        help="system unit (starts at boot, runs as --user) or user unit (default: system)",
    )
    p.add_argument("--user", help="account a system unit runs as (default: you)")


def _model_json(info: Any) -> dict[str, Any]:
    keys = [
        "architecture",
        "name",
        "block_count",
        "n_layer",
        "n_nextn_layer",
        "n_embd",
        "n_head",
        "n_head_kv",
        "key_length",
        "value_length",
        "context_length",
        "vocab_size",
        "n_expert",
        "n_expert_used",
        "expert_ffn_length",
        "shared_expert_ffn_length",
        "full_attention_interval",
        "ssm_inner_size",
        "ssm_state_size",
        "ssm_group_count",
        "ssm_time_step_rank",
        "ssm_conv_kernel",
        "file_size",
        "n_params",
        "tensor_bytes",
    ]
    out: dict[str, Any] = {k: getattr(info, k) for k in keys}
    out["recurrent_layers"] = list(info.recurrent_layers)
    out["bits_per_weight"] = round(info.bits_per_weight, 4)
    out["quant_mix"] = dict(info.quant_mix)
    return out


def has_display(environ: dict[str, str] | None = None) -> bool:
    """True when a GUI can open: an X11/Wayland display, or an explicit Qt platform."""
    env = os.environ if environ is None else environ
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or env.get("QT_QPA_PLATFORM"))


def _cmd_gui(args: argparse.Namespace) -> int:
    screenshots: Path | None = getattr(args, "screenshots", None)
    if screenshots is not None and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # screenshots need no display
    if not has_display():
        raise MtpStudioError(
            "no display is available for the wizard",
            hint="Run it in a graphical session, or use `mtpstudio plan --demo` here.",
        )
    plan = load_plan(args.plan) if getattr(args, "plan", None) else None
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


def _cmd_default(args: argparse.Namespace) -> int:
    """No subcommand: open the wizard when there is a display, else print the demo plan."""
    if has_display():
        return _cmd_gui(argparse.Namespace(plan=None))
    parser = build_parser()
    code = _cmd_plan(parser.parse_args(["plan", "--demo"]))
    print(f"\nNo display found. {GUI_HINT}")
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mtpstudio",
        description="Plan, launch and benchmark llama-server with multi-token prediction.",
    )
    parser.add_argument("--version", action="version", version=f"mtpstudio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p_plan = sub.add_parser("plan", help="print the model summary and the options chosen")
    _add_plan_options(p_plan)
    p_plan.add_argument("--save", type=Path, metavar="PLAN_JSON", help="write the plan here")
    p_plan.add_argument("--json", action="store_true", help="print JSON")
    p_plan.set_defaults(func=_cmd_plan)

    p_gui = sub.add_parser("gui", help="open the wizard")
    p_gui.add_argument("--plan", type=Path, help="open this plan")
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
    p_gui.set_defaults(func=_cmd_gui)

    p_render = sub.add_parser("render", help="write the unit, env file, script and session files")
    _add_export_options(p_render)
    p_render.add_argument("--out", type=Path, required=True, help="folder to write into")
    p_render.set_defaults(func=_cmd_render)

    p_unit = sub.add_parser("export-unit", help="write just the systemd unit")
    _add_export_options(p_unit)
    p_unit.add_argument("-o", "--output", type=Path, required=True, help="the unit file to write")
    p_unit.set_defaults(func=_cmd_export_unit)

    add_detect_parser(sub)
    launch_cli.register(sub)
    server_cli.register(sub)
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
    func: Callable[[argparse.Namespace], int] = getattr(args, "func", _cmd_default)
    try:
        return func(args)
    except MtpStudioError as exc:
        print(one_line_error(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
