"""The GPU kit's archive, read back: predicted vs logged per segment, the CUDA context against
NVML, ``detect`` against ``nvidia-smi``, and the fixture folder the tests keep.

Predictions come from the product's own path: ``mtpstudio detect --json`` from the archive
turned into the target device (``machine_facts``), the budget for each configuration on it.
A CPU archive (the kit's dry run) is compared the way the CPU accuracy table is.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devkit.budget_check import LoadConfig, SegmentRow, render_table, rows_for
from devkit.kit_runs import ARCHIVE_NAME, ARCHIVE_TOP
from devkit.speed_check import DecodeProbe, probe_estimate
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.machine import machine_facts
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.server.load_log import LoadReport, parse_load_log
from mtpstudio.core.units import MIB

CONTEXT_TARGET = 0.10
"""The CUDA context figure is a published one: within 10 % of what the process holds."""
DEVICE = "CUDA0"


@dataclass
class TruthArchive:
    """An archive's files by their path below ``cuda-truth/``."""

    files: dict[str, bytes]

    @classmethod
    def read(cls, path: Path) -> TruthArchive:
        files: dict[str, bytes] = {}
        with tarfile.open(path) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name.split("/", 1)[1] if "/" in member.name else member.name
                data = tar.extractfile(member)
                if data is not None:
                    files[name] = data.read()
        if "manifest.json" not in files:
            raise ValueError(f"{path} is no kit archive: it has no {ARCHIVE_TOP}/manifest.json")
        return cls(files)

    def json(self, name: str) -> Any:
        return json.loads(self.files[name].decode())

    def text(self, name: str) -> str:
        return self.files.get(name, b"").decode(errors="replace")

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = self.json("manifest.json")
        return manifest

    def records(self) -> list[dict[str, Any]]:
        names = sorted(n for n in self.files if n.startswith("loads/") and n.endswith(".json"))
        return [self.json(n) for n in names]

    def log(self, record: dict[str, Any]) -> str:
        stem = next(
            n[: -len(".json")]
            for n in self.files
            if n.startswith(f"loads/{record['index']:02d}-") and n.endswith(".json")
        )
        return self.text(stem + ".log")

    def detection(self) -> DetectionReport | None:
        raw = self.files.get("detect.json", b"{}").decode()
        try:
            return DetectionReport.model_validate_json(raw)
        except ValueError:
            return None


