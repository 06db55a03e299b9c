"""What the budget page says, decided without Qt: the verdict under the bar, the system RAM
line, the speed line and what it rests on, the levers that make the plan faster, the target.

The page paints these sentences; every figure in them is the evaluation's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mtpstudio.core.memory.budget_types import Budget, HostBudget
from mtpstudio.core.planner.advice import Standing, where_words
from mtpstudio.core.planner.levers import FitSuggestion
from mtpstudio.core.planner.resolve import PlanResult, published_setup_text
from mtpstudio.core.speed.estimate import SpeedEstimate
from mtpstudio.core.speed.words import NOT_MODELLED, speed_summary, step_words
from mtpstudio.core.units import GIB, MIB


def mib(n_bytes: int | None) -> str:
    """``12,282 MiB`` (or ``unknown``)."""
    if n_bytes is None:
        return "unknown"
    return f"{n_bytes / MIB:,.0f} MiB"


def gib(n_bytes: int | None) -> str:
    """``11.99 GiB`` (or ``unknown``)."""
    if n_bytes is None:
        return "unknown"
    return f"{n_bytes / GIB:,.2f} GiB"


@dataclass(frozen=True)
class Said:
    """A sentence and its tone (``good``, ``info``, ``warn``, ``bad``)."""

    text: str
    tone: str = "info"


def verdict(budget: Budget, result: PlanResult | None, moe: bool) -> Said:
    """The verdict under the bar: what will not run and what to do instead, then per device
    whether it fits and with how much to spare (``moe``: the model's layers have experts)."""
    parts: list[str] = []
    tone = "good"
    if result is not None and result.verdict.blockers:
        parts.append(f"Will NOT run as planned: {'; '.join(result.verdict.blockers)}.")
        parts += [f"Instead: {a}." for a in result.verdict.alternatives]
        tone = "bad"
    for device in budget.devices:
        free = device.free_bytes
        if free is None:
            parts.append(f"{device.id}: total unknown")
            tone = "info" if tone == "good" else tone
        elif free < 0:
            what = "expert layers" if moe else "layers"
            parts.append(
                f"{device.id} is {mib(-free)} short: lower the context, use smaller cache "
                f"types or move {what} to the CPU (or press a Fit button)."
            )
            tone = "bad"
        elif device.id == "CPU":
            parts.append(f"The CPU fits, with {mib(free)} of RAM to spare.")
        else:
            margin = device.segments.get("margin", 0)
            beyond = f" beyond the {mib(margin)} margin" if margin else " (no margin kept)"
            parts.append(f"{device.id} fits with {mib(free)} to spare{beyond}.")
    return Said(" ".join(parts), tone)


def mapped_in_ram(host: HostBudget, parts: Mapping[str, int]) -> tuple[int, int]:
    """(bytes of the memory-mapped range that stay in RAM, the rest: page cache).

    The engine maps the file from its first to its last CPU tensor; only the CPU tensors are
    read while it serves (they stay resident), the GPU tensors in between were read once at
    the load and are page cache the kernel drops when it needs the room.
    """
    mapped = host.segments["weights_mapped"]
    kept = min(mapped, parts.get("weights_cpu_tensors", mapped))
    return kept, mapped - kept


def host_line(budget: Budget) -> Said:
    """System RAM: what the engine needs, what it keeps mapped, what is available now (tone
    ``bad`` when it does not fit)."""
    host = budget.host
    kept, cache = mapped_in_ram(host, budget.parts)
    experts = budget.parts.get("weights_cpu_experts", 0)
    text = f"System RAM: the engine needs {mib(host.needed_bytes)} for its buffers"
    if kept:
        text += f", and keeps {mib(kept)} of memory-mapped weights in RAM"
        if experts:
            text += f" ({mib(experts)} of them experts)"
    if cache:
        text += f"; the other {mib(cache)} it maps are page cache, dropped when RAM is needed"
    if host.available_bytes is not None:
        text += f"; {gib(host.available_bytes)} of {gib(host.total_bytes)} available now"
    else:
        text += "; the RAM size is not known yet"
    short = host.fits is False
    return Said(text + (" — not enough." if short else "."), "bad" if short else "info")


def speed_line(speed: SpeedEstimate | None) -> tuple[str, str]:
    """(the speed line, rich text; what it rests on, for its tooltip); empty without one."""
    if speed is None:
        return "", ""
    label = "measured" if speed.trust == "measured" else "estimate"
    tip = (
        "One decoding step: "
        + step_words(speed)
        + ".\n\nBasis:\n"
        + "\n".join(f"• {line}" for line in speed.basis)
        + f"\n\nNot known to the estimate: {NOT_MODELLED}."
    )
    return f"<b>Speed ({label}):</b> {speed_summary(speed)}.", tip


def faster_line(faster: Sequence[FitSuggestion]) -> str:
    """The levers that make the plan faster, best first (three of them; '' when none)."""
    if not faster:
        return ""
    shown = " · ".join(
        f"{i}. {s.label}: {s.buys} ({s.outcome()})" for i, s in enumerate(faster[:3], 1)
    )
    return f"Faster for this plan, best first: {shown}. Every lever… applies one."


def fit_line(now: Standing, applied: str | None) -> Said:
    """The line beside the Fit buttons: what the last lever did while its plan stands
    (``applied``), then where the plan's weights run now, MTP, and its spare (tone ``bad``
    when it does not fit)."""
    spare = f"{mib(now.spare_bytes)} spare" if now.fits else "does not fit"
    mtp = "MTP on" if now.mtp else "MTP off"
    parts = [applied] if applied else []
    parts.append(f"Now: {where_words(now)}, {mtp}, {spare}.")
    return Said(" ".join(parts), "info" if now.fits else "bad")


def target_line(target: str | None, published: bool, budget: Budget) -> str:
    """Who the plan is for; for the demo's published setup (``published``), whether it fits
    this card."""
    text = f"Planning for {target}." if target else ""
    if published:
        fits = all(d.fits for d in budget.devices)
        text += f" Demo defaults: the published setup ({published_setup_text()}), which " + (
            "fits this card." if fits else "does NOT fit this card."
        )
    return text
