"""Bench samples for pure tests: the figures a real upstream server returned (see test_client)."""

from __future__ import annotations

from mtpstudio.core.bench.client import CompletionSample
from mtpstudio.core.bench.results import BenchReport, BenchSettings, CategoryResult


def sample(
    category: str = "code_python",
    predicted: int = 16,
    draft: int = 12,
    accepted: int = 9,
    tps: float = 100.0,
    pp_tps: float = 1000.0,
    ttft_ms: float = 20.0,
    text: str = "x",
) -> CompletionSample:
    return CompletionSample(
        category=category,
        text=text,
        predicted_n=predicted,
        prompt_n=40,
        draft_n=draft,
        accepted_n=accepted,
        predicted_ms=predicted / tps * 1000.0,
        prompt_ms=40 / pp_tps * 1000.0,
        predicted_per_second=tps,
        prompt_per_second=pp_tps,
        ttft_ms=ttft_ms,
        wall_ms=ttft_ms + predicted / tps * 1000.0,
        client_decode_tps=tps * 0.99,
    )


def report(
    label: str = "A",
    rows: list[list[tuple[int, int, int, float]]] | None = None,
    drafting_requested: bool | None = True,
) -> BenchReport:
    """A report with one row per entry of ``rows`` (each a list of (pred, draft, acc, tps))."""
    rows = rows if rows is not None else [[(16, 12, 9, 100.0)], [(16, 10, 4, 80.0)]]
    out = BenchReport(
        label=label,
        flavour="upstream",
        base_url="http://127.0.0.1:9",
        endpoint="/completion",
        settings=BenchSettings(n_predict=16),
        started_at="2026-11-23T12:00:00+00:00",
        drafting_requested=drafting_requested,
    )
    names = ["code_python", "code_cpp", "explain_concept", "summarize", "qa_factual"]
    for name, repeats in zip(names, rows, strict=False):
        samples = tuple(sample(name, p, d, a, t) for p, d, a, t in repeats)
        out.categories.append(CategoryResult(name, samples))
        out.wall_s_total += sum(s.wall_ms for s in samples) / 1000.0
    return out
