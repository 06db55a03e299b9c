"""The load-log reader on real logs of each engine era (tests/fixtures/engines/, see its README)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mtpstudio.core.server.load_log import parse_load_log

ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
ERAS = ("upstream-11434", "ik-0.1.5", "ik-8337e4c")
_SIZE = re.compile(r"=\s+([\d.]+) MiB")


def _sizes(text: str, pattern: str) -> list[float]:
    """The MiB figures of lines matching ``pattern``, read independently of the parser."""
    return [
        float(m.group(1))
        for line in text.splitlines()
        if re.search(pattern, line) and (m := _SIZE.search(line))
    ]


@pytest.mark.parametrize("era", ERAS)
def test_draft_model_pair_in_every_era(era: str) -> None:
    text = (ENGINES / era / "draft-run" / "server.log").read_text(encoding="utf-8")
    report = parse_load_log(text)
    weights = _sizes(text, r"model buffer size|llm_load_tensors:\s+\S+ buffer size")
    assert [*report.model.values(), *report.draft_model.values()] == weights
    main, draft = report.context("main"), report.context("draft")
    assert main is not None and draft is not None
    assert (main.n_ctx, draft.n_ctx) == (512, 512)
    assert [*main.kv.values(), *draft.kv.values()] == _sizes(text, r"KV buffer size")
    assert report.loaded and report.drafting == "draft" and report.error_lines == []


@pytest.mark.parametrize("era", ["ik-0.1.5", "ik-8337e4c"])
def test_ik_hybrid_trunk_in_both_ik_eras(era: str) -> None:
    text = (ENGINES / era / "hybrid-run" / "server.log").read_text(encoding="utf-8")
    report = parse_load_log(text)
    assert report.model == {"CPU": _sizes(text, r"llm_load_tensors:\s+CPU buffer size")[0]}
    main = report.context("main")
    assert main is not None and main.n_ctx == 512
    assert main.kv == {"CPU": _sizes(text, r"KV buffer size")[0]}
    assert main.compute == {"CPU": max(_sizes(text, r"compute buffer size"))}
    assert report.loaded and report.drafting is None and not report.out_of_memory


def test_pinned_ik_refuses_the_qwen35moe_mtp_block() -> None:
    text = (ENGINES / "ik-0.1.5" / "mtp-run-refused" / "server.log").read_text(encoding="utf-8")
    report = parse_load_log(text)
    assert not report.loaded
    assert any("tensor 'blk.2.attn_qkv.weight' not found" in line for line in report.error_lines)
