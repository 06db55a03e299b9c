"""The shipped prompts: the nine categories in the published order, each with its own prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpstudio.core.bench.prompts import CATEGORIES, WARMUP, load_prompts, parse_prompts, select
from mtpstudio.core.errors import BenchError


def test_shipped_prompts_are_the_nine_categories() -> None:
    prompts = load_prompts()
    assert tuple(p.category for p in prompts) == CATEGORIES
    assert len({p.prompt for p in prompts}) == 9
    long_review = next(p for p in prompts if p.category == "long_code_review")
    short = [p for p in prompts if p.category not in ("long_code_review", "summarize")]
    assert len(long_review.prompt) > 2 * max(len(p.prompt) for p in short)


def test_warmup_prompt_is_none_of_the_categories() -> None:
    assert WARMUP.prompt not in {p.prompt for p in load_prompts()}
    assert WARMUP.category not in CATEGORIES


def test_select_keeps_order_and_refuses_unknown() -> None:
    prompts = load_prompts()
    chosen = select(prompts, ["summarize", "code_cpp"])
    assert [p.category for p in chosen] == ["code_cpp", "summarize"]
    with pytest.raises(BenchError, match="unknown bench category 'poetry'") as info:
        select(prompts, ["poetry"])
    assert info.value.hint and "code_python" in info.value.hint


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"categories": []}', "no 'categories'"),
        ('{"categories": [{"category": "a"}]}', "non-empty 'prompt'"),
        ('{"categories": [{"category": "a", "prompt": "x"}, {"category": "a", "prompt": "y"}]}',
         "appears twice"),
    ],
)  # fmt: skip
def test_bad_prompt_files_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(BenchError, match=message):
        parse_prompts(text)


def test_missing_prompts_file(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="cannot read prompts file"):
        load_prompts(tmp_path / "nope.json")
