"""The quant cards against the real tool: the pinned ``llama-quantize`` (upstream b11434, built
with the engines; ik_llama.cpp 8337e4c for its own types) quantizes a reduced model of each
layout (35B-A3B and 27B shapes, fewer layers and experts) to every type, with an importance
matrix as published quants are made, and every tensor's type must be the card's; ``--dry-run``
on each full-size card must print the card's types too. ``pytest -s`` prints a line each."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.quantize_tool import (
    F16,
    card_types,
    printed_types,
    quantize,
    reduced,
    write_imatrix,
    write_model,
    written_types,
)
from support.servers import EngineMissingError, engine_binary

from mtpstudio.core.catalog.models import model_card
from mtpstudio.core.catalog.qwen36 import QWEN36_MODELS
from mtpstudio.core.catalog.spec import IK_QUANTS, QUANT_MIXES, ModelCardSpec

LAYOUTS = {spec.model_id: spec for spec in QWEN36_MODELS}
CASES = [(model, quant) for model in LAYOUTS for quant in QUANT_MIXES if quant != "BF16"]


def _tool(quant: str) -> Path:
    name = "ik" if quant in IK_QUANTS else "upstream"
    try:
        return engine_binary(name, "llama-quantize")
    except EngineMissingError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def reduced_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each layout's reduced F16 model and its importance matrix."""
    folder = tmp_path_factory.mktemp("quantize")
    made = {}
    for model, spec in LAYOUTS.items():
        small = reduced(spec)
        made[model] = (
            write_model(small, folder / f"{model} reduced F16.gguf"),
            write_imatrix(small, folder / f"{model}.imatrix.dat"),
        )
    return made


@pytest.fixture(scope="module")
def full_size_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each layout at full size as its F16 conversion, zero weights in a sparse file (a dry
    run reads no weight, but the tool checks that every tensor lies inside the file), and its
    importance matrix (ik checks each entry's size even in a dry run)."""
    folder = tmp_path_factory.mktemp("full size")
    made = {}
    for model, spec in LAYOUTS.items():
        f16 = replace(spec, recipe=F16, card_id=f"{model}-f16")
        made[model] = (
            write_model(f16, folder / f"{model}-F16.gguf"),
            write_imatrix(f16, folder / f"{model}.imatrix.dat"),
        )
    return made


def _mismatches(card: dict[str, str], tool: dict[str, str]) -> dict[str, tuple[str, str]]:
    assert set(card) == set(tool), sorted(set(card) ^ set(tool))
    return {name: (card[name], tool[name]) for name in card if card[name] != tool[name]}


@pytest.mark.parametrize(("model", "quant"), CASES, ids=[f"{m}-{q}" for m, q in CASES])
def test_the_tool_types_every_tensor_of_a_reduced_model_as_the_card_does(
    model: str, quant: str, reduced_models: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    source, imatrix = reduced_models[model]
    out = tmp_path / f"{model}-{quant}.gguf"
    done = quantize(_tool(quant), source, out, quant, imatrix)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wrong = _mismatches(card_types(reduced(LAYOUTS[model]), quant), written_types(out))
    print(f"{model} {quant} quantized (reduced): {len(wrong)} mismatches")
    assert not wrong, wrong


@pytest.mark.parametrize(("model", "quant"), CASES, ids=[f"{m}-{q}" for m, q in CASES])
def test_the_tools_dry_run_on_the_full_size_card_prints_the_cards_types(
    model: str,
    quant: str,
    full_size_models: dict[str, tuple[Path, Path]],
) -> None:
    spec: ModelCardSpec = model_card(f"{model}-{QUANT_MIXES[quant].slug}")
    source, imatrix = full_size_models[model]
    done = quantize(_tool(quant), source, Path(), quant, imatrix, dry_run=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = printed_types(done.stdout + done.stderr)
    wrong = _mismatches(card_types(spec, quant), printed)
    print(f"{model} {quant} --dry-run (full size): {len(wrong)} mismatches")
    assert not wrong, wrong
