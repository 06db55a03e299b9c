"""The card's three coefficients are what the GPU kit's H100 decode probes solve to: the solve
runs again here, so a change to the model that moves them shows (and the constants with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.cuda_compare import TruthArchive, decode_probes
from devkit.speed_check import COEFFICIENTS, solve_card_coefficients
from mtpstudio.core.speed.estimate import PARAMS

KIT = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "cuda_truth"
    / "upstream-11434-cuda-nvidia-h100-80gb-hbm3-2026-11-27"
    / "cuda-truth.tar.gz"
)


def test_the_card_coefficients_are_the_kits_solve() -> None:
    probes = decode_probes(TruthArchive.read(KIT))
    assert {(p.card, p.graphs) for p in probes} == {
        ("qwen3.6-35b-a3b-iq4_xs", True),
        ("qwen3.6-35b-a3b-iq4_xs", False),
        ("qwen3.6-27b-iq4_xs", True),
    }
    solved = solve_card_coefficients(probes)
    for name in COEFFICIENTS:
        print(
            f"{name}: solved {getattr(solved, name):.4g}, in the code {getattr(PARAMS, name):.4g}"
        )
        assert getattr(PARAMS, name) == pytest.approx(getattr(solved, name), rel=0.002), name
    for probe in probes:  # the equations hold at the committed constants
        assert probe.estimated(PARAMS) == pytest.approx(probe.measured, rel=0.03)


def test_every_coefficient_is_listed_with_what_it_rests_on() -> None:
    import dataclasses

    from mtpstudio.core.speed.coefficients import coefficient_lines, coefficients
    from mtpstudio.core.speed.estimate import SpeedParams

    listed = {c.name for c in coefficients()}
    assert {f.name for f in dataclasses.fields(SpeedParams)} <= listed
    for c in coefficients():
        assert c.basis.startswith(("solved", "assumed", "fitted", "read", "the core")) or (
            "generated models" in c.basis
        ), c
    print("\n" + "\n".join(coefficient_lines()))
