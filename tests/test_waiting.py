"""The test bench's waits: deadlines that stretch with the machine's load, waits on a condition."""

from __future__ import annotations

import os
import time

import pytest
from support.waiting import MAX_PATIENCE, PATIENCE_ENV, patience, scaled, wait_for


def test_patience_is_the_load_per_usable_cpu_between_one_and_ten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PATIENCE_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 0.0, 0.0))
    assert patience() == 4.0 and scaled(2.5) == 10.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})  # taskset -c 0
    assert patience() == 8.0
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.0, 0.0))
    assert patience() == 1.0  # an idle machine waits the plain time
    monkeypatch.setattr(os, "getloadavg", lambda: (500.0, 0.0, 0.0))
    assert patience() == MAX_PATIENCE
    monkeypatch.setenv(PATIENCE_ENV, "3")
    assert patience() == 3.0


def test_wait_for_returns_the_first_true_answer_or_the_last_false_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PATIENCE_ENV, "1")
    answers = iter([None, 0, "found", "later"])
    assert wait_for(lambda: next(answers), timeout=5, interval=0.001) == "found"
    start = time.monotonic()
    assert wait_for(lambda: [], timeout=0.2, interval=0.01) == []
    assert time.monotonic() - start >= 0.2  # it waited the whole time
