"""``mtpstudio plan``: the shared plan options, the Plan they describe, and the report."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpstudio.core.errors import PlanError
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.settings import SETTINGS, setting
from mtpstudio.core.usecases.words import parse_token_count

if TYPE_CHECKING:
    from mtpstudio.core.plan.schema import Plan

EXIT_DOES_NOT_FIT = 3
"""``plan --check`` exits with this when the plan does not fit or will not run as planned."""


def _demo_help() -> str:
    from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD
    from mtpstudio.core.usecases.model_cards import model_cards

    models = ", ".join(sorted({c.model_id for c in model_cards()}))
    return (
        f"use a demo model card (default: {DEFAULT_MODEL_CARD}): a model and a quant, e.g. "
        f"qwen3.6-35b-a3b-q4_k_m; `--demo list` lists every quant with its size. Models: "
        f"{models}"
    )


def register(sub: Any) -> None:
    """Add ``plan`` to the main parser's subparsers."""
    p_plan = sub.add_parser(
        "plan",
        help="print the model summary and the options chosen",
        epilog=f"Exit status: 0, or 2 for bad input; with --check, {EXIT_DOES_NOT_FIT} when the "
        "plan does not fit or will not run as planned.",
    )
    add_plan_options(p_plan)
    p_plan.add_argument("--save", type=Path, metavar="PLAN_JSON", help="write the plan here")
    p_plan.add_argument("--json", action="store_true", help="print JSON")
    p_plan.add_argument(
        "--check",
        action="store_true",
        help=f"exit {EXIT_DOES_NOT_FIT} when the plan does not fit or will not run as planned",
    )
    p_plan.set_defaults(func=cmd_plan)


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """Options shared by commands that build a Plan; defaults are None = 'not given'."""
    src = p.add_argument_group("model and target")
    which = src.add_mutually_exclusive_group()
    _add_own(which, "model.path", type=Path)
    _add_own(which, "model.card", nargs="?", const="", help=_demo_help())
    _add_own(src, "device", action="append")  # repeated: split.gpus
    _add_own(src, "split.rpc", action="append")
    _add_settings(src, "split.mode")
    _add_own(src, "split.tensor_split")
    src.add_argument("--plan", type=Path, help="start from this plan file")
    _add_own(src, "engine.flavour")  # a flavour, or a binary: engine.binary too
    pc = p.add_argument_group(
        "the PC (for a plan for another computer than this one)",
        f"--cpu takes a catalogue CPU id: {_catalogue_ids('cpus')}",
    )
    _add_settings(pc, "host.cpu", "host.ram")

    rt = p.add_argument_group("runtime")
    _add_settings(rt, "runtime.ctx", "runtime.cache_type_k", "runtime.cache_type_v")
    _add_settings(rt, "runtime.flash_attn", "runtime.batch", "runtime.ubatch")
    _add_settings(rt, "runtime.parallel", "runtime.threads", "runtime.n_cpu_moe")
    fit, *all_cpu = setting("runtime.moe").cli  # two options for the expert placement
    rt.add_argument(*all_cpu, action="store_true", default=None, help="all experts on CPU")
    rt.add_argument(
        fit,
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let the engine's fit place experts (and shrink an auto context)",
    )
    _add_own(rt, "split.fit_margins_mib")  # one value: runtime.fit_margin_mib
    _add_settings(rt, "runtime.n_gpu_layers", "runtime.load_mode")

    mtp = p.add_argument_group("multi-token prediction")
    _add_settings(mtp, "mtp.enabled", "mtp.draft_max", "mtp.draft_min", "mtp.draft_p_min")
    _add_settings(mtp, "mtp.cache_type_k", "mtp.cache_type_v")
    _add_settings(mtp, "draft.path", "draft.gpu_layers")

    srv = p.add_argument_group("server")
    _add_settings(srv, "server.host", "server.port")
    srv.add_argument(
        "--api-key",
        metavar="KEY",
        help="store KEY in the API key file (0600); the plan names the file, never the key "
        "(`-` reads the key from standard input, keeping it out of the process list)",
    )
    _add_settings(srv, "server.api_key_file", "desktop")
    groups = {"runtime": rt, "mtp": mtp, "draft": mtp, "server": srv, "desktop": srv}
    for path in _unplaced_settings(p):  # a newly declared setting needs no line here
        _add_settings(groups.get(path.split(".")[0], src), path)


