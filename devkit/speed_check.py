"""The speed estimate beside the GPU kit's decode probes (issue 37).

A kit archive's decode probe generates ``tokens`` tokens greedily from a 32-token prompt on a
zero-weight card: every token's router ties, so all tokens pick the same experts
(``Routing.SAME``), and MTP's drafts are never right (acceptance 0: each step yields one token
for a verification pass and ``draft_max`` draft passes). ``GGML_CUDA_DISABLE_GRAPHS=1`` in the
probe's environment means CUDA graphs were off.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.speed.acceptance import Acceptance
from mtpstudio.core.speed.cards import card_rates
from mtpstudio.core.speed.estimate import (
    PARAMS,
    DecodeShape,
    SpeedEstimate,
    SpeedParams,
    SpeedRates,
    estimate,
)
from mtpstudio.core.speed.host_rates import ASSUMED_HOST
from mtpstudio.core.speed.traffic import ModelCost, Routing

PROBE_PROMPT_TOKENS = 32
"""The kit's decode probe prompt (``kit_runs._probe``)."""
PROBE_P_MIN = 0.0
"""The kit's argv sets no p-min: upstream's default, 0, drafts in full (each probe drafted
3 tokens a step: 759 in 253 steps)."""


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
    params: SpeedParams = PARAMS,
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
        p_min=PROBE_P_MIN,
    )
    depth = max(1, plan.mtp.draft_max)
    speed = estimate(
        model,
        cost,
        budget.placement,
        shape,
        SpeedRates(ASSUMED_HOST, {target.id: card_rates(target)}),
        Acceptance(
            0.0,
            depth,
            source="zero weights: never right, drafted in full",
            p_min=PROBE_P_MIN,
            drafts_per_step=float(depth),
        ),
        context=PROBE_PROMPT_TOKENS + tokens // 2,
        routing=Routing.SAME,
        graphs=graphs,
        moe_cache=budget.moe_cache,
        params=params,
    )
    return ProbeEstimate(speed.decode_tok_s, speed)


@dataclass(frozen=True)
class DecodeProbe:
    """One kit decode probe as an equation: its setup and the tok/s it measured."""

    card: str
    model: ModelInfo
    plan: Plan
    budget: Budget
    target: TargetDevice
    tokens: int
    graphs: bool
    measured: float

    def estimated(self, params: SpeedParams) -> float:
        return probe_estimate(
            self.model,
            self.plan,
            self.budget,
            self.target,
            tokens=self.tokens,
            graphs=self.graphs,
            params=params,
        ).tok_s


COEFFICIENTS = ("card_node_s", "card_node_eager_s", "card_column_ops")
"""The card coefficients the kit's decode probes solve (``estimate.SpeedParams``)."""


def solve_card_coefficients(
    probes: list[DecodeProbe], start: SpeedParams = PARAMS, rounds: int = 30
) -> SpeedParams:
    """The three card coefficients that make the estimates of the kit's kinds of decode probe
    (a card, a configuration, graphs on or off; the median of each kind's runs) equal what
    they measured: Gauss-Newton on the seconds per token, the Jacobian by finite differences
    (three kinds: solved exactly; more, as the kit's decode table gives: least squares)."""
    groups: dict[tuple[str, str, bool], list[DecodeProbe]] = {}
    for p in probes:
        groups.setdefault((p.card, p.plan.to_json(), p.graphs), []).append(p)
    equations = [(g[0], statistics.median(p.measured for p in g)) for g in groups.values()]
    if len(equations) < len(COEFFICIENTS):
        raise ValueError(f"{len(equations)} kinds of decode probe; the solve needs 3 at least")
    params = start

    def residuals(at: SpeedParams) -> list[float]:
        return [1.0 / probe.estimated(at) - 1.0 / tok_s for probe, tok_s in equations]

    for _ in range(rounds):
        now = residuals(params)
        if max(abs(r) for r in now) < 1e-9:
            break
        columns = []
        for name in COEFFICIENTS:
            value = getattr(params, name)
            step = value * 1e-3
            moved = residuals(replace(params, **{name: value + step}))
            columns.append([(m - r) / step for m, r in zip(moved, now, strict=True)])
        normal = [[sum(a * b for a, b in zip(ci, cj, strict=True)) for cj in columns]
                  for ci in columns]  # fmt: skip
        right = [sum(a * r for a, r in zip(ci, now, strict=True)) for ci in columns]
        delta = _solve3(normal, right)
        params = replace(
            params,
            **{
                name: max(getattr(params, name) - d, getattr(params, name) * 0.1)
                for name, d in zip(COEFFICIENTS, delta, strict=True)
            },
        )
    return params


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """``a x = b`` for a 3×3 ``a`` (Cramer's rule)."""

    def det(m: list[list[float]]) -> float:
        return (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        )

    whole = det(a)
    if abs(whole) < 1e-30:
        raise ValueError("the decode probes do not pin the three coefficients")
    out = []
    for col in range(3):
        m = [row[:] for row in a]
        for i in range(3):
            m[i][col] = b[i]
        out.append(det(m) / whole)
    return out
