"""Integration-test reporting: the memory-model accuracy table goes into the run's summary."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    module = next(
        (m for name, m in sys.modules.items() if name.endswith("test_budget_accuracy")), None
    )
    lines = module.accuracy_table() if module is not None else []
    if lines:
        terminalreporter.section("memory model vs real engines")
        for line in lines:
            terminalreporter.write_line(line)
