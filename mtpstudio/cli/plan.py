"""``mtpstudio plan``: the shared plan options, the Plan they describe, and the report."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

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


def register(sub: Any) -> None:
    """Add ``plan`` to the main parser's subparsers."""
    p_plan = sub.add_parser("plan", help="print the model summary and the options chosen")
    add_plan_options(p_plan)
    p_plan.add_argument("--save", type=Path, metavar="PLAN_JSON", help="write the plan here")
    p_plan.add_argument("--json", action="store_true", help="print JSON")
    p_plan.set_defaults(func=cmd_plan)


def add_plan_options(p: argparse.ArgumentParser) -> None:
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


def cmd_plan(args: argparse.Namespace) -> int:
    from mtpstudio.core.detect.report import detect_all
    from mtpstudio.core.model.gguf import read_model_info
    from mtpstudio.core.model.source import load_model_info
    from mtpstudio.core.planning import PlanningContext, evaluate, machine_for
    from mtpstudio.core.reports import budget_report, plan_report
    from mtpstudio.core.server.reconcile import last_measured_text, load_measurements

    plan = plan_from_args(args)
    info = load_model_info(plan.model)
    draft = read_model_info(plan.draft.path) if plan.draft.path is not None else None
    named = [plan.engine.binary] if plan.engine.binary is not None else []
    machine = machine_for(detect_all(engine_paths=named))
    pctx = PlanningContext(machine, info, draft, measurements=load_measurements())
    result = evaluate(plan, pctx)
    budget = replace(result.budget, warnings=result.warnings)
    if args.save:
        save_plan(plan, args.save)
    if args.json:
        print(json.dumps(budget.to_json(result.argv), indent=2))
    else:
        sys.stdout.write(plan_report(plan, info))
        print(f"\nTarget: {result.target.source}")
        sys.stdout.write(budget_report(budget, result.argv))
        measured = last_measured_text(pctx.machine.build_for(plan), result.target.device.id)
        if measured:
            print(f"\n{measured}")
        if args.save:
            print(f"\nPlan saved to {args.save}")
    return 0
