"""A verification pass of a few tokens on the CPU, as each engine's own passes measured it: the
recorded ``llama-bench -p 1,2,3,4`` of the zero-weight Qwen3.6-35B-A3B (``devkit/cpu_columns``)
beside the estimate with the committed column share, and the share's effect on a pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from devkit.cpu_columns import MODEL_CARD, RECORDINGS, estimated_pass, read_recording
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.profiles import documented_profile
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.speed.cpu_kernels import kernels_for


@pytest.mark.parametrize("flavour", ["upstream", "ik"])
def test_each_engines_passes_of_one_to_four_tokens_beside_the_estimate(flavour: str) -> None:
    recording = read_recording(RECORDINGS[flavour])
    model = model_card_info(MODEL_CARD)
    kernels = kernels_for(documented_profile(EngineFlavour(flavour)).speed.cpu_kernels)
    every_token_full = replace(kernels, column_share=1.0)
    print()
    for n, measured in sorted(recording.seconds.items()):
        est = estimated_pass(model, kernels, flavour, recording.host, recording.threads, n)
        full = estimated_pass(
            model, every_token_full, flavour, recording.host, recording.threads, n
        )
        print(f"{flavour} {n} tokens: measured {measured * 1e3:6.1f} ms, estimate "
              f"{est * 1e3:6.1f} ms (every token at the full rate: {full * 1e3:6.1f})")  # fmt: skip
        assert est == pytest.approx(measured, rel=0.25)  # ik: 4 tokens run faster than 3
        if n > 2:  # charging every token the full rate is far off the engine
            assert full > 1.5 * measured
    assert recording.engine.startswith("ik-" if flavour == "ik" else "upstream-")


def test_a_further_tokens_products_cost_the_column_share() -> None:
    """With the tokens on the same weights, a pass of n tokens costs the products once and
    ``column_share`` of them n - 1 times more, beside what grows with each token anyway."""
    model = model_card_info(MODEL_CARD)
    recording = read_recording(RECORDINGS["upstream"])
    base = kernels_for("ggml")

    def growth(share: float) -> float:
        k = replace(base, column_share=share)
        host, threads = recording.host, recording.threads
        return estimated_pass(model, k, "upstream", host, threads, 3) - estimated_pass(
            model, k, "upstream", host, threads, 1
        )

    assert growth(0.5) - growth(0.0) == pytest.approx((growth(1.0) - growth(0.0)) / 2, rel=1e-6)
    assert growth(1.0) > growth(0.2) > growth(0.0) > 0
