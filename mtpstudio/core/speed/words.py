"""A speed estimate in words: the one-line summary, the step's split, the basis, the limits."""

from __future__ import annotations

from mtpstudio.core.speed.estimate import SpeedEstimate

NOT_MODELLED = (
    "the acceptance on your own prompts unless you give it (--acceptance; code drafts better "
    "than prose), the CPU's turbo and what else runs on it, the card's real clocks, power limit "
    "and its PCIe link as the board wires it, how this model's tokens share experts (taken "
    "as Qwen3-30B-A3B's were measured), the operating system (Windows and WSL2 decode "
    "slower), and a card's arithmetic for prompts (a ceiling)"
)
"""What the estimate cannot know, said once beside it (the README's list is longer)."""

_PART_NAMES = {
    "card": "card reads",
    "cpu": "CPU (RAM reads or arithmetic)",
    "pcie": "PCIe copies",
}
"""The parts of a step by name; every other part is a fixed cost (launches, barriers, hops,
the pass itself)."""


def tok_s(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def speed_summary(speed: SpeedEstimate) -> str:
    """``≈ 104 tok/s decoding with MTP (draft 3; ≈ 74 without), prefill ≈ 1,040 tok/s`` —
    or the measured figure first, the estimate beside it with its error."""
    if speed.mtp:
        text = (
            f"≈ {tok_s(speed.decode_tok_s)} tok/s decoding with MTP (draft depth {speed.depth}; "
            f"≈ {tok_s(speed.plain_tok_s)} without)"
        )
    else:
        text = f"≈ {tok_s(speed.decode_tok_s)} tok/s decoding"
    if speed.prefill_tok_s and speed.prefill_ceiling:
        text += f", prompts at most ≈ {tok_s(speed.prefill_tok_s)} tok/s"
    elif speed.prefill_tok_s:
        text += f", prompts ≈ {tok_s(speed.prefill_tok_s)} tok/s"
    if speed.measured_tok_s is not None and speed.error is not None:
        return (
            f"{tok_s(speed.measured_tok_s)} tok/s measured ({speed.measured_source}); "
            f"estimated {text} ({speed.error:+.0%})"
        )
    return text


def step_words(speed: SpeedEstimate) -> str:
    """Where a decoding step's time goes, largest first:
    ``CPU (RAM reads or arithmetic) 50.0 ms, card reads 8.7 ms, fixed costs 7.0 ms``."""
    merged: dict[str, float] = {}
    for key, seconds in speed.step_s.items():
        name = _PART_NAMES.get(key.removeprefix("draft "), "fixed costs")
        merged[name] = merged.get(name, 0.0) + seconds
    parts = sorted(merged.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in parts if seconds > 0)


def speed_lines(speed: SpeedEstimate) -> list[str]:
    """The plan report's speed block."""
    label = "measured" if speed.trust == "measured" else "estimate"
    lines = [f"Speed ({label}): {speed_summary(speed)}"]
    lines.append(f"  one decoding step: {step_words(speed)}")
    lines += [f"  basis: {line}" for line in speed.basis]
    lines.append(f"  not known to the estimate: {NOT_MODELLED}")
    return lines
