"""Detection and flag probes replayed on recorded answers of real builds of each engine era.

The recordings (tests/fixtures/engines/, see its README) come from llama-server builds that CI
cannot build: today's ik_llama.cpp sources, beside the pinned sdists. Each answer is what the real
binary printed and returned for the same command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.engines.replay import ERAS, FIXTURES, RecordedRunner

from mtpstudio.core.detect.engines import EngineCandidate, identify_engine
from mtpstudio.core.engines.probe import FlagSpec, ProbeOutcome, probe_flag
from mtpstudio.core.plan.choices import EngineFlavour

IDENTITY = {
    "upstream-11434": (EngineFlavour.UPSTREAM, "0.6.0-dev", 0, "unknown"),
    "ik-0.1.5": (EngineFlavour.IK, "0", 0, "unknown"),
    "ik-8337e4c": (EngineFlavour.IK, "4840", 4840, "8337e4cd3"),
}


def _stand_in(tmp_path: Path) -> Path:
    """An executable file in place of the recorded binary (identify_engine stats it)."""
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nexit 99\n")
    binary.chmod(0o755)
    return binary


@pytest.mark.parametrize("era", ERAS)
def test_identify_engine_on_a_recorded_build(era: str, tmp_path: Path) -> None:
    runner = RecordedRunner(FIXTURES / era)
    info = identify_engine(EngineCandidate(_stand_in(tmp_path), "added"), runner, workers=2)
    assert runner.unrecorded == [], "a probe mtpstudio makes is missing from the recording"
    flavour, version, build_number, commit = IDENTITY[era]
    assert (info.flavour, info.version, info.build_number, info.commit) == (
        flavour,
        version,
        build_number,
        commit,
    )
    assert not any("did not finish" in p for p in info.problems)
    assert info.accepted_flags and info.rejected_flags


# (probe, era) -> accepted: the answers that tell the eras apart.
ERA_MARKERS = [
    (("-mtp",), {"upstream-11434": False, "ik-0.1.5": True, "ik-8337e4c": False}),
    (("--draft-max", "3"), {"upstream-11434": False, "ik-0.1.5": True, "ik-8337e4c": False}),
    (("--draft-p-min", "0.75"), {"upstream-11434": True, "ik-0.1.5": True, "ik-8337e4c": False}),
    (
        ("--spec-type", "mtp:n_max=1,p_min=0.0"),
        {"upstream-11434": False, "ik-0.1.5": False, "ik-8337e4c": True},
    ),
    (
        ("--spec-type", "draft-mtp"),
        {"upstream-11434": True, "ik-0.1.5": False, "ik-8337e4c": False},
    ),
    (
        ("--spec-draft-p-min", "0.0"),
        {"upstream-11434": True, "ik-0.1.5": False, "ik-8337e4c": False},
    ),
]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("probe", "accepted"), ERA_MARKERS, ids=lambda v: " ".join(v))
def test_value_syntax_probes_tell_the_eras_apart(
    era: str, probe: tuple[str, ...], accepted: dict[str, bool], tmp_path: Path
) -> None:
    spec = FlagSpec(probe[0], (probe[1:],), "era marker")
    result = probe_flag(_stand_in(tmp_path), spec, RecordedRunner(FIXTURES / era), 5.0)
    expected = ProbeOutcome.ACCEPTED if accepted[era] else ProbeOutcome.REJECTED
    assert result.outcome is expected, result.detail
