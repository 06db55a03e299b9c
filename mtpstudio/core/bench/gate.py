"""The correctness gate: at temperature 0, drafting on must produce the text drafting off does."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.bench.client import BenchClient, CompletionSample
from mtpstudio.core.bench.prompts import BenchPrompt
from mtpstudio.core.bench.target import (
    BenchProgress,
    BenchTarget,
    CancelToken,
    ProgressCallback,
    no_progress,
)
from mtpstudio.core.errors import BenchError

# Two candidate tokens closer than this (in log-probability) are a near tie: which one wins can
# flip with batch-size dependent rounding (a verify batch vs one token at a time).
NEAR_TIE_NATS = 0.05


@dataclass(frozen=True)
class GateMismatch:
    """Where two generations part: token index and the two tokens (id, piece) there.

    ``logprob_gap`` is |log p(off token) - log p(on token)| at that position, as the drafting-off
    server sees it (None when not measured, inf when the on token is not in its top list).
    """

    index: int
    token_on: tuple[int, str] | None
    token_off: tuple[int, str] | None
    same_prefix: str
    logprob_gap: float | None = None

    @property
    def near_tie(self) -> bool:
        return self.logprob_gap is not None and self.logprob_gap <= NEAR_TIE_NATS

    def to_dict(self) -> dict[str, Any]:
        gap = self.logprob_gap
        return {
            "index": self.index,
            "token_on": None if self.token_on is None else list(self.token_on),
            "token_off": None if self.token_off is None else list(self.token_off),
            "same_prefix": self.same_prefix,
            "logprob_gap": None if gap is None or gap == float("inf") else round(gap, 5),
            "near_tie": self.near_tie,
        }


@dataclass(frozen=True)
class GateItem:
    """One prompt's verdict."""

    category: str
    text_on: str
    text_off: str
    mismatch: GateMismatch | None
    ids_on: tuple[int, ...] | None = None
    ids_off: tuple[int, ...] | None = None

    @property
    def passed(self) -> bool:
        return self.mismatch is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "passed": self.passed,
            "mismatch": None if self.mismatch is None else self.mismatch.to_dict(),
            "text_on": self.text_on,
            "text_off": self.text_off,
        }


@dataclass
class GateReport:
    """Per-prompt verdicts; ``error`` says why the gate stopped early."""

    on_label: str
    off_label: str
    n_predict: int
    items: list[GateItem]
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.items) and all(i.passed for i in self.items)

    @property
    def only_near_ties(self) -> bool:
        """Every mismatch is a near tie: rounding, not drafting, chose the other token."""
        misses = [i.mismatch for i in self.items if i.mismatch is not None]
        return bool(misses) and all(m.near_tie for m in misses)

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafting_on": self.on_label,
            "drafting_off": self.off_label,
            "n_predict": self.n_predict,
            "passed": self.passed,
            "mismatches": sum(not i.passed for i in self.items),
            "only_near_ties": self.only_near_ties,
            "items": [i.to_dict() for i in self.items],
            "error": self.error,
        }


def first_difference(
    tokens_on: Sequence[tuple[int, str]], tokens_off: Sequence[tuple[int, str]]
) -> GateMismatch | None:
    """The first index where the token sequences differ (a shorter one ends there); pure."""
    for i, (x, y) in enumerate(zip(tokens_on, tokens_off, strict=False)):
        if x[0] != y[0]:
            return GateMismatch(i, x, y, "".join(p for _, p in tokens_on[:i]))
    if len(tokens_on) == len(tokens_off):
        return None
    i = min(len(tokens_on), len(tokens_off))
    return GateMismatch(
        i,
        tokens_on[i] if i < len(tokens_on) else None,
        tokens_off[i] if i < len(tokens_off) else None,
        "".join(p for _, p in tokens_on[:i]),
    )


def compare(
    category: str, a: CompletionSample, b: CompletionSample, client: BenchClient
) -> GateItem:
    """One prompt's verdict; ``client`` (the drafting-off server) tokenizes and weighs ties."""
    mismatch = None
    if a.token_ids is not None and b.token_ids is not None:
        if a.token_ids != b.token_ids:
            mismatch = _id_difference(client, a.token_ids, b.token_ids)
            if mismatch is not None and a.prompt is not None:
                mismatch = _with_gap(client, a.prompt, b.token_ids, mismatch)
    elif a.text != b.text:
        mismatch = first_difference(client.tokenize(a.text), client.tokenize(b.text))
        if mismatch is None:  # same tokens, different bytes: say where the text parts
            mismatch = GateMismatch(-1, None, None, _common_prefix(a.text, b.text))
    return GateItem(category, a.text, b.text, mismatch, a.token_ids, b.token_ids)


def gate_against(
    drafting_off: BenchTarget,
    on_samples: Sequence[CompletionSample],
    on_label: str,
    prompts: Sequence[BenchPrompt],
    n_predict: int = 192,
    *,
    cancel: CancelToken | None = None,
    progress: ProgressCallback = no_progress,
    timeout_s: float = 600.0,
) -> GateReport:
    """The gate when the drafting-on texts are already known (a benchmark's own samples at
    temperature 0): only the drafting-off server has to be up. Prompts without a drafting-on
    sample are generated on neither side."""
    report = GateReport(on_label, drafting_off.name, n_predict, [])
    cancel = cancel or CancelToken()
    by_category = {s.category: s for s in on_samples}
    todo = [p for p in prompts if p.category in by_category]
    with BenchClient(drafting_off, timeout_s) as off:
        try:
            for done, prompt in enumerate(todo, start=1):
                cancel.raise_if_cancelled()
                b = off.complete(prompt.category, prompt.prompt, n_predict, cancel=cancel)
                report.items.append(compare(prompt.category, by_category[prompt.category], b, off))
                progress(BenchProgress(drafting_off.name, "gate", prompt.category, done, len(todo)))
        except BenchError as exc:
            report.error = str(exc)
    return report


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def _id_difference(
    client: BenchClient, ids_on: tuple[int, ...], ids_off: tuple[int, ...]
) -> GateMismatch | None:
    """Compare the generated token ids themselves; pieces and prefix from /detokenize."""
    n = 0
    for x, y in zip(ids_on, ids_off, strict=False):
        if x != y:
            break
        n += 1
    if n == len(ids_on) == len(ids_off):
        return None

    def token(ids: tuple[int, ...]) -> tuple[int, str] | None:
        return (ids[n], client.detokenize([ids[n]])) if n < len(ids) else None

    return GateMismatch(n, token(ids_on), token(ids_off), client.detokenize(list(ids_on[:n])))


def _with_gap(
    off: BenchClient, prompt: str, ids_off: tuple[int, ...], m: GateMismatch
) -> GateMismatch:
    """Ask the drafting-off server how close its choice was at the parting position."""
    if m.token_on is None or m.token_off is None:
        return m
    try:
        top = off.top_logprobs(prompt, list(ids_off[: m.index]), 10)
    except BenchError:
        return m
    lp_off = top.get(m.token_off[0])
    lp_on = top.get(m.token_on[0])
    if lp_off is None:
        return m
    # Re-reading prompt and prefix as one batch rounds differently again, so the sign can flip
    # for a near tie; the size of the gap is what tells a tie from a real difference.
    gap = float("inf") if lp_on is None else abs(lp_off - lp_on)
    return dataclasses.replace(m, logprob_gap=gap)
