"""The nine benchmark categories and their prompts (resources/bench/prompts.json)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from mtpstudio.core.errors import BenchError
from mtpstudio.core.state_files import StateFileError, parse_json, read_json

CATEGORIES: tuple[str, ...] = (
    "code_python",
    "code_cpp",
    "explain_concept",
    "summarize",
    "qa_factual",
    "translation",
    "creative_short",
    "stepwise_math",
    "long_code_review",
)
_RESOURCE = "bench/prompts.json"
PROMPTS_MAX_BYTES = 16 * 1024 * 1024
# The discarded warm-up request uses a prompt of its own: an engine that remembers earlier
# generations (ik's drafter does) would otherwise get the first category for free.
WARMUP_PROMPT = "Write two friendly sentences to welcome a new colleague to the team.\n"


@dataclass(frozen=True)
class BenchPrompt:
    """One category's prompt."""

    category: str
    prompt: str


WARMUP = BenchPrompt("warmup", WARMUP_PROMPT)


def parse_prompts(text: str, where: str = "prompts") -> tuple[BenchPrompt, ...]:
    """Prompts from JSON text ``{"categories": [{"category", "prompt"}, ...]}``, in file order."""
    try:
        data = parse_json(text, where)
    except StateFileError as exc:
        raise BenchError(str(exc)) from None
    return _prompts_from(data, where)


def _prompts_from(data: Any, where: str) -> tuple[BenchPrompt, ...]:
    items = data.get("categories") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise BenchError(f"{where} has no 'categories' list")
    out: list[BenchPrompt] = []
    for item in items:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("category"), str)
            and isinstance(item.get("prompt"), str)
            and item["prompt"].strip()
        ):
            raise BenchError(f"{where}: every entry needs a 'category' and a non-empty 'prompt'")
        out.append(BenchPrompt(item["category"], item["prompt"]))
    names = [p.category for p in out]
    if len(set(names)) != len(names):
        raise BenchError(f"{where}: a category appears twice")
    return tuple(out)


def load_prompts(path: Path | None = None) -> tuple[BenchPrompt, ...]:
    """The shipped nine-category prompts, or those of ``path``."""
    if path is None:
        text = resources.files("mtpstudio.resources").joinpath(_RESOURCE).read_text("utf-8")
        return parse_prompts(text, "the shipped bench prompts")
    try:
        data = read_json(path, "prompts file", max_bytes=PROMPTS_MAX_BYTES)
    except StateFileError as exc:
        raise BenchError(str(exc), hint="Give a JSON file with a 'categories' list.") from None
    if data is None:
        raise BenchError(f"cannot read prompts file {path}: it does not exist")
    return _prompts_from(data, str(path))


def select(
    prompts: tuple[BenchPrompt, ...], categories: list[str] | None
) -> tuple[BenchPrompt, ...]:
    """Only the named categories (in the prompts' order); all when ``categories`` is empty."""
    if not categories:
        return prompts
    known = {p.category for p in prompts}
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise BenchError(
            f"unknown bench category {unknown[0]!r}",
            hint="Choose from: " + ", ".join(p.category for p in prompts) + ".",
        )
    return tuple(p for p in prompts if p.category in categories)
