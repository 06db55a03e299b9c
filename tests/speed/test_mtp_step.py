"""MTP's step as the engines run it: drafts cut short by p-min, a run's counters reproduced, the
passes of each engine, the verification's kernel path, and MTP auto decided by the estimate."""

from __future__ import annotations

import json

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory.placement import ModelWeights, place
from mtpstudio.core.speed.acceptance import (
    DEFAULT_ACCEPTANCE,
    PUBLISHED_CONTINUATION,
    Acceptance,
    continuation,
    draft_attempts,
    drafted_chances,
    from_counters,
)
from mtpstudio.core.speed.decode_rules import IK_RULES, UPSTREAM_RULES
from mtpstudio.core.speed.estimate import (
    CardRates,
    DecodeShape,
    SpeedRates,
    estimate,
    pass_time,
)
from mtpstudio.core.speed.host_rates import ASSUMED_HOST
from mtpstudio.core.speed.traffic import ModelCost, pass_load
from tests.support.cli import run_cli

MOE = "qwen3.6-35b-a3b-iq4_xs"
DENSE = "qwen3.6-27b-iq4_xs"
CARD = CardRates("CUDA0", "a 24 GB card", 1000e9, 25e9, "stated for the test", int_ops=40e12)


@pytest.mark.parametrize(
    ("predicted", "drafted", "accepted", "depth"),
    [(1728, 1120, 1052, 3), (2374, 1705, 1224, 3), (500, 120, 30, 2), (900, 700, 400, 4)],
)
def test_a_runs_counters_give_its_tokens_per_step_exactly(
    predicted: int, drafted: int, accepted: int, depth: int
) -> None:
    """predicted / (predicted − accepted) tokens a step, whatever the depth and p-min."""
    steps = predicted - accepted
    for first_kept in (False, True) if drafted >= steps else (False,):  # ik drafts one at least
        acc = from_counters(predicted, drafted, accepted, depth, 0.75, "a run", first_kept)
        assert acc is not None
        assert acc.tokens_per_step(depth, 0.75, first_kept) == pytest.approx(
            predicted / steps, rel=1e-6
        )
        assert acc.drafts_at(depth, 0.75, first_kept) == pytest.approx(
            min(depth, drafted / steps), rel=1e-6
        )
    assert from_counters(10, 0, 0, 3, 0.75, "no drafts") is None
    assert from_counters(10, 5, 10, 3, 0.75, "impossible") is None


def test_the_published_counters_are_the_default_and_p_min_stops_drafts() -> None:
    """The published setup drafted 1.66 tokens a step at depth 3 (not 3) and made 2.56 tokens a
    step (not 1 + 3 × 0.94 = 3.82); p-min 0 never stops, 1 always does."""
    assert DEFAULT_ACCEPTANCE.drafts_at(3, 0.75) == pytest.approx(1120 / 676, rel=1e-6)
    assert DEFAULT_ACCEPTANCE.tokens_per_step(3, 0.75) == pytest.approx(1728 / 676, rel=1e-6)
    assert continuation(0.75) == pytest.approx(PUBLISHED_CONTINUATION)
    assert continuation(0.0) == 1.0 and continuation(1.0) == 0.0
    assert continuation(0.5) > continuation(0.75) > continuation(0.9)
    assert DEFAULT_ACCEPTANCE.tokens_per_step(3, 0.0) > DEFAULT_ACCEPTANCE.tokens_per_step(3)


def test_ik_keeps_its_first_draft_and_upstream_may_draft_none() -> None:
    """Upstream checks p-min before keeping even its first token; ik keeps the first and stops
    after it when it fell below p-min (speculative.cpp of each pinned tree)."""
    q = 0.6
    assert drafted_chances(3, q) == pytest.approx([0.6, 0.36, 0.216])
    assert drafted_chances(3, q, first_kept=True) == pytest.approx([1.0, 0.36, 0.216])
    assert draft_attempts(3, q) == pytest.approx(1 + 0.6 + 0.36)  # the failing pass ran too
    assert draft_attempts(3, q, first_kept=True) == pytest.approx(0.6 + 0.36)


def _step(rules, p_min: float = 0.75, depth: int = 3) -> float:  # type: ignore[no-untyped-def]
    model = model_card_info(MOE)
    cost = ModelCost.from_model(
        model, ModelWeights.from_model(model), fused_moe=rules.fused_moe_graph
    )
    placement = place(model, gpu=True, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=True)
    shape = DecodeShape("CUDA0", 8, ("f16", "f16"), True, depth, 512, p_min=p_min)
    rates = SpeedRates(ASSUMED_HOST, {"CUDA0": CARD})
    acc = Acceptance(0.8, depth, p_min=p_min)
    speed = estimate(model, cost, placement, shape, rates, acc, rules=rules)
    return sum(speed.step_s.values())


