"""The benchmark's results: per-category rows and the aggregate, computed from samples (pure)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the HTTP client loads with a run, not with the history or a plan
    from mtpstudio.core.bench.client import CompletionSample

# The fields of the community's aggregate JSON (llama.cpp PR #22673 / #24340 threads).
AGGREGATE_FIELDS = (
    "n_requests",
    "total_predicted",
    "total_draft",
    "total_draft_accepted",
    "aggregate_accept_rate",
    "wall_s_total",
    "tok_s",
)


NOISY_SPREAD = 0.20
"""Repeats whose tok/s differ by more than this fraction of their median are a noisy measure."""


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


@dataclass(frozen=True)
class BenchSettings:
    """How the benchmark asks: 192 tokens at temperature 0 (the published setup) by default."""

    n_predict: int = 192
    repeats: int = 1
    warmup: bool = True
    temperature: float = 0.0
    ignore_eos: bool = True
    timeout_s: float = 600.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_predict": self.n_predict,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
            "cache_prompt": False,
        }


@dataclass(frozen=True)
class CategoryResult:
    """One category over its repeats: token counts summed, speeds and TTFT as medians."""

    category: str
    samples: tuple[CompletionSample, ...]

    @property
    def predicted(self) -> int:
        return sum(s.predicted_n for s in self.samples)

    @property
    def draft(self) -> int:
        return sum(s.draft_n for s in self.samples)

    @property
    def accepted(self) -> int:
        return sum(s.accepted_n for s in self.samples)

    @property
    def acceptance(self) -> float | None:
        return ratio(self.accepted, self.draft)

    @property
    def decode_tps(self) -> float | None:
        return _median([s.predicted_per_second for s in self.samples])

    @property
    def prefill_tps(self) -> float | None:
        return _median([s.prompt_per_second for s in self.samples])

    @property
    def ttft_ms(self) -> float | None:
        return _median([s.ttft_ms for s in self.samples if s.ttft_ms is not None])

    @property
    def client_decode_tps(self) -> float | None:
        return _median([s.client_decode_tps for s in self.samples if s.client_decode_tps])

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "n_requests": len(self.samples),
            "predicted": self.predicted,
            "draft": self.draft,
            "accepted": self.accepted,
            "acceptance": _round(self.acceptance, 4),
            # as measured: the stored run is what later estimates and comparisons read (a rate
            # rounded to 0.01 is 0.5 % off at 1 tok/s); the faces round what they show
            "decode_tok_s": self.decode_tps,
            "prefill_tok_s": _round(self.prefill_tps, 2),
            "ttft_ms": _round(self.ttft_ms, 1),
            "client_decode_tok_s": _round(self.client_decode_tps, 2),
            "samples": [s.to_dict() for s in self.samples],
        }


DEPTH_ACCEPT_FLOOR = 0.4
"""A draft position earns its place when at least this share of the drafts is accepted there:
below it, the verification work for that position is mostly thrown away (a rule of thumb until
the speed model of issue 37 prices each position)."""


@dataclass(frozen=True)
class MetricsCheck:
    """The server's own /metrics counters over the measured requests, next to the report's sums."""

    delta: dict[str, float]
    expected: dict[str, int]

    @property
    def matches(self) -> bool:
        return all(abs(self.delta.get(k, 0.0) - v) < 0.5 for k, v in self.expected.items())

    @property
    def accepted_per_position(self) -> tuple[float, ...]:
        """The share of drafts accepted at each draft position (the server's own counters
        over the measured requests; empty when it does not count them)."""
        drafts = self.delta.get("drafts", 0.0)
        positions = sorted(int(k[3:]) for k in self.delta if k.startswith("pos"))
        if drafts <= 0 or not positions:
            return ()
        return tuple(self.delta.get(f"pos{i}", 0.0) / drafts for i in range(positions[-1] + 1))

    def supported_depth(self, floor: float = DEPTH_ACCEPT_FLOOR) -> int | None:
        """The draft depth the acceptance supports: the positions, from the first, accepted in
        at least ``floor`` of the drafts (None: no per-position counters)."""
        rates = self.accepted_per_position
        if not rates:
            return None
        depth = 0
        for rate in rates:
            if rate < floor:
                break
            depth += 1
        return max(depth, 1)

    def to_dict(self) -> dict[str, Any]:
        return {"delta": self.delta, "expected": self.expected, "matches": self.matches,
                "accepted_per_position": [round(r, 4) for r in self.accepted_per_position],
                "supported_depth": self.supported_depth()}  # fmt: skip


@dataclass(frozen=True)
class VramPeak:
    """The highest VRAM use seen on one device while the benchmark ran (NVML samples)."""

    device: str
    used_bytes: int
    total_bytes: int
    samples: int

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "peak_used_bytes": self.used_bytes,
            "total_bytes": self.total_bytes,
            "peak_fraction": round(self.fraction, 4),
            "samples": self.samples,
        }


@dataclass
class BenchReport:
    """A benchmark run on one server: finished categories, aggregate, and what went wrong."""

    label: str
    flavour: str
    base_url: str
    endpoint: str
    settings: BenchSettings
    started_at: str
    categories: list[CategoryResult] = field(default_factory=list)
    wall_s_total: float = 0.0
    drafting_requested: bool | None = None
    warmup: CompletionSample | None = None
    metrics: MetricsCheck | None = None
    vram: list[VramPeak] = field(default_factory=list)
    error: str | None = None
    cancelled: bool = False
    plan_json: str | None = None
    engine_build: str | None = None
    device: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    speed_estimate: dict[str, Any] | None = None  # the plan's estimate beside this run

    @property
    def decode_tok_s(self) -> float | None:
        """The server's own decoding rate (prompt processing left out), the median over the
        categories: what the speed estimate's decode figure predicts."""
        return self.decode_tps_median

    @property
    def n_requests(self) -> int:
        return sum(len(c.samples) for c in self.categories)

    @property
    def total_predicted(self) -> int:
        return sum(c.predicted for c in self.categories)

    @property
    def total_draft(self) -> int:
        return sum(c.draft for c in self.categories)

    @property
    def total_draft_accepted(self) -> int:
        return sum(c.accepted for c in self.categories)

    @property
    def aggregate_accept_rate(self) -> float | None:
        return ratio(self.total_draft_accepted, self.total_draft)

    @property
    def tok_s(self) -> float | None:
        """Predicted tokens per wall-clock second over the measured requests."""
        return self.total_predicted / self.wall_s_total if self.wall_s_total > 0 else None

    def repeat_tok_s(self) -> list[float]:
        """Tokens per second of each repeat (every category's n-th sample), in run order."""
        n = max((len(c.samples) for c in self.categories), default=0)
        out = []
        for r in range(n):
            round_samples = [c.samples[r] for c in self.categories if len(c.samples) > r]
            wall = sum(s.wall_ms for s in round_samples) / 1000.0
            if wall > 0:
                out.append(sum(s.predicted_n for s in round_samples) / wall)
        return out

    @property
    def spread(self) -> float | None:
        """(fastest - slowest repeat) / their median; None with fewer than two repeats."""
        speeds = self.repeat_tok_s()
        if len(speeds) < 2:
            return None
        middle = statistics.median(speeds)
        return (max(speeds) - min(speeds)) / middle if middle > 0 else None

    @property
    def noisy(self) -> bool:
        return self.spread is not None and self.spread > NOISY_SPREAD

    def spread_text(self) -> str | None:
        """'tok/s over 3 repeats: 36.0 … 1,179.0 (spread 97 %)' (+ a warning when noisy)."""
        speeds = self.repeat_tok_s()
        spread = self.spread
        if spread is None:
            return None
        text = (
            f"{self.label}: tok/s over {len(speeds)} repeats "
            f"{' / '.join(f'{v:,.1f}' for v in speeds)} (spread {spread:.0%} of the median)"
        )
        if self.noisy:
            text += (
                ": a NOISY measurement (something else used the machine, or the server was "
                "still settling); medians are shown: run it again before trusting the figures"
            )
        return text

    @property
    def decode_tps_median(self) -> float | None:
        return _median([c.decode_tps for c in self.categories if c.decode_tps is not None])

    @property
    def drafting_warning(self) -> str | None:
        """The 'drafting really on?' flag: drafts were asked for but none came back."""
        if self.drafting_requested and self.categories and self.total_draft == 0:
            return (
                "DRAFTING IS OFF: MTP or a draft model was requested, but the server reported "
                "no drafted tokens; the figures below are plain decoding."
            )
        return None

    def aggregate(self) -> dict[str, Any]:
        return {
            "n_requests": self.n_requests,
            "total_predicted": self.total_predicted,
            "total_draft": self.total_draft,
            "total_draft_accepted": self.total_draft_accepted,
            "aggregate_accept_rate": _round(self.aggregate_accept_rate, 4),
            "wall_s_total": round(self.wall_s_total, 3),
            "tok_s": _round(self.tok_s, 2),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "engine_flavour": self.flavour,
            "base_url": self.base_url,
            "endpoint": self.endpoint,
            "started_at": self.started_at,
            "settings": self.settings.to_dict(),
            "drafting_requested": self.drafting_requested,
            "drafting_warning": self.drafting_warning,
            "categories": [c.to_dict() for c in self.categories],
            "aggregate": self.aggregate(),
            "repeat_tok_s": [round(v, 2) for v in self.repeat_tok_s()],
            "spread": _round(self.spread, 4),
            "noisy": self.noisy,
            "warmup": None if self.warmup is None else self.warmup.to_dict(),
            "metrics_check": None if self.metrics is None else self.metrics.to_dict(),
            "vram_peak": [v.to_dict() for v in self.vram],
            "error": self.error,
            "cancelled": self.cancelled,
            "engine_build": self.engine_build,
            "device": self.device,
            "env": dict(self.env),
            "plan": None if self.plan_json is None else _plan_data(self.plan_json),
            "speed_estimate": self.speed_estimate,
        }


def _plan_data(plan_json: str) -> Any:
    import json

    return json.loads(plan_json)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
