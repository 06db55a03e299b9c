"""Plain-text reports shared by the CLI and the GUI: the model, the Plan's options, the Budget."""

from __future__ import annotations

from mtpstudio.core.memory.budget_types import DEVICE_SEGMENTS, Budget, DeviceBudget
from mtpstudio.core.memory.draft import DRAFT_SEGMENTS
from mtpstudio.core.memory.trust import (
    NOTHING_MEASURED,
    TRUST_MEANINGS,
    Measured,
    Trust,
    device_trust,
    segment_trust,
    weakest,
)
from mtpstudio.core.model.file_state import file_state, file_state_text
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.units import GIB, MIB


def _count(n: int) -> str:
    return f"{n:,}"


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.2f} GB ({n_bytes / GIB:.2f} GiB)"


def model_summary_lines(info: ModelInfo, *, file_note: str | None = None) -> list[str]:
    """What the model is, as aligned ``label  value`` lines (``file_note``: a file that is not
    whole, see ``file_state_text``)."""
    rows: list[tuple[str, str]] = [("architecture", info.architecture)]
    if info.name:
        rows.insert(0, ("name", info.name))
    layers = f"{info.n_layer} trunk"
    if info.n_nextn_layer:
        layers += f" + {info.n_nextn_layer} MTP (nextn)"
    if info.recurrent_layers:
        n_attn = len(info.attention_layers)
        layers += f"; {n_attn} attention, {len(info.recurrent_layers)} recurrent"
        if info.full_attention_interval:
            layers += f" (full attention every {info.full_attention_interval})"
    rows.append(("layers", layers))
    rows.append(
        (
            "attention",
            f"{info.n_head} Q heads / {info.n_head_kv} KV heads, "
            f"key {info.key_length}, value {info.value_length}, embedding {info.n_embd}",
        )
    )
    if info.is_moe:
        experts = f"{info.n_expert} routed, {info.n_expert_used} used per token"
        if info.expert_ffn_length:
            experts += f", expert FFN {info.expert_ffn_length}"
        if info.shared_expert_ffn_length:
            experts += f", shared expert FFN {info.shared_expert_ffn_length}"
        rows.append(("experts", experts))
    elif info.ffn_length:
        rows.append(("FFN", str(info.ffn_length)))
    if info.ssm_inner_size:
        rows.append(
            (
                "recurrent",
                f"inner {info.ssm_inner_size}, state {info.ssm_state_size}, "
                f"groups {info.ssm_group_count}, time-step rank {info.ssm_time_step_rank}, "
                f"conv kernel {info.ssm_conv_kernel}",
            )
        )
    rows.append(("vocabulary", _count(info.vocab_size)))
    rows.append(("context", f"{_count(info.context_length)} native"))
    rows.append(
        ("weights", f"{_size(info.tensor_bytes)}, {info.bits_per_weight:.2f} bits per weight")
    )
    if info.quant_mix and info.tensor_bytes:
        mix = sorted(info.quant_mix.items(), key=lambda kv: -kv[1])
        rows.append(
            (
                "quant mix",
                ", ".join(f"{name} {100 * b / info.tensor_bytes:.1f}%" for name, b in mix[:6]),
            )
        )
    if file_note:
        rows.append(("file", file_note))
    width = max(len(label) for label, _ in rows)
    return [f"  {label:<{width}}  {value}" for label, value in rows]


def model_summary_json(info: ModelInfo, path: str | None) -> dict[str, object]:
    """What ``model_summary_lines`` shows, as fields (``plan --json``)."""
    return {
        "path": path,
        "name": info.name or None,
        "architecture": info.architecture,
        "layers": {
            "trunk": info.n_layer,
            "mtp": info.n_nextn_layer,
            "attention": len(info.attention_layers),
            "recurrent": len(info.recurrent_layers),
            "full_attention_interval": info.full_attention_interval or None,
        },
        "attention": {
            "q_heads": info.n_head,
            "kv_heads": info.n_head_kv,
            "key_length": info.key_length,
            "value_length": info.value_length,
            "embedding": info.n_embd,
        },
        "experts": {
            "routed": info.n_expert,
            "used_per_token": info.n_expert_used,
            "expert_ffn": info.expert_ffn_length,
            "shared_expert_ffn": info.shared_expert_ffn_length,
        }
        if info.is_moe
        else None,
        "vocabulary": info.vocab_size,
        "context_native": info.context_length,
        "weights_bytes": info.tensor_bytes,
        "bits_per_weight": round(info.bits_per_weight, 3),
        "quant_mix_bytes": dict(sorted(info.quant_mix.items(), key=lambda kv: -kv[1])),
        "file": {
            "state": file_state(info).value if path is not None else None,
            "bytes": info.file_size if path is not None else None,
            "full_bytes": info.full_file_size if path is not None else None,
            "note": file_state_text(info) if path is not None else None,
        },
    }