@dataclass
class Comparison:
    """Everything the converter says about one archive."""

    backend: str
    rows: list[SegmentRow] = field(default_factory=list)
    context_rows: list[SegmentRow] = field(default_factory=list)
    fit_lines: list[str] = field(default_factory=list)
    device_lines: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Loads the engine refused exactly as the plan said it would (not failures)."""
    decode_lines: list[str] = field(default_factory=list)
    """The decode probes: tokens/s and draft acceptance (with and without CUDA graphs)."""
    fit_misses: list[str] = field(default_factory=list)
    """--fit rows where the planner's layout or GPU weights miss the engine's."""
    uncompared: list[str] = field(default_factory=list)
    """Loads whose context is not compared: engine switches the plan does not model."""

    def table_lines(self) -> list[str]:
        lines = render_table(self.rows) if self.rows else ["(no load to compare)"]
        if self.context_rows:
            lines.append("CUDA context (process's NVML use - its CUDA buffers; target 10 %):")
            for r in self.context_rows:
                flag = "" if context_ok(r) else "  MISS"
                lines.append(
                    f"  {r.model:24} {r.config:30} {r.segment:22} {r.predicted:8.1f}"
                    f" {r.logged:8.1f} {100 * context_error(r):+6.1f}%{flag}"
                )
        if self.fit_lines:
            lines.append("--fit (the engine's choice vs the planner's for the same free memory):")
            lines += [f"  {line}" for line in self.fit_lines]
        if self.decode_lines:
            lines.append(
                "decode probes (256 tokens, greedy, zero weights: drafts are never right; the "
                "speed model's estimate beside each):"
            )
            lines += [f"  {line}" for line in self.decode_lines]
        if self.device_lines:
            lines.append("mtpstudio detect vs nvidia-smi (MiB):")
            lines += [f"  {line}" for line in self.device_lines]
        lines += [f"did not load: {x}" for x in self.failed]
        lines += [f"refused, as the plan says: {x}" for x in self.refused]
        lines += [f"context not compared: {x}" for x in self.uncompared]
        return lines


def context_error(row: SegmentRow) -> float:
    return (row.predicted - row.logged) / row.logged if row.logged else 0.0


def context_ok(row: SegmentRow) -> bool:
    return abs(context_error(row)) <= CONTEXT_TARGET


def _config(record: dict[str, Any]) -> LoadConfig:
    data = dict(record["config"])
    data["extra"] = tuple(data.get("extra", ()))
    return LoadConfig(**data)


def budget_on(config: LoadConfig, target: TargetDevice, card: str) -> Budget:
    """The budget of ``config`` for catalogue ``card`` on ``target``."""
    plan = plan_from_dict(config.plan_data())
    info = model_card_info(card)
    return compute_budget(plan, info, target, config.profile.memory)


def _on(buffers: dict[str, float], device: str) -> float:
    return sum(v for k, v in buffers.items() if k == device)


def _off(buffers: dict[str, float], device: str) -> float:
    return sum(v for k, v in buffers.items() if k != device)


def device_rows(
    card: str, config: LoadConfig, report: LoadReport, budget: Budget
) -> list[SegmentRow]:
    """Per segment, the buffers the log puts on the GPU against the budget's GPU segments (and
    the host's share of the weights, KV and compute against the budget's host side)."""
    gpu = budget.devices[0].segments
    host = budget.host.segments
    main = report.context("main")
    mtp = report.context("mtp")
    if main is None:
        raise ValueError("no context lines in the log")
    logged: dict[str, float] = {
        "weights": _on(report.model, DEVICE),
        "kv_cache": _on(main.kv, DEVICE),
        "recurrent_state": _on(main.recurrent, DEVICE),
        "compute": _on(main.compute, DEVICE),
        "output": sum(main.output.values()),
        "weights_host": _off(report.model, DEVICE),
        "kv_cache_host": _off(main.kv, DEVICE) + _off(main.recurrent, DEVICE),
        "host_compute": _off(main.compute, DEVICE),  # the CUDA_Host buffer (pinned)
    }
    predicted: dict[str, float] = {
        "weights": gpu["weights"] / MIB,
        "kv_cache": gpu["kv_cache"] / MIB,
        "recurrent_state": gpu["recurrent_state"] / MIB,
        "compute": gpu["compute"] / MIB,
        "output": budget.parts["output"] / MIB,
        "weights_host": budget.parts["weights_cpu"] / MIB,
        "kv_cache_host": (host["kv_cache"] + host["recurrent_state"]) / MIB,
        "host_compute": budget.parts["compute_host"] / MIB,
    }
    if config.moe_cache_mib:  # the cache's banks (b11549: 'MoE cache size = … MiB')
        logged["moe_cache"] = _on(report.moe_cache.sizes_mib, DEVICE)
        predicted["moe_cache"] = gpu.get("moe_cache", 0) / MIB
    if config.mtp and mtp is not None:
        logged["mtp_kv_cache"] = _on(mtp.kv, DEVICE)
        logged["mtp_compute"] = _on(mtp.compute, DEVICE)
        predicted["mtp_kv_cache"] = gpu["mtp_kv_cache"] / MIB
        predicted["mtp_compute"] = gpu["mtp_compute"] / MIB
        logged["mtp_host_compute"] = _off(mtp.compute, DEVICE)
        predicted["mtp_host_compute"] = budget.parts["mtp_compute_host"] / MIB
    return [SegmentRow(card, config.name, k, predicted[k], logged[k]) for k in logged]


def cuda_buffers_mib(report: LoadReport) -> float:
    """Every buffer the log puts on the GPU: weights, caches, compute of all contexts."""
    total = _on(report.model, DEVICE)
    for ctx in report.contexts:
        for buffers in (ctx.kv, ctx.recurrent, ctx.output, ctx.compute):
            total += _on(buffers, DEVICE)
    return total


UNMODELLED_ENV = ("CUDA_MODULE_LOADING",)
"""Engine switches a plan does not model: such loads' context is not compared."""


