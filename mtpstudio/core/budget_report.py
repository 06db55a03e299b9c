"""Text rendering of a Budget: the per-device table and a one-line bar, for the CLI."""

from __future__ import annotations

from mtpstudio.core.memory.budget import DEVICE_SEGMENTS, Budget, DeviceBudget
from mtpstudio.core.memory.draft import DRAFT_SEGMENTS
from mtpstudio.core.units import MIB

BAR_WIDTH = 60
BAR_GLYPHS = {
    "weights": "W",
    "kv_cache": "K",
    "recurrent_state": "R",
    "mtp_kv_cache": "M",
    "mtp_compute": "m",
    "compute": "C",
    "output": "o",
    "desktop": "D",
    "other_processes": "P",
    "driver_overhead": "V",
    "margin": "_",
    "draft_weights": "d",
    "draft_kv_cache": "k",
    "draft_compute": "c",
}
LABELS = {
    "weights": "weights",
    "kv_cache": "KV cache",
    "recurrent_state": "recurrent state",
    "mtp_kv_cache": "MTP draft KV",
    "mtp_compute": "MTP draft compute",
    "compute": "compute",
    "output": "output",
    "desktop": "desktop",
    "other_processes": "other processes",
    "driver_overhead": "driver/CUDA context",
    "margin": "safety margin",
    "draft_weights": "draft model weights",
    "draft_kv_cache": "draft model KV",
    "draft_compute": "draft model compute",
}
SHOWN_SEGMENTS = (*DEVICE_SEGMENTS, *DRAFT_SEGMENTS)


def mib(n_bytes: int | None) -> str:
    return "unknown" if n_bytes is None else f"{n_bytes / MIB:,.0f} MiB"


def text_bar(device: DeviceBudget, width: int = BAR_WIDTH) -> str:
    """``[WWWWKKRMCDD__....]`` scaled to the device size; ``!`` marks what does not fit."""
    scale_to = max(device.total_bytes or 0, device.used_bytes, 1)
    cells: list[str] = []
    for name in SHOWN_SEGMENTS:
        n = round(width * device.segments.get(name, 0) / scale_to)
        cells += [BAR_GLYPHS[name]] * n
    if device.total_bytes is not None:
        total_cells = round(width * device.total_bytes / scale_to)
        if len(cells) > total_cells:
            cells = cells[:total_cells] + ["!"] * (len(cells) - total_cells)
        else:
            cells += ["."] * (total_cells - len(cells))
    return "[" + "".join(cells[: width + 1]) + "]"


def device_table(device: DeviceBudget) -> list[str]:
    lines = [f"{device.id}  {device.name}  total {mib(device.total_bytes)}"]
    for name in SHOWN_SEGMENTS:
        value = device.segments.get(name, 0)
        if value:
            lines.append(f"  {BAR_GLYPHS[name]} {LABELS[name]:<20} {mib(value):>12}")
    lines.append(f"    {'used':<20} {mib(device.used_bytes):>12}")
    free = device.free_bytes
    if free is not None:
        word = "free" if free >= 0 else "SHORT"
        lines.append(f"    {word:<20} {mib(abs(free)):>12}")
    lines.append("  " + text_bar(device))
    return lines


def budget_report(budget: Budget, argv: list[str] | None = None) -> str:
    """Per-device tables, host RAM, verdict, warnings and the command line."""
    lines: list[str] = ["VRAM budget:"]
    for device in budget.devices:
        lines += ["  " + line for line in device_table(device)]
    host = budget.host
    s = host.segments
    lines.append("System RAM:")
    lines.append(f"  total {mib(host.total_bytes)}, available {mib(host.available_bytes)}")
    if s["weights_mapped"]:
        lines.append(f"  weights memory-mapped from disk   {mib(s['weights_mapped'])}")
    if s["weights_resident"]:
        lines.append(f"  weights read into RAM             {mib(s['weights_resident'])}")
    if s["weights_locked"]:
        lines.append(f"  weights locked in RAM             {mib(s['weights_locked'])}")
    lines.append(
        "  buffers (KV, state, output, ...)  "
        + mib(host.needed_bytes - s["weights_resident"] - s["weights_locked"])
    )
    lines.append(f"  prompt cache (grows up to)        {mib(s['prompt_cache_max'])}")
    verdict = {True: "fits", False: "does NOT fit", None: "unknown (device size unknown)"}
    lines.append(f"Verdict: {verdict[budget.fits]}")
    if budget.warnings:
        lines.append("Warnings:")
        lines += [f"  - {w}" for w in budget.warnings]
    if argv:
        from shlex import join

        lines += ["Command line:", "  " + join(argv)]
    return "\n".join(lines) + "\n"