def plan_option_lines(
    plan: Plan,
    *,
    mtp_line: str | None = None,
    desktop_bytes: int | None = None,
    on_gpu: bool = True,
) -> list[str]:
    """The options the Plan chose, as aligned ``label  value`` lines.

    ``plan`` should be the effective plan (MTP auto decided); ``mtp_line`` says why MTP is on
    or off, ``desktop_bytes`` what the desktop keeps on the card after the reclamation;
    ``on_gpu`` False for a CPU target (no GPU layers, no expert placement, no VRAM margin).
    """
    rt, mtp, srv = plan.runtime, plan.mtp, plan.server
    if not on_gpu:
        moe = "on the CPU, like everything (CPU target)"
    elif rt.moe is MoePlacement.N_CPU_MOE and rt.n_cpu_moe == 0:
        moe = "all experts on the GPU (--n-cpu-moe 0)"
    elif rt.moe is MoePlacement.N_CPU_MOE:
        moe = f"experts of the first {rt.n_cpu_moe} layers on the CPU"
    elif rt.moe is MoePlacement.ALL_CPU:
        moe = "all experts on the CPU"
    elif rt.moe is MoePlacement.FIT:
        moe = f"the engine's fit decides (margin {rt.fit_margin_mib} MiB)"
    else:
        moe = "all experts on the GPU"
    if mtp.enabled:
        mtp_text = (
            f"on: draft max {mtp.draft_max}, min {mtp.draft_min}, p-min {mtp.draft_p_min:g}, "
            f"draft cache {mtp.cache_type_k.value}/{mtp.cache_type_v.value}"
        )
    elif mtp.enabled is None:
        mtp_text = "auto (on when the model has an MTP layer and the build can run it)"
    else:
        mtp_text = "off"
    engine = plan.engine.flavour.value
    engine += f" ({plan.engine.binary})" if plan.engine.binary else " (the build detection finds)"
    key = f"in {srv.api_key_file} (0600)" if srv.api_key_file else "none"
    if plan.desktop.value == "none":
        desktop = "none: the desktop keeps its VRAM"
    else:
        desktop = plan.desktop.value
    if desktop_bytes is not None:
        desktop += f" ({desktop_bytes / MIB:,.0f} MiB on the card, see the budget)"
    target = plan.device
    if plan.is_split:
        target = f"{', '.join(plan.devices_named)} ({plan.split.mode.value} split)"
        if plan.split.tensor_split:
            target += f", -ts {','.join(str(x) for x in plan.split.tensor_split)}"
    rows = [
        ("target" if not plan.is_split else "devices", target),
        ("engine", engine),
        ("context", f"{_count(rt.ctx)} tokens"),
        ("K / V cache", f"{rt.cache_type_k.value} / {rt.cache_type_v.value}"),
        ("flash attention", rt.flash_attn.value),
        ("batch / ubatch", f"{rt.batch} / {rt.ubatch}"),
        ("slots", str(rt.parallel)),
        ("threads", str(rt.threads) if rt.threads else "engine default"),
        ("experts", moe),
        (
            "GPU layers",
            "none (CPU target)"
            if not on_gpu
            else str(rt.n_gpu_layers)
            if rt.n_gpu_layers is not None
            else "all",
        ),
        ("load mode", rt.load_mode.value),
        ("MTP", mtp_text),
        ("server", f"{srv.host}:{srv.port}, API key {key}"),
        ("desktop reclaim", desktop),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"  {label:<{width}}  {value}" for label, value in rows]
    if mtp_line:
        lines.append(f"  {mtp_line}")
    return lines