def _catalogue_ids(section: str) -> str:
    """The ids of a catalogue file (``cpus``, ``gpus``), read without the pydantic models the
    catalogue's loaders import (the help must stay cheap); empty when it cannot be read."""
    from importlib import resources

    try:
        text = resources.files("mtpstudio.resources").joinpath(f"catalog/{section}.json")
        records = json.loads(text.read_text("utf-8")).get(section, [])
    except (OSError, ValueError, AttributeError):
        return ""
    return ", ".join(str(r.get("id")) for r in records if isinstance(r, dict))


def setting_options(path: str) -> dict[str, Any]:
    """The ``add_argument`` keywords of a declared Plan setting: its type or choices, its
    placeholder and help line, all from its declaration (``core.plan.settings``)."""
    declared = setting(path)
    options: dict[str, Any] = {"help": declared.cli_help}
    if declared.kind in ("int", "float"):
        options["type"] = int if declared.kind == "int" else float
    elif declared.kind == "path":
        options["type"] = Path
    elif declared.kind == "choice" and declared.choices is not None:
        options["choices"] = [member.value for member in declared.choices]
    elif declared.kind == "switch":
        options.update(action=argparse.BooleanOptionalAction, default=None)
    if declared.metavar is not None:
        options["metavar"] = declared.metavar
    return options


def _add_own(group: Any, path: str, **keywords: Any) -> None:
    """The option of a setting the CLI reads with its own steps (``own``): its spellings, help
    line and placeholder from its declaration, how it is read (``keywords``) from here."""
    declared = setting(path)
    options: dict[str, Any] = {"help": declared.cli_help, "metavar": declared.metavar}
    group.add_argument(*declared.cli, **(options | keywords))


def _add_settings(group: Any, *paths: str) -> None:
    """The declared settings' options, in this order (the help lists them so)."""
    for path in paths:
        group.add_argument(*setting(path).cli, **setting_options(path))


def _unplaced_settings(parser: argparse.ArgumentParser) -> list[str]:
    taken = {flag for action in parser._actions for flag in action.option_strings}
    return [
        path for path, s in SETTINGS.items() if s.cli and s.kind != "own" and s.cli[0] not in taken
    ]


