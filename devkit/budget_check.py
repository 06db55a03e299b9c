"""Predicted vs logged buffers: one load configuration, the plan that says the same, the diff."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mtpstudio.core.engines.profiles import ik_stages, upstream, upstream_moe_cache
from mtpstudio.core.engines.profiles.engine_profile import EngineProfile, MtpRequest
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.units import MIB

EXACT_MIB = 0.01
"""The engine prints two decimals: an exact term is within this."""
COMPUTE_TARGET = 0.05
"""Compute buffers: the full-size target is within 5 %..."""
COMPUTE_LOW_LIMIT = -0.02
"""...and never more than 2 % below the engine's buffer (the dangerous side)."""
BUILD_PROFILES: dict[str, EngineProfile] = {
    "upstream": upstream.PROFILE,
    "upstream-b11549": upstream_moe_cache.PROFILE,
    "ik": ik_stages.PROFILE,
}
"""The era of each build of the test bench (scripts/build_engines.py), by its name: b11434,
b11549, ik 8337e4c."""
SEGMENTS = (
    "weights",
    "kv_cache",
    "recurrent_state",
    "mtp_kv_cache",
    "output",
    "compute",
    "mtp_compute",
)


@dataclass(frozen=True)
class LoadConfig:
    """One load: the server options and the Plan that asks for the same thing."""

    name: str
    ctx: int
    ctk: str = "f16"
    ctv: str = "f16"
    parallel: int = 1
    fa: str = "on"
    ubatch: int = 512
    mtp: int = 0  # draft max; 0 = MTP off
    draft_ctk: str = "f16"
    draft_ctv: str = "f16"
    moe: str = "gpu"
    n_cpu_moe: int = 0
    engine: str = "upstream"
    """The build of the test bench (``BUILD_PROFILES``)."""
    moe_cache_mib: int = 0  # --moe-cache-mib (upstream b11549 on, a GPU backend only)
    extra: tuple[str, ...] = field(default=())

    @property
    def profile(self) -> EngineProfile:
        return BUILD_PROFILES[self.engine]

    def server_args(self) -> list[str]:
        """Every option of the load, the context size and slots included."""
        return ["-c", str(self.ctx), "-np", str(self.parallel), *self.engine_args()]

    def engine_args(self) -> list[str]:
        """The options besides the context size and slots (which a test bench may set)."""
        args = ["-ctk", self.ctk, "-ctv", self.ctv, "-fa", self.fa, "-ub", str(self.ubatch)]
        verbosity = self.profile.launch_verbosity
        if verbosity is not None:  # the level that logs the buffer sizes
            args += ["-lv", verbosity]
        mtp = self.profile.mtp
        if self.mtp and mtp.request is MtpRequest.SPEC_TYPE_PARAMS and mtp.params is not None:
            args += ["--spec-type", mtp.params.value(self.mtp, "0.75")]  # ik 8337e4c's stage
        elif self.mtp:
            args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(self.mtp)]
            args += ["--spec-draft-type-k", self.draft_ctk, "--spec-draft-type-v", self.draft_ctv]
        if self.moe == "all_cpu":
            args += ["--cpu-moe"]
        elif self.moe == "n_cpu_moe":
            args += ["--n-cpu-moe", str(self.n_cpu_moe)]
        if self.moe_cache_mib:
            args += ["--moe-cache-mib", str(self.moe_cache_mib)]
        return args + list(self.extra)

    def plan_data(self) -> dict[str, Any]:
        return {
            "device": "cpu",
            "engine": {"flavour": self.profile.flavour.value},
            "runtime": {
                "ctx": self.ctx,
                "cache_type_k": self.ctk,
                "cache_type_v": self.ctv,
                "parallel": self.parallel,
                "flash_attn": self.fa,
                "ubatch": self.ubatch,
                "moe": self.moe,
                "n_cpu_moe": self.n_cpu_moe,
                "moe_cache_mib": self.moe_cache_mib,
            },
            "mtp": {
                "enabled": bool(self.mtp),
                "draft_max": max(self.mtp, 1),
                "cache_type_k": self.draft_ctk,
                "cache_type_v": self.draft_ctv,
            },
        }


