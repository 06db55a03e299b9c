"""What upstream's MoE cache (``--moe-cache-mib``, b11549 on) says in the server log.

The formats are ``src/llama-moe-cache.cpp``'s (the tree in the PyPI sdist ``xllamacpp``
2026.10.11549), printed at ``-lv 4`` (llama's INFO lines; mtpstudio launches upstream with it):

* at the load, per GPU: ``impl:      CUDA0 MoE cache size =  2048.00 MiB for 12240.00 MiB of
  host experts`` and per group ``impl: 30 layers, iq4_xs:  1284 slots (16.7%)`` (443-448);
* at the exit, per batch class: ``llama_moe_cache: ubatch <= 8: hits = 1200, misses = 400, hit
  rate = 75.00%, uploaded = 512.00 MiB`` (585-599);
* warnings: ``no layer has all of its experts in host memory, MoE cache is disabled`` (266) and
  ``MoE cache budget is too small for 3 layers, they are not cached`` (322).

The log is outside input: counts and sizes are read only where they have the printed shape and
are possible (a rate from 0 to 100 %, sizes below 64 TiB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["CacheGroupLine", "CacheStats", "MoeCacheLog", "parse_moe_cache_log"]

_SIZE = re.compile(
    r"\bimpl:\s+(\S+) MoE cache size =\s*([\d.]+) MiB for ([\d.]+) MiB of host experts"
)
_GROUP = re.compile(r"\bimpl:\s+(\d+) layers, (\S+):\s+(\d+) slots \(([\d.]+)%\)")
_STATS = re.compile(
    r"llama_moe_cache: (ubatch <= 8|ubatch  > 8): hits = (\d+), misses = (\d+), "
    r"hit rate = ([\d.]+)%, uploaded = ([\d.]+) MiB"
)
_DISABLED = re.compile(r"no layer has all of its experts in host memory, MoE cache is disabled")
_TOO_SMALL = re.compile(r"MoE cache budget is too small for (\d+) layers")
_REFUSED = re.compile(
    r"MoE cache (requires a GPU backend|requires a MoE model|does not support tensor "
    r"parallelism|is too small to hold the experts of one token)"
)
MAX_MIB = 64.0 * 1024 * 1024


@dataclass(frozen=True)
class CacheGroupLine:
    """One group of cached layers as the engine logged it."""

    layers: int
    tensor_type: str
    slots: int
    share_pct: float


@dataclass(frozen=True)
class CacheStats:
    """The engine's own count at exit for one batch class (``ubatch <= 8`` or ``> 8``)."""

    batches: str
    hits: int
    misses: int
    hit_rate_pct: float
    uploaded_mib: float


@dataclass
class MoeCacheLog:
    """Everything the log says about the MoE cache."""

    sizes_mib: dict[str, float] = field(default_factory=dict)
    """The cache's buffer per device (``CUDA0``)."""
    host_experts_mib: dict[str, float] = field(default_factory=dict)
    groups: list[CacheGroupLine] = field(default_factory=list)
    stats: list[CacheStats] = field(default_factory=list)
    disabled: str | None = None
    """Why the engine runs without it, or refused it (its words)."""

    @property
    def hit_rate(self) -> float | None:
        """Hits over lookups of every batch class (None: no lookups counted)."""
        hits = sum(s.hits for s in self.stats)
        total = hits + sum(s.misses for s in self.stats)
        return hits / total if total else None

    def words(self) -> str | None:
        """One line for the benchmark's report (None: the log says nothing of a cache)."""
        if self.disabled is not None:
            return f"MoE cache: {self.disabled}"
        rate = self.hit_rate
        if rate is None:
            if not self.sizes_mib:
                return None
            size = sum(self.sizes_mib.values())
            return f"MoE cache {size:,.0f} MiB: no hit rate logged (it is printed at exit)"
        hits = sum(s.hits for s in self.stats)
        misses = sum(s.misses for s in self.stats)
        uploaded = sum(s.uploaded_mib for s in self.stats)
        return (
            f"MoE cache hit rate {rate:.1%} ({hits:,} hits, {misses:,} misses, "
            f"{uploaded:,.0f} MiB copied to the card), as the engine counted it"
        )


def parse_moe_cache_log(text: str) -> MoeCacheLog:
    """The MoE cache's lines of a server log (nothing found: an empty ``MoeCacheLog``)."""
    out = MoeCacheLog()
    for line in text.splitlines():
        if (m := _SIZE.search(line)) and _mib(m.group(2)) is not None:
            out.sizes_mib[m.group(1)[:32]] = _mib(m.group(2)) or 0.0
            out.host_experts_mib[m.group(1)[:32]] = _mib(m.group(3)) or 0.0
        elif m := _GROUP.search(line):
            share = float(m.group(4))
            if share <= 100.0:
                out.groups.append(
                    CacheGroupLine(int(m.group(1)), m.group(2)[:16], int(m.group(3)), share)
                )
        elif m := _STATS.search(line):
            rate, uploaded = float(m.group(4)), _mib(m.group(5))
            if rate <= 100.0 and uploaded is not None:
                out.stats.append(
                    CacheStats(m.group(1), int(m.group(2)), int(m.group(3)), rate, uploaded)
                )
        elif _DISABLED.search(line):
            out.disabled = "no layer keeps all of its experts in RAM, so the engine disabled it"
        elif m := _TOO_SMALL.search(line):
            out.disabled = out.disabled or f"too small for {m.group(1)} layers, left uncached"
        elif m := _REFUSED.search(line):
            out.disabled = f"the engine refused it: MoE cache {m.group(1)}"
    return out


def _mib(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value < MAX_MIB else None
