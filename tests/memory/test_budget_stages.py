"""compute_budget reads as named stages, each short enough to hold in one's head."""

import ast
from pathlib import Path

import mtpstudio.core.memory.budget as budget_module

LONGEST_STAGE = 80


def _function_lengths(source: str) -> dict[str, int]:
    tree = ast.parse(source)
    return {
        node.name: (node.end_lineno or node.lineno) - node.lineno + 1
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }


def test_every_function_of_the_budget_is_at_most_80_lines() -> None:
    lengths = _function_lengths(Path(budget_module.__file__).read_text(encoding="utf-8"))
    too_long = {name: n for name, n in lengths.items() if n > LONGEST_STAGE}
    assert "compute_budget" in lengths
    assert not too_long, f"split these into named stages: {too_long}"


def test_the_length_check_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST_STAGE))
    lengths = _function_lengths(f"def long() -> None:\n{body}\n")
    assert lengths["long"] == LONGEST_STAGE + 1
