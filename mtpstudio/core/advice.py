"""What a lever gives in speed: where the experts run, MTP kept, and the one ranking key.

Users change a plan for tokens/s. Until mtpstudio has a speed model (issue 37), a lever's
speed is judged by what decides it on a 12-16 GB card: MTP kept (drafting), whole layers on the
CPU (the slowest place for a layer), and the layers whose experts run on the GPU (each one
moved there takes its share of the expert reads off system RAM). ``speed_key`` is the one
place that judgement lives: a speed estimate replaces it there, and every ranking follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.memory.budget import Budget
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
    """

    n_layer: int
    gpu_layers: int
    expert_layers: float
    full_expert_layers: int
    mtp: bool
    fits: bool
    spare_bytes: int
    moe: bool


def standing(budget: Budget, model: ModelInfo, mtp: bool) -> Standing:
    """Where the weights of the plan behind ``budget`` run."""
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
    )


def speed_key(s: Standing) -> tuple[float, ...]:
    """Larger is faster: MTP kept, fewest whole layers on the CPU, most experts on the GPU.

    The one ranking key of the levers (issue 37's speed estimate replaces this function).
    """
    return (1.0 if s.mtp else 0.0, float(s.gpu_layers), s.expert_layers)


def gain_words(now: Standing, then: Standing) -> str:
    """What a change does to speed, in words: ``2 more expert layers on the GPU, MTP kept``."""
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