def measured(config: LoadConfig, log: str) -> dict[str, float]:
    """The segments the engine logged (MiB, all buffers of a kind added up)."""
    report = parse_load_log(log)
    main = report.context("main")
    if main is None:
        raise ValueError("no context lines in the log")
    out = {
        "weights": sum(report.model.values()),
        "kv_cache": sum(main.kv.values()),
        "recurrent_state": sum(main.recurrent.values()),
        "output": sum(main.output.values()),
        "compute": sum(main.compute.values()),
    }
    mtp = report.context("mtp")
    if config.mtp:
        if mtp is None:
            raise ValueError("MTP was asked for but no MTP context was logged")
        out["mtp_kv_cache"] = sum(mtp.kv.values())
        out["mtp_compute"] = sum(mtp.compute.values())
    return out


def predicted(config: LoadConfig, info: ModelInfo) -> dict[str, float]:
    """The budget's figures for the same segments, on a CPU-only build (MiB)."""
    plan = plan_from_dict(config.plan_data())
    facts = config.profile.memory
    budget = compute_budget(plan, info, TargetDevice("CPU", "CPU", None), facts)
    p = {k: v / MIB for k, v in budget.parts.items()}
    out = {
        "weights": p["weights_total"],
        "kv_cache": p["kv_cache"] + (p["recurrent_state"] if facts.recurrent_in_kv_buffer else 0),
        "recurrent_state": 0.0 if facts.recurrent_in_kv_buffer else p["recurrent_state"],
        "output": p["output"],
        "compute": p["compute"],
    }
    if config.mtp:
        out["mtp_kv_cache"] = p["mtp_kv_cache"]
        out["mtp_compute"] = p["mtp_compute"]
    return out


@dataclass(frozen=True)
class SegmentRow:
    """One segment of one load: predicted and logged MiB."""

    model: str
    config: str
    segment: str
    predicted: float
    logged: float

    @property
    def is_compute(self) -> bool:
        return self.segment.endswith("compute")

    @property
    def error(self) -> float:
        """MiB off for exact terms, relative error for compute buffers."""
        diff = self.predicted - self.logged
        if self.is_compute:
            return diff / self.logged if self.logged else 0.0
        return diff

    @property
    def ok(self) -> bool:
        if self.is_compute:
            return abs(self.error) <= COMPUTE_TARGET and self.error >= COMPUTE_LOW_LIMIT
        return abs(self.error) <= EXACT_MIB

    @property
    def safe(self) -> bool:
        """Exact terms within 0.01 MiB, compute buffers not below the engine's (for figures
        planned with a safety margin, which are not meant to be within 5 %)."""
        if self.is_compute:
            return self.error >= 0
        return self.ok


def rows_for(model: str, config: LoadConfig, info: ModelInfo, log: str) -> list[SegmentRow]:
    """Every segment the log has, with its prediction."""
    got = measured(config, log)
    want = predicted(config, info)
    return [
        SegmentRow(model, config.name, seg, want[seg], got[seg]) for seg in SEGMENTS if seg in got
    ]


def render_table(
    rows: list[SegmentRow], is_ok: Callable[[SegmentRow], bool] | None = None
) -> list[str]:
    """The predicted-vs-logged table and the largest error per segment.

    ``is_ok`` decides a row's MISS flag (default: ``SegmentRow.ok``).
    """
    check = is_ok or (lambda r: r.ok)
    lines = [
        f"{'model':24} {'configuration':30} {'segment':16} {'predicted':>10} {'logged':>10}"
        f" {'error':>9}",
    ]
    for r in rows:
        err = f"{100 * r.error:+.1f}%" if r.is_compute else f"{r.error:+.2f}"
        flag = "" if check(r) else "  MISS"
        lines.append(
            f"{r.model:24} {r.config:30} {r.segment:16} {r.predicted:10.2f} {r.logged:10.2f}"
            f" {err:>9}{flag}"
        )
    lines.append("largest error per segment:")
    for seg in SEGMENTS:
        seg_rows = [r for r in rows if r.segment == seg]
        if not seg_rows:
            continue
        worst = max(seg_rows, key=lambda r: abs(r.error))
        if worst.is_compute:
            low = min(seg_rows, key=lambda r: r.error)
            shown = (
                f"{100 * abs(worst.error):.2f}% (target 5%)    at {worst.model} / {worst.config};"
                f" lowest {100 * low.error:+.2f}% (limit -2%)"
            )
        else:
            shown = f"{abs(worst.error):.3f} MiB (target 0.01) at {worst.model} / {worst.config}"
        lines.append(f"  {seg:16} {shown}")
    return lines
