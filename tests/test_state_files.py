"""Reading mtpstudio's own JSON files back: limits, one-sentence errors, caches set aside."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from mtpstudio.core.state_files import (
    MAX_DEPTH,
    SchemaError,
    StateFileError,
    depth,
    load_cache,
    read_json,
)


def test_depth_counts_lists_and_objects() -> None:
    assert depth(1) == 0
    assert depth([]) == 1
    assert depth({"a": [1, {"b": []}]}) == 4
    assert depth(json.loads("[" * 500 + "]" * 500)) == 500


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[" * 100_000, "nested too deeply"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
        ("{", "not valid JSON (line 1"),
        (b"\xff\xfe", "not UTF-8"),
        ("x" * (2 << 20), "larger than 1024 KiB"),
    ],
)
def test_bad_files_are_named_in_one_sentence(
    tmp_path: Path, content: str | bytes, words: str
) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(StateFileError) as info:
        read_json(path, "the test file", max_bytes=1 << 20)
    message = str(info.value)
    assert words in message and str(path) in message and "\n" not in message


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    os.mkfifo(path)
    with pytest.raises(StateFileError, match="not a regular file"):
        read_json(path, "the test file", max_bytes=1024)


def test_missing_is_none_and_good_files_read(tmp_path: Path) -> None:
    assert read_json(tmp_path / "nope.json", "x", max_bytes=10) is None
    (tmp_path / "ok.json").write_text('{"a": [1]}')
    assert read_json(tmp_path / "ok.json", "x", max_bytes=100) == {"a": [1]}


def shape(data: object) -> dict[str, object]:
    if not isinstance(data, dict):
        raise SchemaError("is not an object")
    return data


@pytest.mark.parametrize("content", ["[" * 100_000, "[1, 2]", "{"])
def test_a_damaged_cache_is_set_aside_and_named(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        assert load_cache(path, "the test cache", shape, max_bytes=1 << 20) is None
    assert not path.exists()
    aside = list(tmp_path.glob("cache.json.bad-*"))
    assert len(aside) == 1 and aside[0].read_text() == content  # kept for a look
    [record] = caplog.records
    assert str(path) in record.getMessage() and aside[0].name in record.getMessage()
    assert load_cache(path, "the test cache", shape, max_bytes=1 << 20) is None  # rebuilt
