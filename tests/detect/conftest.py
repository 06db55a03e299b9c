"""Fixtures for detection tests: recorded machine trees and a fake NVML (the fake runners are
in support/runners.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fixtures.detect.fake_nvml import FakeNvml
from fixtures.detect.machines import MACHINES, PCI_IDS, Roots, build_machine
from support.runners import ScriptedRunner

from mtpstudio.core.detect.gather import DetectionSources
from mtpstudio.core.runner import RunResult


@pytest.fixture(scope="session")
def machine_roots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Roots]:
    """``machine_roots(name) -> Roots``: the recorded machine's trees, built once."""
    built: dict[str, Roots] = {}

    def get(name: str) -> Roots:
        if name not in built:
            built[name] = build_machine(name, tmp_path_factory.mktemp(name))
        return built[name]

    return get


@pytest.fixture
def machine_sources(
    machine_roots: Callable[[str], Roots],
) -> Callable[..., DetectionSources]:
    """``machine_sources(name, nvml=..., runner=...) -> DetectionSources`` for a machine.

    NVML defaults to the machine's recording (or "library not found" when it has none).
    """

    def make(
        name: str,
        nvml: FakeNvml | None = None,
        runner: Callable[[Sequence[str], float], RunResult] | None = None,
    ) -> DetectionSources:
        roots = machine_roots(name)
        if nvml is None:
            if roots.nvml is not None:
                nvml = FakeNvml(roots.nvml)
            else:
                nvml = FakeNvml({"devices": []}, init_error="NVMLError_LibraryNotFound")
        return DetectionSources(
            nvml=nvml,
            sys_root=roots.sys_root,
            proc_root=roots.proc_root,
            etc_root=roots.etc_root,
            environ=roots.environ,
            runner=runner or ScriptedRunner(),
            home=Path("/nonexistent-home"),
            system_dirs=(),
            opt_root=None,
            pci_ids=PCI_IDS,
        )

    return make


MACHINE_NAMES = sorted(MACHINES)
