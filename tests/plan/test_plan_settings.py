"""Each Plan setting declared once: the Plan validates with it, the CLI's options come from it."""

from __future__ import annotations

import argparse
import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from mtpstudio.cli.main import build_parser
from mtpstudio.cli.plan import add_plan_options, plan_and_changes
from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.engines.flags import Option
from mtpstudio.core.errors import PlanError
from mtpstudio.core.model.defaults import ctx_for_model
from mtpstudio.core.plan.io import load_plan, plan_with
from mtpstudio.core.plan.schema import Plan, _Section, declared_fields
from mtpstudio.core.plan.settings import (
    MIN_CTX,
    SETTINGS,
    Setting,
    native_context,
    setting,
    within_native,
)

BOUNDED = [s for s in SETTINGS.values() if s.low is not None and s.high is not None]
"""The numbers a user sets, with the range every face offers."""


def _value_type(plan: Plan, path: str) -> Any:
    section, _, name = path.rpartition(".")
    model = getattr(plan, section) if section else plan
    annotation = type(model).model_fields[name].annotation
    args = [a for a in getattr(annotation, "__args__", (annotation,)) if a is not type(None)]
    return args[0]


def test_the_plan_validates_with_exactly_the_declared_settings() -> None:
    on_fields = declared_fields()
    assert set(on_fields) == set(SETTINGS)
    assert all(on_fields[path] is SETTINGS[path] for path in SETTINGS)


OWN = {
    "schema_version": "a Literal",
    "device": "--gpu, repeated for split.gpus",
    "model.path": "--model, beside --demo",
    "model.card": "--demo with an optional card",
    "engine.flavour": "--engine: a flavour or a binary",
    "engine.binary": "--engine with a path",
    "runtime.moe": "--fit / --cpu-moe",
    "runtime.op_offload": "no option",
    "outputs.export_dir": "export-unit --out",
    "outputs.service_name": "no option",
    "outputs.env_file": "no option",
    "outputs.launch_script": "no option",
    "split.gpus": "--gpu repeated",
    "split.rpc": "--rpc HOST:PORT[=MIB]",
    "split.tensor_split": "--tensor-split N,N",
    "split.fit_margins_mib": "--fit-margin MIB[,MIB]",
}
"""The settings the CLI reads with its own steps (or not at all), and why."""


def _leaves(model: type[Any] = Plan, prefix: str = "") -> list[str]:
    """Every leaf of the Plan by dotted path: a field that is not a section of its own."""
    found: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, _Section):
            found += _leaves(annotation, f"{prefix}{name}.")
        else:
            found.append(f"{prefix}{name}")
    return found


def test_every_leaf_of_the_plan_has_exactly_one_entry() -> None:
    leaves = _leaves()
    assert len(leaves) == len(set(leaves)) == len(SETTINGS) >= 46
    assert set(leaves) == set(SETTINGS)
    # the check sees a leaf without one
    assert "runtime.ctx" in leaves and "split.rpc" in leaves and "runtime" not in leaves


@pytest.mark.parametrize("path", list(SETTINGS))
def test_a_field_takes_its_default_and_sentence_from_its_entry(path: str) -> None:
    declared = SETTINGS[path]
    section, _, name = path.rpartition(".")
    model = type(getattr(Plan(), section)) if section else Plan
    field = model.model_fields[name]
    assert field.description == declared.tooltip and declared.tooltip.endswith(".")
    expected = [] if declared.default == () else declared.default
    assert field.get_default(call_default_factory=True) == expected


def test_each_spelling_and_label_belongs_to_one_entry() -> None:
    spellings = [flag for s in SETTINGS.values() for flag in s.cli]
    assert len(spellings) == len(set(spellings))
    labels = [s.label for s in SETTINGS.values() if s.label]
    assert len(labels) == len(set(labels))


def test_each_entry_names_real_engine_options() -> None:
    named = {option for s in SETTINGS.values() for option in s.engine}
    assert named <= {o.value for o in Option}
    assert {"ctx", "draft-max", "fit-target", "fit-margin", "rpc"} <= named