def context_rows(
    card: str,
    config: LoadConfig,
    record: dict[str, Any],
    report: LoadReport,
    budget: Budget,
    reserved_bytes: int,
) -> list[SegmentRow]:
    """What the server process holds beyond its logged GPU buffers, after the load against the
    budget's driver segment, and after the first prompt and each fill (when cuBLAS, the pool
    and the kernels it ran are there too) against that plus the runtime growth at the cells
    filled by then; all less the reserved memory NVML does not put on any process. A load
    that disabled CUDA graphs is compared without their part."""
    env = record.get("env") or {}
    if any(key in env for key in UNMODELLED_ENV):
        return []
    growth = budget.growth
    if env.get("GGML_CUDA_DISABLE_GRAPHS") == "1":
        growth = replace(growth, graphs=False)
    loaded = (budget.devices[0].segments["driver_overhead"] - reserved_bytes) / MIB
    buffers = cuda_buffers_mib(report)
    used = record.get("process_used_bytes") or {}
    prompt_cells = (record.get("first_prompt") or {}).get("prompt_tokens") or 0
    moments: list[tuple[str, int | None, float]] = [
        ("context loaded", used.get("loaded"), loaded),
        (
            "context after_prompt",
            used.get("after_prompt"),
            loaded + growth.filled(int(prompt_cells)).bytes / MIB,
        ),
    ]
    for probe in record.get("probes") or []:
        if probe.get("kind") == "fill" and probe.get("ok"):
            cells = int(probe["tokens"])
            moments.append(
                (
                    f"context after {cells // 1000}k fill",
                    probe.get("process_used_bytes"),
                    loaded + growth.filled(cells).bytes / MIB,
                )
            )
    rows = []
    for name, at, predicted in moments:
        if isinstance(at, int) and at > 0:
            rows.append(SegmentRow(card, config.name, name, predicted, at / MIB - buffers))
    return rows


def decode_lines(
    card: str,
    config: LoadConfig,
    record: dict[str, Any],
    budget: Budget | None = None,
    target: TargetDevice | None = None,
) -> list[str]:
    """One line per decode probe of a load: tokens/s and drafted/accepted tokens, and with the
    load's budget and card the speed model's estimate beside it (issue 37)."""
    env = " ".join(f"{k}={v}" for k, v in (record.get("env") or {}).items())
    estimate = None
    if budget is not None and target is not None:
        probes = [p for p in record.get("probes") or [] if p.get("kind") == "decode"]
        if probes:
            graphs = (record.get("env") or {}).get("GGML_CUDA_DISABLE_GRAPHS") != "1"
            estimate = probe_estimate(
                model_card_info(card),
                plan_from_dict(config.plan_data()),
                budget,
                target,
                tokens=int(probes[0].get("tokens") or 256),
                graphs=graphs,
            ).tok_s
    out = []
    for i, probe in enumerate(p for p in record.get("probes") or [] if p.get("kind") == "decode"):
        t = probe.get("timings") or {}
        if not probe.get("ok"):
            out.append(f"{card:24} {config.name:30} #{i + 1} failed: {probe.get('error', '')}")
            continue
        drafted = f", drafted {t.get('draft_n', 0)}, accepted {t.get('draft_n_accepted', 0)}"
        measured = float(t.get("predicted_per_second", 0) or 0)
        beside = ""
        if estimate is not None and measured > 0:
            beside = f"; estimate {estimate:.1f} ({estimate / measured - 1:+.1%})"
        out.append(
            f"{card:24} {config.name:30} #{i + 1} {measured:7.1f} tok/s"
            + (drafted if config.mtp else "")
            + beside
            + (f" ({env})" if env else "")
        )
    return out


