"""MTP's effect on decoding: tokens per verification step from the draft depth and an acceptance.

The benchmark reports acceptance as accepted / drafted tokens. With a draft depth ``n`` and a
draft that stops at its first rejected token, a position is accepted with probability ``p`` given
the ones before it were (the speed model's assumption), so a step accepts ``p + p² + … + pⁿ``
tokens on average and the acceptance is that sum over ``n``. A measured acceptance at one depth
therefore gives ``p``, and ``p`` gives the tokens per step at any depth. Where the server counted
acceptance per position (upstream's ``/metrics``), those shares are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Acceptance:
    """An acceptance figure and where it comes from.

    Attributes:
        rate: accepted / drafted tokens, as the benchmark reports it.
        depth: the draft depth it was measured (or assumed) at.
        per_position: the share of drafts accepted at each position, when counted.
        source: in words: a run, or the default and why.
        measured: True when a benchmark of this model on this engine measured it.
    """

    rate: float
    depth: int
    per_position: tuple[float, ...] = ()
    source: str = ""
    measured: bool = False

    def accepted_per_step(self, depth: int) -> float:
        """Tokens accepted per verification step at draft depth ``depth``."""
        if depth <= 0:
            return 0.0
        shares = self.per_position
        if shares and depth <= len(shares):
            return sum(shares[:depth])
        p = position_rate(self.rate, self.depth)
        if shares:  # beyond the counted positions: each next one as likely as p says
            last = shares[-1]
            extra = [last * p**i for i in range(1, depth - len(shares) + 1)]
            return sum(shares) + sum(extra)
        return sum(p**i for i in range(1, depth + 1))

    def tokens_per_step(self, depth: int) -> float:
        """Tokens one verification step yields: the accepted drafts and the target's own."""
        return 1.0 + self.accepted_per_step(depth)

    def to_json(self) -> dict[str, object]:
        return {
            "rate": round(self.rate, 4),
            "at_depth": self.depth,
            "per_position": [round(r, 4) for r in self.per_position],
            "source": self.source,
            "measured": self.measured,
        }


def position_rate(rate: float, depth: int) -> float:
    """The per-position ``p`` whose ``(p + … + p^depth) / depth`` is ``rate`` (bisection)."""
    rate = min(max(rate, 0.0), 1.0)
    if depth <= 1 or rate in (0.0, 1.0):
        return rate
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, depth + 1)) / depth < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


DEFAULT_ACCEPTANCE = Acceptance(
    rate=0.73,
    depth=3,
    source="default: 0.73 at draft depth 3, the middle of the published Qwen3.6 MTP runs at "
    "that depth (0.618 on an RTX 2060, 0.733 on an H800, 0.865 on two Arc B70; "
    "reference/peers.md §4.1-4.2); no benchmark of this model on this engine yet",
)
"""What the estimate assumes until a benchmark measures this model's acceptance."""

ZERO_ACCEPTANCE = Acceptance(
    rate=0.0,
    depth=1,
    source="a zero-weight model: its drafts are never right",
)
