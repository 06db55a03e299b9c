"""The speed estimate beside the GPU kit's decode probes (issue 37).

A kit archive's decode probe generates ``tokens`` tokens greedily from a 32-token prompt on a
zero-weight card: every token's router ties, so all tokens pick the same experts
(``Routing.SAME``), and MTP's drafts are never right (acceptance 0: each step yields one token
for a verification pass and ``draft_max`` draft passes). ``GGML_CUDA_DISABLE_GRAPHS=1`` in the
probe's environment means CUDA graphs were off.
"""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.memory.budget import Budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import Plan
from mtpstudio.core.speed.acceptance import Acceptance
from mtpstudio.core.speed.cards import card_rates
from mtpstudio.core.speed.estimate import DecodeShape, SpeedEstimate, SpeedRates, estimate
from mtpstudio.core.speed.host_rates import ASSUMED_HOST
from mtpstudio.core.speed.traffic import ModelCost, Routing

PROBE_PROMPT_TOKENS = 32
"""The kit's decode probe prompt (``kit_runs._probe``)."""


@dataclass(frozen=True)
class ProbeEstimate:
    """One decode probe's configuration estimated: tok/s and what it rests on."""

    tok_s: float
    speed: SpeedEstimate


def probe_estimate(
    model: ModelInfo,
    plan: Plan,
    budget: Budget,
    target: TargetDevice,
    *,
    tokens: int,
    graphs: bool,
) -> ProbeEstimate:
    """The estimate of a kit decode probe: ``tokens`` tokens from the probe's prompt."""
    cost = ModelCost.from_model(model, ModelWeights.from_model(model))
    mtp = budget.effective.mtp_active
    rt = plan.runtime
    shape = DecodeShape(
        gpu=target.id,
        threads=ASSUMED_HOST.cores,
        cache_types=(rt.cache_type_k.value, rt.cache_type_v.value),
        mtp=mtp,
        depth=plan.mtp.draft_max,
        ubatch=rt.ubatch,
        op_offload=rt.op_offload,
        flash_attn=budget.effective.flash_attn,
    )
    speed = estimate(
        model,
        cost,
        budget.placement,
        shape,
        SpeedRates(ASSUMED_HOST, {target.id: card_rates(target)}),
        Acceptance(0.0, max(1, plan.mtp.draft_max), source="zero weights: never right"),
        context=PROBE_PROMPT_TOKENS + tokens // 2,
        routing=Routing.SAME,
        graphs=graphs,
        moe_cache=budget.moe_cache,
    )
    return ProbeEstimate(speed.decode_tok_s, speed)
