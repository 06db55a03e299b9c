"""Text rendering of a Budget: the per-device table and a one-line bar, for the CLI."""

from __future__ import annotations

from mtpstudio.core.memory.budget import DEVICE_SEGMENTS, Budget, DeviceBudget
from mtpstudio.core.memory.trust import segment_trust
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
}


TRUST_LEGEND = (
    "exact: byte formula checked against the engine's log; measured: stored measurement of "
    "this build; estimate: fitted or assumed"
)


def mib(n_bytes: int | None) -> str:
    return "unknown" if n_bytes is None else f"{n_bytes / MIB:,.0f} MiB"


def text_bar(device: DeviceBudget, width: int = BAR_WIDTH) -> str:
    """``[WWWWKKRMCDD__....]`` scaled to the device size; ``!`` marks what does not fit."""
    scale_to = max(device.total_bytes or 0, device.used_bytes, 1)
    cells: list[str] = []
    for name in DEVICE_SEGMENTS:
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
    for name in DEVICE_SEGMENTS:
        value = device.segments.get(name, 0)
        if value:
            trust = segment_trust(device.id, name).value
            lines.append(f"  {BAR_GLYPHS[name]} {LABELS[name]:<20} {mib(value):>12}  {trust}")
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
    lines.append(f"  ({TRUST_LEGEND})")
    host = budget.host
    s = host.segments
    lines.append("System RAM:")
    lines.append(f"  total {mib(host.total_bytes)}, available {mib(host.available_bytes)}")
    for key, label in (
        ("weights_mapped", "weights memory-mapped from disk   "),
        ("weights_resident", "weights read into RAM             "),
        ("weights_locked", "weights locked in RAM             "),
    ):
        if s[key]:
            lines.append(f"  {label}{mib(s[key])}  {segment_trust('host', key).value}")
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