def smi_memory(xml_text: str) -> dict[str, float]:
    """nvidia-smi's FB memory of the first GPU (MiB): total, reserved, used, free."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return {}
    fb = root.find("./gpu/fb_memory_usage")
    out: dict[str, float] = {}
    for key in ("total", "reserved", "used", "free"):
        node = fb.find(key) if fb is not None else None
        if node is not None and node.text and (m := re.match(r"\s*([\d.]+)", node.text)):
            out[key] = float(m[1])
    return out


def device_lines(archive: TruthArchive) -> list[str]:
    """``detect``'s first GPU beside ``nvidia-smi -q -x``'s, in MiB."""
    detection = archive.detection()
    smi = smi_memory(archive.text("nvidia-smi.xml"))
    if detection is None or not detection.gpus:
        return [f"detect found no GPU; nvidia-smi: {smi or archive.text('nvidia-smi.txt').strip()}"]
    gpu = detection.gpus[0]
    mem = gpu.memory
    ours = {
        "total": mem.total_bytes,
        "reserved": mem.reserved_bytes,
        "used": mem.used_bytes,
        "free": mem.free_bytes,
    }
    lines = [f"{gpu.name} (compute capability {gpu.compute_capability}, {mem.source})"]
    for key, value in ours.items():
        mine = f"{value / MIB:,.0f}" if isinstance(value, int) else "-"
        theirs = f"{smi[key]:,.0f}" if key in smi else "-"
        lines.append(f"{key:9} detect {mine:>10}   nvidia-smi {theirs:>10}")
    return lines


def decode_probes(archive: TruthArchive) -> list[DecodeProbe]:
    """Every successful decode probe of a CUDA archive, as an equation for the card
    coefficients (``speed_check.solve_card_coefficients``)."""
    detection = archive.detection()
    gpus = machine_facts(detection).gpus if detection is not None else []
    if not gpus:
        return []
    target = gpus[0]
    out = []
    for record in archive.records():
        probes = [p for p in record.get("probes") or [] if p.get("kind") == "decode"]
        if not record.get("loaded") or record.get("emulate_mib") or not probes:
            continue
        config, card = _config(record), record["card"]
        budget = budget_on(config, target, card)
        graphs = (record.get("env") or {}).get("GGML_CUDA_DISABLE_GRAPHS") != "1"
        for probe in probes:
            tok_s = float((probe.get("timings") or {}).get("predicted_per_second") or 0)
            if probe.get("ok") and tok_s > 0:
                out.append(
                    DecodeProbe(
                        card,
                        model_card_info(card),
                        plan_from_dict(config.plan_data()),
                        budget,
                        target,
                        int(probe.get("tokens") or 256),
                        graphs,
                        tok_s,
                    )
                )
    return out


def compare(archive: TruthArchive) -> Comparison:
    """The whole comparison of one archive."""
    backend = str(archive.manifest.get("backend", "cuda"))
    result = Comparison(backend)
    detection = archive.detection()
    target: TargetDevice | None = None
    reserved = 0
    if backend == "cuda" and detection is not None:
        gpus = machine_facts(detection).gpus
        target = gpus[0] if gpus else None
        if detection.gpus:
            reserved = detection.gpus[0].memory.reserved_bytes or 0
    for record in archive.records():
        config = _config(record)
        card = record["card"]
        log = archive.log(record)
        if not record.get("loaded"):
            why = _planned_refusal(config, card, log, target)
            if why is not None:
                result.refused.append(f"{card} / {config.name}: {why}")
            else:
                result.failed.append(f"{card} / {config.name}")
            continue
        if backend != "cuda":
            result.rows += rows_for(card, config, model_card_info(card), log)
            continue
        if target is None:
            raise ValueError("a CUDA archive without a detected GPU: detect.json is missing")
        report = parse_load_log(log)
        emulate = record.get("emulate_mib")
        if emulate:
            lines, misses = fit_comparison(card, config, record, report, target)
            result.fit_lines += lines
            result.fit_misses += misses
            continue
        budget = budget_on(config, target, card)
        result.rows += device_rows(card, config, report, budget)
        result.context_rows += context_rows(card, config, record, report, budget, reserved)
        result.decode_lines += decode_lines(card, config, record, budget, target)
        unmodelled = [
            f"{k}={v}" for k, v in (record.get("env") or {}).items() if k in UNMODELLED_ENV
        ]
        if unmodelled:
            result.uncompared.append(
                f"{card} / {config.name} ({', '.join(unmodelled)}: the plan does not model it)"
            )
    if backend == "cuda":
        result.device_lines = device_lines(archive)
    return result


REFUSALS = ("requires flash_attn",)
"""What the engine's log says when it refuses a configuration at the start (llama-context)."""


def _planned_refusal(
    config: LoadConfig, card: str, log: str, target: TargetDevice | None
) -> str | None:
    """The plan's own warning when the plan says the engine will refuse this configuration
    and the engine's log says it did; None otherwise (a real failure)."""
    if not any(marker in log for marker in REFUSALS):
        return None
    plan = plan_from_dict(config.plan_data())
    device = target or TargetDevice("CPU", "cpu", None)
    budget = compute_budget(plan, model_card_info(card), device, config.profile.memory)
    return next((w for w in budget.warnings if "the engine will refuse" in w), None)


FIT_WEIGHTS_TARGET = 0.01
"""The planner's GPU weights under the engine's fit: within 1 % of the engine's."""
ENGINE_LAYOUT = re.compile(
    r"set ngl_per_device\[0\]\.(?:\(n_layer, n_part(?:, overflow_type)?\)=\((\d+), (\d+)"
    r"(?:, (\w+))?\)|n_layer=(\d+))"
)