@pytest.mark.parametrize("declared", SETTINGS.values(), ids=list(SETTINGS))
def test_a_declaration_says_what_its_field_holds(declared: Setting) -> None:
    if declared.kind == "own":
        assert declared.path in OWN
        return
    assert declared.path not in OWN
    value_type = _value_type(Plan(), declared.path)
    expected = {int: ("int", "tokens"), float: ("float",), bool: ("switch",), str: ("text",)}
    if isinstance(value_type, type) and issubclass(value_type, StrEnum):
        assert declared.kind == "choice" and declared.choices is value_type
    elif value_type is Path:
        assert declared.kind == "path"
    else:
        assert declared.kind in expected[value_type]


def _within(path: str, value: Any) -> dict[str, Any]:
    """``path: value`` with what its cross-field rule needs (ubatch <= batch, min <= max)."""
    changes = {path: value}
    if path == "runtime.ubatch":
        changes["runtime.batch"] = setting("runtime.batch").high
    if path == "runtime.batch":
        changes["runtime.ubatch"] = setting("runtime.ubatch").low
    if path == "mtp.draft_min":
        changes["mtp.draft_max"] = setting("mtp.draft_max").high
    return changes


@pytest.mark.parametrize("declared", BOUNDED, ids=[s.path for s in BOUNDED])
def test_the_plan_takes_the_declared_bounds_and_nothing_beyond(declared: Setting) -> None:
    assert declared.low is not None and declared.high is not None
    nudge = declared.step if declared.kind == "float" else 1
    for edge in (declared.low, declared.high):
        plan = plan_with(Plan(), _within(declared.path, edge))
        section, _, name = declared.path.rpartition(".")
        assert getattr(getattr(plan, section), name) == edge
    with pytest.raises(PlanError, match=f"{declared.path}: "):
        plan_with(Plan(), _within(declared.path, declared.low - nudge))
    beyond = _within(declared.path, declared.high + nudge)
    if declared.bounded_by is None:
        with pytest.raises(PlanError, match=f"{declared.path}: "):
            plan_with(Plan(), beyond)
    else:  # bounded by another setting: its cross-field rule refuses it
        with pytest.raises(PlanError, match="must not exceed"):
            plan_with(Plan(), beyond)


def _spelled(action: argparse.Action) -> tuple[str, ...]:
    """The option strings as declared (a switch's ``--no-x`` is argparse's own)."""
    return tuple(flag for flag in action.option_strings if not flag.startswith("--no-"))


def _plan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mtpstudio plan")
    add_plan_options(parser)
    return parser


def test_the_cli_options_for_plan_settings_are_the_declarations() -> None:
    actions = {a.option_strings[0]: a for a in _plan_parser()._actions if a.option_strings}
    for declared in SETTINGS.values():
        if not declared.cli or declared.path == "runtime.moe":  # two options: see below
            continue
        action = actions[declared.cli[0]]
        assert _spelled(action) == declared.cli
        if declared.kind == "own":  # read by the command's own steps: its words still the entry's
            assert declared.path == "model.card" or action.help == declared.cli_help
            assert action.metavar == declared.metavar
            continue
        assert action.help == declared.cli_help and action.dest == declared.dest
        assert action.metavar == declared.metavar
        if declared.kind in ("int", "float"):
            assert action.type is {"int": int, "float": float}[declared.kind]
        elif declared.kind == "choice":
            assert declared.choices is not None
            assert action.choices == [m.value for m in declared.choices]
        elif declared.kind == "switch":
            assert isinstance(action, argparse.BooleanOptionalAction)
        elif declared.kind == "path":
            assert action.type is Path
        else:
            assert action.type is None and action.choices is None


def test_the_expert_placement_options_are_its_entrys() -> None:
    options = {flag for a in _plan_parser()._actions for flag in _spelled(a)}
    assert set(setting("runtime.moe").cli) <= options


def test_no_option_spells_a_declared_setting_another_way() -> None:
    """A hand-written option would be a second source: every option of the plan parser that
    writes a declared setting's destination is that declaration's."""
    dests = {s.dest: s for s in SETTINGS.values() if s.cli}
    for action in _plan_parser()._actions:
        if action.dest in dests:
            declared = dests[action.dest].cli
            assert _spelled(action) == declared or set(_spelled(action)) < set(declared)


