"""``mtpstudio detect [--json]``: GPUs, VRAM users, display, host and engine builds."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpstudio.core.units import GIB, MIB

if TYPE_CHECKING:  # the report's pydantic models load with the command, not its registration
    from mtpstudio.core.detect.models import DetectionReport, EngineInfo, GpuInfo, GpuProcess

WIDTH = 100
INDENT = " " * 11

Detector = Callable[[argparse.Namespace], "DetectionReport"]


def register(sub: Any) -> None:
    """Add ``detect`` to the main parser's subparsers."""
    add_detect_parser(sub)


def add_detect_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``detect`` on the ``add_subparsers()`` object of the main parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "detect",
        help="show GPUs, who uses VRAM, the display, the host and the engine builds",
        description="Detect GPUs (NVML, sysfs), VRAM users, which GPU drives the display, "
        "CPU/RAM, the desktop session and llama-server builds with the flags they accept.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--engine",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="also look here for llama-server (a binary or a folder; repeatable)",
    )
    p.add_argument(
        "--refresh", action="store_true", help="probe engine builds again (ignore the cache)"
    )
    p.add_argument(
        "--schema", action="store_true", help="print the JSON schema of the --json report"
    )
    p.add_argument(
        "--rpc",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="probe these rpc-server endpoints and print what each reports (repeatable)",
    )
    p.set_defaults(func=cmd_detect)
    return p


def run_detection(args: argparse.Namespace) -> DetectionReport:
    """Detection on this machine with the command's options."""
    from mtpstudio.core.detect.gather import DetectionSources
    from mtpstudio.core.usecases.machine import detect_all

    return detect_all(
        DetectionSources.system(),
        engine_paths=list(getattr(args, "engine", []) or []),
        refresh_engines=bool(getattr(args, "refresh", False)),
    )


def cmd_detect(args: argparse.Namespace, detector: Detector = run_detection) -> int:
    """Print the report (human or JSON); a partial report is still exit status 0."""
    from mtpstudio.core.detect.models import DetectionReport

    if getattr(args, "schema", False):
        print(json.dumps(DetectionReport.model_json_schema(), indent=2))
        return 0
    if getattr(args, "rpc", None):
        return _probe_endpoints(args.rpc, as_json=bool(getattr(args, "json", False)))
    report = detector(args)
    if getattr(args, "json", False):
        print(report.model_dump_json(indent=2))
    else:
        sys.stdout.write(format_report(report))
    return 0


def _probe_endpoints(endpoints: list[str], *, as_json: bool) -> int:
    """Each endpoint's answer (the plan's record of it, and one line); the first that cannot be
    reached or lies stops with one sentence (``RpcProbeError``, exit 2)."""
    from mtpstudio.core.usecases.rpc_endpoint import probe_endpoint

    probed = [probe_endpoint(text) for text in endpoints]
    if as_json:
        print(json.dumps([p.entry for p in probed], indent=2))
    else:
        for p in probed:
            print(p.summary)
    return 0


# ------------------------------------------------------------------------------------------
# human output


def human_bytes(value: int | None) -> str:
    """1.5 GiB / 412 MiB / '?'."""
    if value is None:
        return "?"
    if value >= GIB:
        return f"{value / GIB:.1f} GiB"
    if value >= MIB:
        return f"{value / MIB:.0f} MiB"
    return f"{value / 1024:.0f} KiB"


def format_report(report: DetectionReport) -> str:
    """The compact readable report."""
    lines: list[str] = []
    no_gpu = next((p for p in report.problems if p.startswith("No GPU found")), None)
    lines.append("GPUs")
    if not report.gpus:
        lines.append(f"  {no_gpu or 'No GPU found.'}")
    for gpu in report.gpus:
        lines.extend(_gpu_lines(gpu))
    if report.processes:
        lines.append("")
        lines.append("VRAM users")
        for proc in report.processes:
            lines.append(_process_line(proc))
    lines.append("")
    lines.append(_display_line(report))
    lines.append(_host_line(report))
    lines.append("")
    lines.append("Engines")
    if not report.engines:
        lines.append(
            "  no llama-server found (PATH, ~/llama.cpp, ~/ik_llama.cpp, /usr, /opt, "
            "MTPSTUDIO_ENGINES); add one with --engine PATH"
        )
    for engine in report.engines:
        lines.extend(_engine_lines(engine))
    others = [p for p in report.problems if p is not no_gpu]
    if others:
        lines.append("")
        lines.append("Problems")
        lines.extend(f"  - {p}" for p in others)
    return "\n".join(lines) + "\n"