def engine_layout(log: str) -> str | None:
    """The layout upstream's fit settled on, as ``(n_layer, n_part, overflow)`` (the last one
    it set), or None when the log shows no change."""
    found = ENGINE_LAYOUT.findall(log)
    if not found:
        return None
    n_layer, n_part, overflow, dense = found[-1]
    if dense:
        return f"({dense}, 0, MOE)"
    return f"({n_layer}, {n_part}, {overflow or 'MOE'})"


def fit_comparison(
    card: str, config: LoadConfig, record: dict[str, Any], report: LoadReport, target: TargetDevice
) -> tuple[list[str], list[str]]:
    """The engine's ``--fit`` on a card emulated by ``--fit-target`` against the planner's fit
    on a card of that size: the layout each picks and the GPU weights each keeps. (lines,
    misses)."""
    emulate = int(record["emulate_mib"])
    margin = int(record.get("fit_target_mib", 1024)) - (target.total_bytes or 0) // MIB + emulate
    small = replace(target, total_bytes=emulate * MIB, desktop_bytes=0, other_bytes=0)
    data = config.plan_data()
    data["runtime"]["fit_margin_mib"] = max(0, margin)
    budget = compute_budget(
        plan_from_dict(data),
        model_card_info(card),
        small,
        config.profile.memory,
    )
    logged = _on(report.model, DEVICE)
    predicted = budget.devices[0].segments["weights"] / MIB
    ours = next((w for w in budget.warnings if "fit is expected" in w), "keeps every layer")
    engine = [line for line in report.fit_lines if "set ngl" in line or "successfully" in line]
    fit = budget.fit
    planned = fit.search.layout.label() if fit and fit.search and fit.search.layout else None
    theirs = engine_layout("\n".join(report.fit_lines))
    misses = []
    if planned != theirs:
        misses.append(f"{config.name}: layout {planned} planned, {theirs} chosen by the engine")
    if logged and abs(predicted - logged) / logged > FIT_WEIGHTS_TARGET:
        misses.append(f"{config.name}: GPU weights {predicted:,.2f} planned, {logged:,.2f} logged")
    lines = [
        f"{card} / {config.name} (as a {emulate:,} MiB card): GPU weights logged {logged:,.2f}"
        f" MiB, planned {predicted:,.2f} MiB ({predicted - logged:+.2f}); layout: engine "
        f"{theirs}, planner {planned}" + ("" if not misses else "  MISS"),
        f"  planner: {ours}",
        *(f"  engine: {line}" for line in engine[-3:]),
    ]
    return lines, misses


def fixture_tag(archive: TruthArchive) -> str:
    """``upstream-11434-<backend>-<gpu>-<date>``: what the fixture folder is called."""
    manifest = archive.manifest
    detection = archive.detection()
    gpu = detection.gpus[0].name if detection is not None and detection.gpus else "no-gpu"
    started = (manifest.get("calls") or [{}])[0].get("started", "")[:10] or "undated"
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    return f"upstream-11434-{manifest.get('backend', 'cuda')}-{slug}-{started}"


def write_fixture(archive_path: Path, fixtures: Path) -> tuple[Path, Comparison]:
    """``fixtures/<tag>/``: the archive itself, ``table.txt`` and ``summary.json``."""
    archive = TruthArchive.read(archive_path)
    comparison = compare(archive)
    folder = fixtures / fixture_tag(archive)
    folder.mkdir(parents=True, exist_ok=True)
    if archive_path.resolve() != (folder / ARCHIVE_NAME).resolve():
        shutil.copyfile(archive_path, folder / ARCHIVE_NAME)
    (folder / "table.txt").write_text("\n".join(comparison.table_lines()) + "\n")
    summary = {
        "backend": comparison.backend,
        "rows": [_row_json(r) for r in comparison.rows],
        "context_rows": [_row_json(r) for r in comparison.context_rows],
        "failed": comparison.failed,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return folder, comparison


def _row_json(r: SegmentRow) -> dict[str, Any]:
    return {
        "model": r.model,
        "config": r.config,
        "segment": r.segment,
        "predicted_mib": round(r.predicted, 3),
        "logged_mib": round(r.logged, 3),
    }


def all_within_targets(comparison: Comparison) -> bool:
    rows: Iterable[SegmentRow] = comparison.rows
    return (
        all(r.ok for r in rows)
        and all(context_ok(r) for r in comparison.context_rows)
        and not comparison.fit_misses
    )