def plan_report(
    plan: Plan,
    info: ModelInfo,
    *,
    mtp_line: str | None = None,
    desktop_bytes: int | None = None,
    on_gpu: bool = True,
) -> str:
    """The model summary and the chosen options, as printed by ``mtpstudio plan``."""
    note = file_state_text(info) if plan.model.path is not None else None
    lines = [f"Model: {plan.model.label}", *model_summary_lines(info, file_note=note)]
    lines += ["", "Options:"]
    lines += plan_option_lines(plan, mtp_line=mtp_line, desktop_bytes=desktop_bytes, on_gpu=on_gpu)
    return "\n".join(lines) + "\n"


# -- the Budget (per-device table and a one-line bar) ------------------------------------------

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
    "runtime_growth": "G",
    "margin": "_",
    "moe_cache": "X",
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
    "driver_overhead": "driver context",
    "runtime_growth": "runtime growth",
    "margin": "safety margin",
    "moe_cache": "MoE expert cache",
    "draft_weights": "draft model weights",
    "draft_kv_cache": "draft model KV",
    "draft_compute": "draft model compute",
}
SHOWN_SEGMENTS = (*DEVICE_SEGMENTS, *DRAFT_SEGMENTS)

TRUST_LEGEND = "; ".join(f"{level.value}: {TRUST_MEANINGS[level]}" for level in Trust)


def trust_meaning(level: str) -> str:
    """``source`` -> what that level means (empty for an unknown word)."""
    try:
        return TRUST_MEANINGS[Trust(level)]
    except ValueError:
        return ""


def budget_trust(budget: Budget, device: DeviceBudget) -> dict[str, str]:
    """``segment -> trust`` of one device of ``budget`` (its measured, replayed and sourced
    figures applied)."""
    return device_trust(
        device.id, device.segments, budget.measured, budget.replayed, budget.sourced, budget.kit
    )


def combined_trust(*levels: str) -> str:
    """The trust of a figure made of several: the least sure of ``levels``."""
    return weakest(*(Trust(level) for level in levels)).value


def mib(n_bytes: int | None) -> str:
    return "unknown" if n_bytes is None else f"{n_bytes / MIB:,.0f} MiB"


def text_bar(device: DeviceBudget, width: int = BAR_WIDTH) -> str:
    """``[WWWWKKRMCDD__....]`` scaled to the device size; ``!`` marks what does not fit."""
    scale_to = max(device.total_bytes or 0, device.used_bytes, 1)
    cells: list[str] = []
    used = 0  # segment edges from the running total, so rounding never adds up past the card
    for name in SHOWN_SEGMENTS:
        start = round(width * used / scale_to)
        used += device.segments.get(name, 0)
        cells += [BAR_GLYPHS[name]] * (round(width * used / scale_to) - start)
    if device.total_bytes is not None:
        total_cells = round(width * device.total_bytes / scale_to)
        if len(cells) > total_cells:
            cells = cells[:total_cells] + ["!"] * (len(cells) - total_cells)
        else:
            cells += ["."] * (total_cells - len(cells))
    return "[" + "".join(cells[: width + 1]) + "]"


def device_table(
    device: DeviceBudget,
    measured: Measured = NOTHING_MEASURED,
    replayed: Measured = NOTHING_MEASURED,
    sourced: Measured = NOTHING_MEASURED,
    kit: Measured = NOTHING_MEASURED,
) -> list[str]:
    name = f"  {device.name}" if device.name and device.name != device.id else ""
    lines = [f"{device.id}{name}  total {mib(device.total_bytes)}"]
    for name in SHOWN_SEGMENTS:
        value = device.segments.get(name, 0)
        if value:
            trust = segment_trust(device.id, name, measured, replayed, sourced, kit).value
            lines.append(f"  {BAR_GLYPHS[name]} {LABELS[name]:<20} {mib(value):>12}  {trust}")
    lines.append(f"    {'used':<20} {mib(device.used_bytes):>12}")
    free = device.free_bytes
    if free is not None:
        word = "free" if free >= 0 else "SHORT"
        lines.append(f"    {word:<20} {mib(abs(free)):>12}")
    lines.append("  " + text_bar(device))
    return lines