def setting_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The declared Plan settings the options gave, by dotted path (``--ctx 128k`` ->
    ``runtime.ctx: 131072``); an option not given (None) is no change."""
    changes: dict[str, Any] = {}
    for path, declared in SETTINGS.items():
        own = declared.kind == "own"  # read by the command's own steps
        value = getattr(args, declared.dest, None) if declared.cli and not own else None
        if value is None:
            continue
        if declared.kind == "tokens":
            value = parse_token_count(str(value))
        elif declared.kind == "path":
            value = str(value)
        changes[path] = value
    return changes


def plan_and_changes(args: argparse.Namespace) -> tuple[Plan, dict[str, Any]]:
    """The Plan the options describe, and the dotted settings the options changed.

    A ``--engine`` path is probed now (as detection would, cached), so a bad one is refused
    here in one sentence and the plan gets the build's real flavour.
    """
    from mtpstudio.core.plan.io import load_plan, plan_with
    from mtpstudio.core.plan.schema import Plan

    base = load_plan(args.plan) if args.plan else Plan()
    changes = setting_changes(args)
    changes.update(_device_changes(args))
    if args.model is not None:
        changes["model.path"], changes["model.card"] = str(args.model), None
    elif args.demo is not None:
        from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD

        changes["model.path"], changes["model.card"] = None, args.demo or DEFAULT_MODEL_CARD
    if args.engine is not None:
        if args.engine in {f.value for f in EngineFlavour}:
            changes["engine.flavour"], changes["engine.binary"] = args.engine, None
        else:
            changes.update(_probed_engine(args.engine))
    if args.draft_model is not None and args.mtp is None:
        changes["mtp.enabled"] = False
    if args.n_cpu_moe is not None:
        changes["runtime.moe"] = "n_cpu_moe"
    if args.cpu_moe:
        changes["runtime.moe"] = "all_cpu"
    if args.fit is True:
        changes["runtime.moe"] = "fit"
    elif args.fit is False and base.runtime.moe.value == "fit":
        changes["runtime.moe"] = "n_cpu_moe"
    changes.update(_host_changes(changes))
    plan = plan_with(base, changes)
    for device in (plan.device, *plan.split.gpus):
        _check_device(device)
    return _with_key_file(plan, args, changes), changes


def _host_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """``--cpu`` as its catalogue id (a name works too; anything else is refused with the ids)
    and ``--ram`` checked (the spec is kept as given)."""
    from mtpstudio.core.usecases.pc_choice import catalogue_cpu_id, checked_ram

    out: dict[str, Any] = {}
    if changes.get("host.cpu") is not None:
        out["host.cpu"] = catalogue_cpu_id(str(changes["host.cpu"]))
    if changes.get("host.ram") is not None:
        out["host.ram"] = checked_ram(str(changes["host.ram"]), out.get("host.cpu"))
    return out


def _gpu_choice(text: str) -> str:
    """``--gpu``: auto, cpu, a device id, or a catalogue GPU by id or name (any case); anything
    else is refused with the catalogue's ids."""
    from mtpstudio.core.errors import CatalogError
    from mtpstudio.core.usecases.model_files import catalogue_gpu_id, similar_gpu_ids

    found = catalogue_gpu_id(text)
    if found is not None:
        return found
    if text in {"auto", "cpu"} or re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*\d+", text):
        return text
    near = similar_gpu_ids(text)
    raise CatalogError(
        f"unknown GPU {text!r}: not a device id or a catalogue GPU"
        + (f"; did you mean {' or '.join(near)}?" if near else ""),
        hint="Use auto (the GPU detection finds), cpu, a device id such as CUDA0, or a "
        "catalogue id (`mtpstudio plan --gpu list` lists them by vendor).",
    )


def _list_gpu_cards() -> int:
    from mtpstudio.core.catalog.gpus import VENDOR_TITLES
    from mtpstudio.core.usecases.model_files import gpu_cards_by_vendor

    for vendor, cards in gpu_cards_by_vendor().items():
        print(f"{VENDOR_TITLES[vendor]}:")
        for card in cards:
            backends = ", ".join(card.backends)
            print(
                f"  {card.id:<28} {card.label}  {card.bandwidth_gb_s:,.0f} GB/s, "
                f"PCIe {card.pcie_gen}.0 x{card.pcie_lanes}, {card.arch}; {backends}"
            )
    return 0


