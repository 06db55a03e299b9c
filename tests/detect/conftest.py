"""Fixtures for detection tests: recorded machine trees, a fake NVML, counting/fake runners."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fixtures.detect.fake_nvml import FakeNvml
from fixtures.detect.machines import MACHINES, PCI_IDS, Roots, build_machine

from mtpstudio.core.detect.report import DetectionSources
from mtpstudio.core.runner import RunResult, SubprocessRunner


class CountingRunner:
    """The real runner, counting calls (thread-safe: probes run in a pool)."""

    def __init__(self) -> None:
        self._real = SubprocessRunner(env={"PATH": "/usr/bin:/bin"})
        self._lock = threading.Lock()
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        with self._lock:
            self.calls.append(tuple(argv))
        return self._real(argv, timeout)


class ScriptedRunner:
    """Answers commands from a table keyed by argv[0]; unknown programs are 'not installed'."""

    def __init__(self, answers: dict[str, RunResult] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        self.calls.append(tuple(argv))
        answer = self.answers.get(argv[0])
        if answer is None:
            return RunResult(tuple(argv), None, error="No such file or directory")
        return answer


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