def test_each_engine_runs_its_own_step() -> None:
    """The same plan's step differs by engine: upstream's verification with p-min 0 replays a
    CUDA graph (its batch never changes) and is cheaper than with p-min 0.75; ik's MoE
    verification never replays one, and its fused graph has fewer nodes."""
    assert _step(UPSTREAM_RULES, p_min=0.0, depth=3) < _step(UPSTREAM_RULES, p_min=0.0, depth=4)
    assert UPSTREAM_RULES.verify_graph_share(True, 0.0, [0.0, 1.0]) == 1.0
    assert 0 < UPSTREAM_RULES.verify_graph_share(True, 0.75, [0.3, 0.3, 0.4]) < 1
    assert IK_RULES.verify_graph_share(True, 0.0, [0.0, 1.0]) == 0.0
    assert IK_RULES.verify_graph_share(False, 0.0, [0.0, 1.0]) == 1.0
    model = model_card_info(MOE)
    up = ModelCost.from_model(model, ModelWeights.from_model(model))
    ik = ModelCost.from_model(model, ModelWeights.from_model(model), fused_moe=True)
    assert up.nodes is not None and ik.nodes is not None
    saved = up.nodes.block(0).nodes - ik.nodes.block(0).nodes
    assert saved == 2 + model.n_expert_used + 2  # fused up/gate, weighted sum, shared expert


def test_a_verification_batch_pays_the_mat_vec_kernels_arithmetic_per_token() -> None:
    """Up to 8 tokens the quantized mat-vec kernel reads the weights once and dequantises them
    again per token on the integer lanes: the first token's work hides under the reading, each
    further token adds the same, in inverse proportion to the lanes' rate; 9 tokens take the
    tiled kernels (bound by the bytes, the prompt path)."""
    model = model_card_info(DENSE)
    cost = ModelCost.from_model(model, ModelWeights.from_model(model))
    placement = place(model, gpu=True, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)

    def card_s(tokens: int, card: CardRates) -> float:
        load = pass_load(model, cost, placement, "CUDA0", blocks=range(model.n_layer),
                         tokens=tokens, outputs=tokens, depth=512,
                         cache_types=("f16", "f16"))  # fmt: skip
        return pass_time(load, SpeedRates(ASSUMED_HOST, {"CUDA0": card}), 8).parts["card"]

    slow = CardRates("CUDA0", "little arithmetic", 1000e9, 25e9, "stated", int_ops=10e12)
    reading = CardRates("CUDA0", "no integer rate stated", 1000e9, 25e9, "stated")
    assert card_s(1, slow) == pytest.approx(card_s(1, reading))  # one column: the bytes
    assert card_s(5, reading) == pytest.approx(card_s(1, reading), rel=0.01)
    for card in (slow, CARD):
        two, three = card_s(3, card) - card_s(1, card), card_s(5, card) - card_s(3, card)
        assert two > 0 and three == pytest.approx(two, rel=0.02)
    ratio = (card_s(5, slow) - card_s(1, slow)) / (card_s(5, CARD) - card_s(1, CARD))
    assert ratio == pytest.approx(4.0, rel=0.02)  # CARD has 4x the integer lanes' rate
    assert card_s(9, slow) < card_s(8, slow)


def test_mtp_auto_is_off_where_the_estimate_says_it_is_slower() -> None:
    """On this CPU (no card) at a low acceptance drafting costs more than it gains: MTP auto
    says so and is off; asked for, it stays on; at the published acceptance it gains and
    stays on; the plan for the published card keeps it on."""
    low = ("plan", "--demo", "--gpu", "cpu", "--acceptance", "0.4", "--json")
    cpu = run_cli(*low)
    assert cpu.returncode == 0, cpu.stderr
    data = json.loads(cpu.stdout)
    assert data["effective"]["mtp"] is False
    assert data["effective"]["mtp_reason"].startswith("MTP auto: off (the estimate is ")
    asked = json.loads(run_cli(*low, "--mtp").stdout)
    assert asked["effective"]["mtp"] is True
    assert asked["speed"]["decode_tok_s"] < asked["speed"]["decode_tok_s_without_mtp"]
    high = json.loads(run_cli("plan", "--demo", "--gpu", "cpu", "--json").stdout)
    assert high["effective"]["mtp"] is True
    assert high["speed"]["decode_tok_s"] > high["speed"]["decode_tok_s_without_mtp"]
    card = json.loads(run_cli("plan", "--demo", "--json").stdout)
    assert card["effective"]["mtp"] is True and card["speed"]["mtp"] is True
    assert card["speed"]["decode_tok_s"] > card["speed"]["decode_tok_s_without_mtp"]