def _spans(blocks: list[int]) -> str:
    """``0-11, 14, 20-39`` for a sorted list of block numbers."""
    runs: list[list[int]] = []
    for b in blocks:
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return ", ".join(f"{a}" if a == z else f"{a}-{z}" for a, z in runs)


def split_lines(budget: Budget) -> list[str]:
    """Where a split plan puts the layers: blocks per device, the output layer, the moved
    tensors, and the engine's fit per device (nothing for a plan on one device)."""
    split = budget.split
    if split is None:
        return []
    sp = split.placement
    ids = [d.id for d in budget.devices]
    parallel = ", pipeline-parallel (4 copies of the scheduler's inputs)" * split.pipeline_parallel
    lines = [f"Split over {len(ids)} devices{parallel}:"]
    for i, dev in enumerate(ids):
        blocks = sp.device_blocks(i)
        what = f"blocks {_spans(blocks)}" if blocks else "no block"
        if sp.output_device == i:
            what += " and the output layer"
        lines.append(f"  {dev}: {what}")
    cpu = [b for b in sorted(sp.loaded) if sp.block_device[b] is None]
    if cpu:
        lines.append(f"  CPU: blocks {_spans(cpu)}")
    ram = sorted(m.layer for m in sp.moves if m.dest is None and m.kind == "MOE")
    if ram:
        lines.append(f"  experts in system RAM: blocks {_spans(ram)}")
    for m in sp.moves:
        if m.kind != "MOE":
            to = "system RAM" if m.dest is None else ids[m.dest]
            lines.append(f"  block {m.layer}: its {m.kind} part's FFN tensors go to {to}")
    search = split.search
    if search is not None and search.layouts is None:
        lines.append("  the engine's fit: no change needed, it deals the layers by free memory")
    if search is not None and search.layouts is not None:
        layouts = ", ".join(f"{ids[i]} {x.label()}" for i, x in enumerate(search.layouts))
        lines.append(
            "  the engine's fit over the devices (n_layer, n_part, overflow): "
            f"{layouts}; -ts {','.join(str(x.n_layer) for x in search.layouts)}"
        )
    return lines


def budget_report(
    budget: Budget, argv: list[str] | None = None, verdict_lines: list[str] | None = None
) -> str:
    """Per-device tables, host RAM, verdict, warnings and the command line.

    ``verdict_lines`` replace the memory-only verdict (planning's ``PlanVerdict.lines``).
    """
    on_cpu = all(d.id == "CPU" for d in budget.devices)
    lines: list[str] = ["Memory budget (the CPU: system RAM):" if on_cpu else "VRAM budget:"]
    for device in budget.devices:
        lines += [
            "  " + line
            for line in device_table(
                device, budget.measured, budget.replayed, budget.sourced, budget.kit
            )
        ]
    if budget.growth.bytes:
        lines.append(f"  {budget.growth.line()}")
    lines += ["  " + line for line in split_lines(budget)]
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
            lines.append(
                f"  {label}{mib(s[key])}  {segment_trust('host', key, budget.measured).value}"
            )
        if key == "weights_mapped" and s[key] and "weights_cpu_tensors" in budget.parts:
            kept = min(s[key], budget.parts["weights_cpu_tensors"])
            experts = budget.parts.get("weights_cpu_experts", 0)
            of_them = f" ({mib(experts)} of experts)" if experts else ""
            lines.append(f"    of them kept in RAM (CPU tensors) {mib(kept)}{of_them}")
            if s[key] > kept:
                lines.append(
                    f"    the rest is page cache            {mib(s[key] - kept)} (read once at "
                    "the load, dropped when RAM is needed)"
                )
    lines.append(
        "  buffers (KV, state, output, ...)  "
        + mib(host.needed_bytes - s["weights_resident"] - s["weights_locked"])
    )
    lines.append(f"  prompt cache (grows up to)        {mib(s['prompt_cache_max'])}")
    verdict = {True: "fits", False: "does NOT fit", None: "unknown (device size unknown)"}
    lines += verdict_lines or [f"Verdict: {verdict[budget.fits]}"]
    if budget.warnings:
        lines.append("Warnings:")
        lines += [f"  - {w}" for w in budget.warnings]
    if argv:
        from shlex import join

        lines += ["Command line:", "  " + join(argv)]
    return "\n".join(lines) + "\n"
