"""The per-file table: each remote model planned for one card, engine and context; the best marked.

``plan_remote_model`` is the one place here that calls the planner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.hub.remote_header import RemoteHeader
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    FitSuggestion,
    MachineFacts,
    PlanningContext,
    budget_for,
    desktop_choices,
    offload_and_context,
    resolve,
)

__all__ = [
    "BEST_RULE",
    "COLUMN_LEGEND",
    "QUALITY_FLOOR_BPW",
    "FileFit",
    "TableRow",
    "best_row",
    "plan_remote_model",
    "table_rows",
]

QUALITY_FLOOR_BPW: Final = 3.5
"""Files below this many bits per weight are the best choice only when nothing else runs."""

COLUMN_LEGEND: Final = (
    "fits: everything on the GPU at this context; CPU offload: the fewest layers whose experts "
    "(dense models: whole layers) go to system RAM; max ctx: the largest context at that "
    "offload (with MTP when it drafts); desktop: the cheapest desktop VRAM reclaim that helps"
)
BEST_RULE: Final = (
    f"★ best: it runs at this context, with MTP when any file can, at {QUALITY_FLOOR_BPW}+ bits "
    "per weight when any file can, on the fewest CPU layers, then with the most bits per weight"
)

RECLAIM_WORDS: Final = {
    DesktopReclaim.NVIDIA_PROFILE: "NVIDIA driver profile",
    DesktopReclaim.IGPU: "display on the iGPU",
    DesktopReclaim.LLVMPIPE: "llvmpipe session",
}


@dataclass(frozen=True)
class FileFit:
    """One model planned for the target at the context asked for.

    ``offload`` is the fewest layers whose experts (MoE) or whole weights (dense) go to system
    RAM at ``ctx`` (0: everything on the GPU; None: it does not fit even then). ``max_ctx`` is
    the largest context that fits at that offload (None: none). ``reclaim`` is the cheapest
    desktop reclaim that lets everything stay on the GPU at ``ctx`` (``reclaim_offload`` 0),
    else the one that saves most when it lowers the offload (``reclaim_offload`` layers).
    """

    target: str
    is_gpu: bool
    ctx: int
    fits: bool | None
    offload: int | None
    offload_kind: str
    max_ctx: int | None
    mtp: bool
    mtp_line: str
    reclaim: DesktopReclaim | None
    reclaim_offload: int | None
    plan: Plan

    @property
    def runs(self) -> bool:
        """It fits at ``ctx``, moving what must move to system RAM."""
        return self.offload is not None if self.is_gpu else self.fits is not False

    def offload_text(self) -> str:
        if not self.is_gpu:
            return "— (CPU)"
        if self.offload is None:
            return "does not fit"
        return "none" if self.offload == 0 else f"{self.offload} {self.offload_kind}"

    def reclaim_text(self) -> str:
        if self.reclaim is None or self.reclaim_offload is None:
            return "—"
        after = "all on GPU" if self.reclaim_offload == 0 else f"{self.reclaim_offload} on CPU"
        return f"{RECLAIM_WORDS[self.reclaim]} → {after}"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ctx": self.ctx,
            "fits": self.fits,
            "on_gpu": self.is_gpu,
            "offload": self.offload,
            "offload_kind": self.offload_kind,
            "max_ctx": self.max_ctx,
            "mtp": self.mtp,
            "mtp_line": self.mtp_line,
            "reclaim": self.reclaim.value if self.reclaim is not None else None,
            "reclaim_offload": self.reclaim_offload,
            "runs": self.runs,
        }


def plan_remote_model(
    info: ModelInfo, plan: Plan, machine: MachineFacts, local_path: Path
) -> FileFit:
    """Plan one model for ``plan``'s device, engine, context and cache types.

    The only call into the planner in this module (through ``planning.resolve``). MTP stays
    on auto: on when the model has an MTP layer and the engine can run it.

    Args:
        info: The model's header.
        plan: The options (device, engine, ctx, cache types, desktop); its model is replaced.
        machine: Detection's answer (GPUs, engine builds), or ``machine_for(None)``.
        local_path: Where the file would be downloaded (the plan names it).
    """
    base = plan_with(plan, {"model.path": str(local_path), "model.card": None})
    pctx = PlanningContext(machine, info)
    resolved = resolve(base, pctx)
    eff = resolved.effective
    mtp = eff.mtp.enabled is True and eff.draft.path is None
    line = resolved.mtp.line
    kind = "expert layers" if info.is_moe else "layers"
    if info.is_moe:
        start = plan_with(eff, {"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 0})
    else:
        start = plan_with(eff, {"runtime.n_gpu_layers": None})
    start_resolved = resolve(start, pctx)
    target, budget = start_resolved.target, budget_for(start_resolved)
    if not target.device.is_gpu:
        return FileFit(
            target.device.name, False, plan.runtime.ctx, budget.fits, None, kind, None, mtp,
            line, None, None, start,
        )  # fmt: skip

    def on_gpu(p: Plan) -> bool:
        return budget_for(resolve(p, pctx)).devices[0].fits is not False

    def fewest(p: Plan) -> tuple[int | None, Plan, int | None]:
        """The fewest layers to move at ``p``'s context, the plan with them moved, and the
        largest context at that offload."""
        offload, ctx = offload_and_context(resolve(p, pctx))
        if not offload.fits or (info.is_moe and offload.lever != "experts"):
            return None, p, None
        if info.is_moe:
            return offload.plan.runtime.n_cpu_moe, offload.plan, _ctx(ctx)
        total = info.block_count + 1  # -ngl counts the output layer as one
        most = offload.plan.runtime.n_gpu_layers
        if most is None or most >= total:
            return 0, plan_with(p, {"runtime.n_gpu_layers": None}), _ctx(ctx)
        if most == 0:
            return None, p, None
        placed = plan_with(p, {"runtime.n_gpu_layers": most})
        return total - most, placed, _ctx(ctx)

    fits = budget.devices[0].fits
    offload, placed, max_ctx = fewest(start)
    reclaim, reclaim_offload = None, None
    if offload != 0:
        choices = [
            c
            for c in desktop_choices(eff, pctx)
            if c.reclaim not in (DesktopReclaim.NONE, eff.desktop)
            and (c.reclaim is not DesktopReclaim.IGPU or machine.igpu_card is not None)
        ]
        for c in choices:  # cheapest first
            if on_gpu(plan_with(start, {"desktop": c.reclaim.value})):
                reclaim, reclaim_offload = c.reclaim, 0
                break
        if reclaim is None and choices:
            biggest = max(choices, key=lambda c: c.saves_bytes).reclaim
            n = fewest(plan_with(start, {"desktop": biggest.value}))[0]
            if n is not None and (offload is None or n < offload):
                reclaim, reclaim_offload = biggest, n
    placed = plan_with(placed, {"mtp.enabled": base.mtp.enabled})  # auto stays auto
    return FileFit(
        target.device.name, True, plan.runtime.ctx, fits, offload, kind, max_ctx, mtp, line,
        reclaim, reclaim_offload, placed,
    )  # fmt: skip


def _ctx(answer: FitSuggestion) -> int | None:
    return answer.plan.runtime.ctx if answer.fits else None


@dataclass(frozen=True)
class TableRow:
    """One line of the table: the remote model, its header and its plan (or why none)."""

    header: RemoteHeader
    fit: FileFit | None
    error: str | None

    @property
    def info(self) -> ModelInfo | None:
        return self.header.info

    @property
    def quant(self) -> str:
        return self.header.model.quant or (self.info.file_type if self.info else None) or "?"

    @property
    def has_mtp(self) -> bool | None:
        return self.info.has_mtp if self.info is not None else None

    def to_json(self) -> dict[str, Any]:
        model = self.header.model
        info = self.info
        return {
            "file": model.path,
            "parts": [p.path for p in model.parts],
            "quant": self.quant,
            "size_bytes": model.size,
            "bits_per_weight": round(info.bits_per_weight, 3) if info else None,
            "mtp_layer": self.has_mtp,
            "plan": self.fit.to_json() if self.fit is not None else None,
            "error": self.error,
            "header_bytes_read": self.header.bytes_read,
            "header_requests": self.header.requests,
        }


def table_rows(
    headers: Sequence[RemoteHeader], plan: Plan, machine: MachineFacts, folder: Path
) -> list[TableRow]:
    """Plan every model whose header was read; the others keep their one sentence."""
    rows = []
    for header in headers:
        if header.info is None:
            rows.append(TableRow(header, None, header.error))
            continue
        local = folder / header.model.parts[0].name
        try:
            fit = plan_remote_model(header.info, plan, machine, local)
        except MtpStudioError as exc:
            rows.append(TableRow(header, None, f"cannot be planned: {str(exc).rstrip('.')}"))
            continue
        rows.append(TableRow(header, fit, None))
    return rows


def best_row(rows: Sequence[TableRow]) -> int | None:
    """The index of the best choice: it runs at the context asked for, with MTP when any does,
    above the quality floor when any is, on the fewest CPU layers, then the most bits per weight.
    None when nothing runs."""
    ranked = []
    for i, row in enumerate(rows):
        fit, info = row.fit, row.info
        if fit is None or info is None or not fit.runs:
            continue
        bpw = info.bits_per_weight
        key = (fit.mtp, bpw >= QUALITY_FLOOR_BPW, -(fit.offload or 0), bpw, -i)
        ranked.append((key, i))
    return max(ranked)[1] if ranked else None