def _gpu_lines(gpu: GpuInfo) -> list[str]:
    kind = "integrated" if gpu.integrated else "discrete"
    mem = gpu.memory
    if mem.total_bytes is not None:
        parts = [f"{human_bytes(mem.used_bytes)} used", f"{human_bytes(mem.free_bytes)} free"]
        if mem.reserved_bytes:
            parts.append(f"{human_bytes(mem.reserved_bytes)} reserved")
        memory = f"{human_bytes(mem.total_bytes)} ({', '.join(parts)})"
    else:
        memory = "shared memory" if gpu.integrated else "memory unknown"
    out = [f"  {gpu.id:<7}{gpu.name} · {kind} · {memory}"]
    details: list[str] = []
    if gpu.driver:
        details.append(f"{gpu.driver} {gpu.driver_version}" if gpu.driver_version else gpu.driver)
    if gpu.cuda_driver_version:
        details.append(f"CUDA {gpu.cuda_driver_version}")
    if gpu.compute_capability:
        details.append(f"compute {gpu.compute_capability}")
    if gpu.pcie and gpu.pcie.max_gen:
        link = f"PCIe {gpu.pcie.max_gen}.0 x{gpu.pcie.max_width or '?'}"
        if gpu.pcie.current_gen and (gpu.pcie.current_gen, gpu.pcie.current_width) != (
            gpu.pcie.max_gen,
            gpu.pcie.max_width,
        ):
            link += f" (now {gpu.pcie.current_gen}.0 x{gpu.pcie.current_width or '?'})"
        details.append(link)
    if gpu.pci_bus_id:
        where = gpu.pci_bus_id + (f" {gpu.drm_card}" if gpu.drm_card else "")
        details.append(where)
    if details:
        out.append(f"         {', '.join(details)}")
    if gpu.drives_display:
        lit = [c.name for c in gpu.connectors if c.active]
        out.append(f"         drives the display{' (' + ', '.join(lit) + ')' if lit else ''}")
    return out


def _process_line(proc: GpuProcess) -> str:
    name = proc.name or "?"  # exited, or in another PID namespace
    used = human_bytes(proc.used_bytes) if proc.used_bytes is not None else "n/a"
    kinds = "+".join(proc.kinds)
    return (
        f"  {proc.gpu_id:<7}{name:<18}{used:>10}  {proc.category.value} · pid {proc.pid} · {kinds}"
    )


def _display_line(report: DetectionReport) -> str:
    d = report.display
    parts = [d.session_type or "no graphical session", d.desktop or "", d.display_manager or ""]
    if d.kwin_compositing:
        comp = f"KWin {d.kwin_compositing}"
        if d.kwin_renderer:
            comp += f" ({d.kwin_renderer})"
        parts.append(comp)
    if d.display_gpu_ids:
        parts.append("display on " + ", ".join(d.display_gpu_ids))
    return "Display  " + " · ".join(p for p in parts if p)


def _host_line(report: DetectionReport) -> str:
    h = report.host
    parts = [h.cpu_model or "CPU unknown"]
    if h.physical_cores:
        threads = f" / {h.logical_cpus} threads" if h.logical_cpus else ""
        parts.append(f"{h.physical_cores} cores{threads}")
    if h.ram_total_bytes:
        parts.append(
            f"RAM {human_bytes(h.ram_total_bytes)} ({human_bytes(h.ram_available_bytes)} available)"
        )
    if h.swap_total_bytes is not None:
        parts.append(f"swap {human_bytes(h.swap_total_bytes)}" if h.swap_total_bytes else "no swap")
    if h.os_name:
        parts.append(h.os_name)
    return "Host     " + " · ".join(parts)


def _engine_lines(engine: EngineInfo) -> list[str]:
    cached = " [cached]" if engine.from_cache else ""
    if engine.flavour is None:
        reason = "; ".join(engine.problems) or "not recognised"
        return [f"  unknown  {engine.path}{cached}", f"           {reason}"]
    version = engine.version or "?"
    if engine.build_number is not None and engine.version != str(engine.build_number):
        version += f" (build {engine.build_number}, commit {engine.commit or '?'})"
    elif engine.commit:
        version += f" (commit {engine.commit})"
    backends = "+".join(b.value for b in engine.backends) or "?"
    out = [
        f"  {engine.flavour.value:<9}{version} · {backends} · MTP {engine.mtp.value}",
        f"           {engine.path}{cached}",
    ]
    if engine.era:
        out.append(f"           era: {engine.era}")
    if engine.companions:
        out.append(f"           with {', '.join(sorted(engine.companions))}")
    probed = len(engine.accepted_flags) + len(engine.rejected_flags)
    if probed:
        long_names = [f for f in engine.rejected_flags if f.startswith("--")]
        text = f"accepts {len(engine.accepted_flags)} of {probed} probed flags"
        if long_names:
            text += "; rejects " + ", ".join(long_names)
        out.extend(
            textwrap.wrap(
                text,
                WIDTH,
                initial_indent=INDENT,
                subsequent_indent=INDENT,
                break_on_hyphens=False,
                break_long_words=False,
            )
        )
    out.extend(f"           ! {p}" for p in engine.problems)
    return out
