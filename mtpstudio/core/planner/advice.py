"""What a lever gives in speed: where the experts run, MTP kept, and the one ranking key.

Users change a plan for tokens/s. A lever's speed is the speed model's estimate of the plan it
makes (``core.speed``: the bytes each token reads where they live, the devices' rates, MTP's
acceptance); ``speed_key`` is the one place a ranking reads it, so the plan's Fit lines, the
budget page's levers and the Desktop VRAM page all follow the estimate. Memory spare is the
second column (``planning._rank``), never part of the key. The words say where the experts
run as well, since that is what the user changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.placement import PartialKind
from mtpstudio.core.model.info import ModelInfo

PARTIAL_SHARE = {PartialKind.UP: 1 / 3, PartialKind.GATE: 2 / 3, PartialKind.ATTN: 0.0}
"""The share of a split layer's experts that stays on the GPU (up; up and gate; none)."""


@dataclass(frozen=True)
class Standing:
    """Where a plan's weights run, as speed sees it.

    Attributes:
        n_layer: trunk layers of the model.
        gpu_layers: trunk layers on the GPU (the rest run wholly on the CPU).
        expert_layers: trunk layers whose experts run on the GPU (a split layer by its share;
            a dense model: its layers on the GPU).
        full_expert_layers: of them, the layers with every expert on the GPU.
        mtp: the plan drafts with MTP.
        fits: the plan fits the device.
        spare_bytes: what the tightest device keeps free (0 when short).
        moe: the model has routed experts.
        tok_s: the estimated decode tokens per second (None: not estimated).
    """

    n_layer: int
    gpu_layers: int
    expert_layers: float
    full_expert_layers: int
    mtp: bool
    fits: bool
    spare_bytes: int
    moe: bool
    tok_s: float | None = None


def standing(budget: Budget, model: ModelInfo, mtp: bool, tok_s: float | None = None) -> Standing:
    """Where the weights of the plan behind ``budget`` run, and its estimated tokens/s."""
    n = model.n_layer
    placement = budget.placement
    on_gpu = [i for i in range(n) if i in placement.gpu_layers]
    partial = placement.partial if placement.partial and placement.partial.layer < n else None
    full = [i for i in on_gpu if i not in placement.cpu_expert_layers]
    if partial is not None and partial.layer in full:
        full.remove(partial.layer)
    share = PARTIAL_SHARE[partial.kind] if partial is not None else 0.0
    spare = [d.free_bytes for d in budget.devices if d.free_bytes is not None]
    return Standing(
        n_layer=n,
        gpu_layers=len(on_gpu),
        expert_layers=len(full) + share,
        full_expert_layers=len(full),
        mtp=mtp,
        fits=budget.fits is not False,
        spare_bytes=max(0, min(spare, default=0)),
        moe=model.is_moe,
        tok_s=tok_s,
    )


SAME_SPEED = 0.002
"""Estimates closer than this share are the same speed (memory spare decides between them)."""


def speed_key(s: Standing) -> tuple[float, ...]:
    """Larger is faster: the estimated decode tokens per second (rounded to ``SAME_SPEED``,
    so levers that move nothing tie and memory spare, the second column, decides).

    The one ranking key of the levers. Without an estimate, what decides speed on a 12-16 GB
    card: MTP kept, fewest whole layers on the CPU, most experts on the GPU.
    """
    if s.tok_s is not None and s.tok_s > 0:
        return (round(math.log(s.tok_s) / math.log1p(SAME_SPEED)),)
    return (1.0 if s.mtp else 0.0, float(s.gpu_layers), s.expert_layers)


def faster(now: Standing, then: Standing) -> bool:
    """``then`` is faster than ``now`` by more than ``SAME_SPEED``."""
    return speed_key(then) > speed_key(now)


def tok_s_words(now: Standing, then: Standing) -> str:
    """``≈ +9 % tok/s`` (``≈ −3 % tok/s``; empty without both estimates or when the same)."""
    if now.tok_s is None or then.tok_s is None or now.tok_s <= 0:
        return ""
    change = then.tok_s / now.tok_s - 1.0
    if abs(change) < SAME_SPEED:
        return "≈ same tok/s"
    sign = "+" if change > 0 else "−"
    digits = 1 if abs(change) < 0.095 else 0
    return f"≈ {sign}{abs(change) * 100:.{digits}f} % tok/s"


def gain_words(now: Standing, then: Standing) -> str:
    """What a change does to speed, in words:
    ``2 more expert layers on the GPU, MTP kept, ≈ +9 % tok/s``."""
    what = "expert layers" if then.moe else "layers"
    if then.moe:
        delta = then.full_expert_layers - now.full_expert_layers
        part = then.expert_layers - then.full_expert_layers
        part_now = now.expert_layers - now.full_expert_layers
    else:
        delta, part, part_now = then.gpu_layers - now.gpu_layers, 0.0, 0.0
    layers_delta = then.gpu_layers - now.gpu_layers
    words: list[str] = []
    if then.moe and layers_delta:
        words.append(_count(layers_delta, "layers", "on the GPU"))
    if delta:
        words.append(_count(delta, what, "on the GPU"))
    elif part > part_now + 1e-9:
        words.append(f"part of one more {'layer' if then.moe else what[:-1]}'s experts on the GPU")
    if not words:
        words.append(f"the same {what} on the GPU")
    if now.mtp and not then.mtp:
        words.append("MTP off")
    elif then.mtp:
        words.append("MTP kept")
    if speed := tok_s_words(now, then):
        words.append(speed)
    return ", ".join(words)


def _count(delta: int, what: str, where: str) -> str:
    n = abs(delta)
    noun = what if n != 1 else what[:-1]
    return f"{n} more {noun} {where}" if delta > 0 else f"{n} fewer {noun} {where}"


def where_words(s: Standing) -> str:
    """``experts of 15 of 40 layers on the GPU`` (dense: ``38 of 48 layers on the GPU``)."""
    if s.moe:
        text = f"experts of {s.full_expert_layers} of {s.n_layer} layers on the GPU"
        if s.expert_layers > s.full_expert_layers:
            text += " (and part of one more)"
        if s.gpu_layers < s.n_layer:
            text += f", {s.n_layer - s.gpu_layers} whole layers on the CPU"
        return text
    return f"{s.gpu_layers} of {s.n_layer} layers on the GPU"