def _numbers(text: str, what: str) -> list[int]:
    parts = [p.strip() for p in str(text).replace("/", ",").split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise PlanError(
            f"{what} {text!r} is not a list of whole numbers",
            hint=f"Write it like {what} 3,1 (one number per device, in the engine's order).",
        )
    return [int(p) for p in parts]


def _device_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The device settings: ``--gpu`` (the first is the plan's device, more split the model),
    ``--rpc`` (each endpoint probed now unless a size is given), the split and the margins."""
    changes: dict[str, Any] = {}
    if args.gpu:
        gpus = [_gpu_choice(text) for text in args.gpu]
        changes["device"] = gpus[0]
        changes["split.gpus"] = gpus[1:]
    if args.rpc:
        changes["split.rpc"] = [rpc_entry(text) for text in args.rpc]
    if args.tensor_split is not None:
        changes["split.tensor_split"] = _numbers(args.tensor_split, "--tensor-split")
    if args.fit_margin is not None:
        margins = _numbers(args.fit_margin, "--fit-margin")
        changes["runtime.fit_margin_mib"] = margins[0]
        if len(margins) > 1:
            changes["split.fit_margins_mib"] = margins
    return changes


def rpc_entry(text: str) -> dict[str, Any]:
    """A ``--rpc HOST:PORT[=MIB]`` as the plan records it: probed now, or with its size given.

    Raises:
        RpcProbeError: the endpoint cannot be reached or does not answer as an rpc-server.
        PlanError: the size is not a whole number of MiB.
    """
    from mtpstudio.core.usecases.rpc_endpoint import parse_endpoint, probe_endpoint

    where, sep, size = text.partition("=")
    host, port = parse_endpoint(where)
    if sep:
        if not size.strip().isdigit():
            raise PlanError(
                f"--rpc {text!r}: {size!r} is not a size in MiB",
                hint="Write it as HOST:PORT=MIB, e.g. 192.168.1.20:50052=12288.",
            )
        return {"host": host, "port": port, "memory_mib": int(size)}
    return dict(probe_endpoint(where).entry)


def _probed_engine(text: str) -> dict[str, Any]:
    from mtpstudio.core.runner import SubprocessRunner
    from mtpstudio.core.usecases.engine_files import probe_engine_file

    path = Path(text).expanduser()
    if "/" not in text and not path.exists():
        raise PlanError(
            f"--engine {text!r} is neither upstream, ik nor the path of a llama-server binary",
            hint="Give upstream, ik, or a path such as ~/llama.cpp/build/bin/llama-server.",
        )
    info = probe_engine_file(path, SubprocessRunner())
    assert info.flavour is not None  # probe_engine_file refuses unknown builds
    return {"engine.flavour": info.flavour.value, "engine.binary": str(path.absolute())}


def _with_key_file(plan: Plan, args: argparse.Namespace, changes: dict[str, Any]) -> Plan:
    """Name a key file when the plan needs one; store ``--api-key`` in it (0600), never the plan."""
    from mtpstudio.core.plan.io import plan_with
    from mtpstudio.core.usecases.api_key import default_key_path, store_api_key

    key_file = plan.server.api_key_file
    if key_file is None and (args.api_key is not None or not plan.server.is_loopback):
        key_file = default_key_path()
        plan = plan_with(plan, {"server.api_key_file": str(key_file)})
        changes["server.api_key_file"] = str(key_file)
    if args.api_key is not None:
        assert key_file is not None
        key = sys.stdin.readline().strip() if args.api_key == "-" else args.api_key
        store_api_key(key_file, key)
    return plan


def _check_device(device: str) -> None:
    if device in {"auto", "cpu"} or device.upper().startswith(("CUDA", "VULKAN", "ROCM")):
        return
    from mtpstudio.core.usecases.model_files import gpu_card

    gpu_card(device)  # raises CatalogError naming the known ids


def _list_demo_cards() -> int:
    from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD
    from mtpstudio.core.usecases.model_cards import card_weight_bytes, model_cards_by_model

    for model, cards in model_cards_by_model().items():
        print(f"{cards[0].name} ({model}):")
        for card in cards:
            size = card_weight_bytes(card.card_id) / 1e9
            mark = "  (default)" if card.card_id == DEFAULT_MODEL_CARD else ""
            engine = f"  {card.recipe.loader_note}" if card.recipe.loader_note else ""
            print(f"  {card.card_id:<28} {size:6.2f} GB  {card.recipe.name}{engine}{mark}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Print what the workbench answers for the plan the options describe."""
    from mtpstudio.core.plan.io import save_plan

    if args.demo == "list":
        return _list_demo_cards()
    if args.gpu == ["list"]:
        return _list_gpu_cards()
    plan, changes = plan_and_changes(args)
    # the files are read before the planner loads: a bad one is refused quickly
    from mtpstudio.core.usecases.model_files import read_plan_models

    plan, info, draft = read_plan_models(plan, default_ctx="runtime.ctx" not in changes
                                         and args.plan is None)  # fmt: skip
    from mtpstudio.core.usecases.plan_text import (
        budget_report,
        model_summary_json,
        plan_report,
        speed_lines,
    )
    from mtpstudio.core.usecases.speed import load_speed_inputs
    from mtpstudio.core.usecases.workbench import Workbench, detect_for

    workbench = Workbench(speed=load_speed_inputs())
    workbench.set_report(detect_for(plan))
    workbench.set_model(info)
    workbench.set_draft(draft, plan.draft.path)
    defaults_line = ""
    if plan.model.path is None and args.plan is None:
        plan, defaults_line = workbench.demo_defaults(plan, frozenset(changes))
    result = workbench.result(plan)
    assert result is not None  # the model is read
    budget = replace(result.budget, warnings=result.warnings)
    effective = result.effective or plan
    verdict = result.verdict
    unloadable = workbench.unloadable_files(plan)
    if args.save:
        save_plan(plan, args.save)
    if args.json:
        fields = plan_json_fields(result, workbench.desktop_choices(plan), defaults_line)
        options = fields.pop("effective_options")
        model = str(plan.model.path) if plan.model.path is not None else None
        data = (
            {"model": model_summary_json(info, model), "unloadable_files": unloadable}
            | fields
            | budget.to_json(result.argv)
            | {"effective_options": options}
        )
        print(json.dumps(data, indent=2))
    else:
        desktop = None
        on_gpu = result.target.device.is_gpu or plan.is_split
        if result.target.device.is_gpu:
            desktop = result.budget.devices[0].segments.get("desktop")
        text = plan_report(
            effective,
            info,
            mtp_line=result.mtp_line,
            desktop_bytes=desktop,
            on_gpu=on_gpu,
        )
        sys.stdout.write(text)
        if defaults_line:
            print(f"  {defaults_line}")
        print(f"\nTarget: {result.target.source}")
        verdict_lines = verdict.lines() + [f"Not loadable: {u}" for u in unloadable]
        if result.speed is not None:
            verdict_lines += speed_lines(result.speed)
        sys.stdout.write(budget_report(budget, result.argv, verdict_lines))
        from mtpstudio.core.usecases.service import boot_words  # jinja2: only once planned

        boot = boot_words(result.resolved) if result.resolved is not None else []
        if boot:
            print("\nAs a system unit (starts at boot, before the desktop):")
            print("\n".join(f"  {line}" for line in boot))
        measured = workbench.last_measured(plan, result.target.device.id)
        if measured:
            print(f"\n{measured}")
        if args.save:
            print(f"\nPlan saved to {args.save}")
    if args.check and (not verdict.ok or unloadable):
        return EXIT_DOES_NOT_FIT
    return 0


def plan_json_fields(result: Any, desktop: list[Any], defaults_line: str) -> dict[str, Any]:
    """What the text report shows beyond the budget, as fields (scripts and the GUI read them)."""
    budget = result.budget
    eff = budget.effective
    effective = result.effective or result.plan
    return {
        "verdict": result.verdict.to_json(),
        "demo_defaults": defaults_line or None,
        "target": {"id": result.target.device.id, "source": result.target.source},
        "effective": {
            "ctx": eff.n_ctx,
            "ctx_per_slot": eff.n_ctx_seq,
            "mtp": eff.mtp_active,
            "mtp_reason": result.mtp_line,
        },
        "desktop_options": [c.to_json() for c in desktop],
        "cpu_expert_layers": sorted(eff.cpu_expert_layers),
        "speed": None if result.speed is None else result.speed.to_json(),
        "effective_options": effective.to_data(),
    }