def test_every_cli_option_reaches_its_setting() -> None:
    args = build_parser().parse_args(
        ["plan", "--demo", "--ctx", "8k", "--draft-max", "5", "--draft-min", "1",
         "--threads", "6", "--no-mtp", "--port", "9000", "--cache-type-k", "q4_0",
         "--draft-cache-type-v", "q8_0", "--n-gpu-layers", "3", "--desktop", "llvmpipe"]
    )  # fmt: skip
    plan, changes = plan_and_changes(args)
    assert plan.runtime.ctx == 8192 and plan.mtp.draft_max == 5 and plan.mtp.draft_min == 1
    assert plan.runtime.threads == 6 and plan.mtp.enabled is False
    assert plan.server.port == 9000 and plan.runtime.n_gpu_layers == 3
    assert plan.runtime.cache_type_k.value == "q4_0" and plan.mtp.cache_type_v.value == "q8_0"
    assert plan.desktop.value == "llvmpipe"
    assert changes["runtime.ctx"] == 8192


def _cli_error(flag: str, value: str) -> str:
    args = build_parser().parse_args(["plan", "--demo", flag, value])
    with pytest.raises(PlanError) as caught:
        plan_and_changes(args)
    return str(caught.value)


def _file_error(path: str, value: Any, tmp_path: Path) -> str:
    data: dict[str, Any] = {}
    node = data
    *parents, leaf = path.split(".")
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PlanError) as caught:
        load_plan(plan_file)
    return str(caught.value)


OUT_OF_BOUNDS = [
    ("runtime.ctx", 100, "runtime.ctx: ctx must be at least 256"),
    ("runtime.ctx", 8 * 1024 * 1024, "runtime.ctx: ctx must be at most 4194304"),
    ("mtp.draft_max", 17, "mtp.draft_max: draft max must be between 1 and 16"),
    ("mtp.draft_min", -1, "mtp.draft_min: draft min must not be negative"),
    ("mtp.draft_p_min", 1.5, "mtp.draft_p_min: draft p-min must be between 0 and 1"),
    ("runtime.parallel", 0, "runtime.parallel: parallel (slots) must be between 1 and 256"),
    ("runtime.threads", 0, "runtime.threads: threads must be between 1 and 100000"),
    ("runtime.n_cpu_moe", 5000, "runtime.n_cpu_moe: n_cpu_moe must be between 0 and 4096"),
    ("runtime.n_gpu_layers", -1, "runtime.n_gpu_layers: gpu layers must be between 0 and 4096"),
    ("draft.gpu_layers", 5000, "draft.gpu_layers: draft gpu layers must be between 0 and 4096"),
    ("server.port", 70000, "server.port: port must be between 1 and 65535"),
]


@pytest.mark.parametrize(("path", "value", "sentence"), OUT_OF_BOUNDS)
def test_out_of_bounds_is_the_same_sentence_from_the_cli_and_a_plan_file(
    path: str, value: Any, sentence: str, tmp_path: Path
) -> None:
    from_cli = _cli_error(setting(path).cli[0], str(value))
    from_file = _file_error(path, value, tmp_path)
    assert from_cli == from_file == f"invalid plan: {sentence}"


def test_the_fit_margin_sentence_names_its_unit(tmp_path: Path) -> None:
    text = _file_error("runtime.fit_margin_mib", 2**40, tmp_path)
    sentence = "fit margin must be between 0 and 1048576 MiB (1 TiB)"
    assert text == f"invalid plan: runtime.fit_margin_mib: {sentence}"


@pytest.mark.parametrize(
    ("native", "usable"), [(0, None), (100, None), (255, None), (256, 256), (4096, 4096)]
)
def test_one_rule_for_the_native_context(native: int, usable: int | None) -> None:
    assert native_context(native) == usable
    assert within_native(32768, native) == (usable or 32768)
    assert within_native(128, native) == 128  # never raised, only clamped
    assert native_context(native) is None or native_context(native) >= MIN_CTX


def test_a_default_context_follows_the_rule_on_a_real_card() -> None:
    info = load_model_info(Plan().model)
    assert ctx_for_model(10**6, info) == within_native(10**6, info.context_length)
    assert ctx_for_model(10**6, info) == info.context_length
