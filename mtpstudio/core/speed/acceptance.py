"""MTP's effect on decoding: drafts and tokens per verification step, from the draft depth, p-min
and an acceptance.

A step drafts up to ``depth`` tokens, one draft pass each, and stops early where the draft's own
top probability falls below p-min (``--spec-draft-p-min``; ik's ``p_min``); the target then
verifies the drafts in one pass and keeps them up to the first it rejects, plus a token of its
own. The servers report acceptance as accepted / drafted tokens, so the drafts a step really
makes matter as much as the rate: the published setup's counters (1,728 predicted, 1,120
drafted, 1,052 accepted at depth 3, p-min 0.75; reference/world-2026-12.md §1) are 676 steps of
1.66 drafts and 2.56 tokens, not the 1 + 3 × 0.94 = 3.82 a full draft would give.

The model: a draft goes on to its next position with probability ``q`` (p-min's continuation),
and a drafted token is accepted with probability ``a`` given the ones before it were. A step
then drafts ``q + q² + … + q^d`` tokens and accepts ``qa + (qa)² + … + (qa)^d``, and the reported
acceptance is their ratio. ``q`` at p-min 0.75 comes from the published counters; a p-min of 0
never stops a draft (``q = 1``), a p-min of 1 always does, linear between those three points
(assumed). A run's counters (``from_counters``) give ``q`` and ``a`` at its depth exactly, and
so its tokens per step: predicted / (predicted − accepted). Where the server counted acceptance
per position (upstream's ``/metrics``), those shares are the accepted tokens per position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PUBLISHED_PREDICTED, PUBLISHED_DRAFTED, PUBLISHED_ACCEPTED = 1728, 1120, 1052
"""The published setup's counters (RTX 4070 SUPER, upstream, depth 3, p-min 0.75)."""
PUBLISHED_DEPTH = 3
PUBLISHED_P_MIN = 0.75


def _geometric(x: float, depth: int) -> float:
    return sum(x**i for i in range(1, depth + 1))


def _bisect(rising: Callable[[float], float], target: float) -> float:
    """The ``x`` in [0, 1] where the rising ``rising(x)`` reaches ``target`` (clamped)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if rising(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _solve(target: float, depth: int) -> float:
    """The ``x`` in [0, 1] whose ``x + … + x^depth`` is ``target`` (clamped)."""
    if depth <= 0 or target <= 0:
        return 0.0
    if target >= depth:
        return 1.0
    return _bisect(lambda x: _geometric(x, depth), target)


def drafted_chances(depth: int, q: float, first_kept: bool = False) -> list[float]:
    """The chance each position 1..depth is drafted, each token passing p-min with chance
    ``q``: upstream keeps position ``i`` when the first ``i`` all passed (``q^i``); ik keeps
    the first whatever its probability, and the ``i``-th after it when all ``i`` passed (the
    first's own check only stops the draft after keeping it)."""
    if first_kept:
        return [1.0] + [q ** (i + 1) for i in range(1, depth)]
    return [q ** (i + 1) for i in range(depth)]


def draft_attempts(depth: int, q: float, first_kept: bool = False) -> float:
    """Single-token draft passes a step runs: upstream tries position ``i`` when the ones
    before it passed (the pass whose token fails runs too); ik's first draft comes from the
    pass over the accepted tokens, and it tries position ``i`` when the ``i - 1`` before
    passed."""
    if first_kept:
        return sum(q**i for i in range(1, depth))
    return sum(q**i for i in range(depth))


def _solve_chances(drafted: float, depth: int, first_kept: bool) -> float:
    """The ``q`` whose positions' chances add up to ``drafted`` (bisection; clamped)."""
    if depth <= 0 or drafted <= 0:
        return 0.0
    return _bisect(lambda q: sum(drafted_chances(depth, q, first_kept)), drafted)


PUBLISHED_CONTINUATION = _solve(
    PUBLISHED_DRAFTED / (PUBLISHED_PREDICTED - PUBLISHED_ACCEPTED), PUBLISHED_DEPTH
)
"""p-min 0.75's continuation ``q`` from the published counters (1.66 drafts a step at depth 3)."""


def continuation(p_min: float) -> float:
    """The chance a draft goes on to its next position at ``p_min`` (see the module)."""
    p = min(max(p_min, 0.0), 1.0)
    if p <= PUBLISHED_P_MIN:
        return 1.0 - (1.0 - PUBLISHED_CONTINUATION) * p / PUBLISHED_P_MIN
    return PUBLISHED_CONTINUATION * (1.0 - p) / (1.0 - PUBLISHED_P_MIN)


@dataclass(frozen=True)
class Acceptance:
    """An acceptance figure and where it comes from.

    Attributes:
        rate: accepted / drafted tokens, as the benchmark reports it.
        depth: the draft depth it was measured (or assumed) at.
        per_position: the accepted tokens per step at each position, when counted.
        source: in words: a run, or the default and why.
        measured: True when a benchmark of this model on this engine measured it.
        p_min: the p-min it was measured at.
        drafts_per_step: the drafts a step made where it was measured (a run's counters:
            drafted / steps); None: p-min's continuation at ``p_min`` says.
    """

    rate: float
    depth: int
    per_position: tuple[float, ...] = ()
    source: str = ""
    measured: bool = False
    p_min: float = PUBLISHED_P_MIN
    drafts_per_step: float | None = None
    first_kept: bool = False
    """Measured on an engine that keeps the first draft token whatever p-min (ik)."""

    def continuation(self, p_min: float | None = None) -> float:
        """``q``: measured where the counters were, else p-min's rule."""
        p = self.p_min if p_min is None else p_min
        if self.drafts_per_step is not None and abs(p - self.p_min) < 1e-9:
            return _solve_chances(self.drafts_per_step, self.depth, self.first_kept)
        return continuation(p)

    def position_acceptance(self) -> float:
        """``a``: the chance a drafted token is accepted given the ones before it were."""
        chances = drafted_chances(self.depth, self.continuation(), self.first_kept)
        drafted = sum(chances)
        if drafted <= 0:
            return 0.0
        return _bisect(
            lambda a: sum(c * a ** (i + 1) for i, c in enumerate(chances)), self.rate * drafted
        )

    def chances(
        self, depth: int, p_min: float | None = None, first_kept: bool = False
    ) -> list[float]:
        """The chance each draft position 1..depth is drafted in a step."""
        return drafted_chances(depth, self.continuation(p_min), first_kept)

    def drafts_at(self, depth: int, p_min: float | None = None, first_kept: bool = False) -> float:
        """Tokens drafted per step at ``depth`` and ``p_min``."""
        return sum(self.chances(depth, p_min, first_kept))

    def accepted_per_step(
        self, depth: int, p_min: float | None = None, first_kept: bool = False
    ) -> float:
        """Tokens accepted per verification step at draft depth ``depth``."""
        if depth <= 0:
            return 0.0
        shares = self.per_position
        same = (p_min is None or abs(p_min - self.p_min) < 1e-9) and first_kept == self.first_kept
        if shares and depth <= len(shares) and same:
            return sum(shares[:depth])
        a = self.position_acceptance()
        chances = self.chances(depth, p_min, first_kept)
        accepted = [c * a ** (i + 1) for i, c in enumerate(chances)]
        if shares and same:  # beyond the counted positions: as the model says
            return sum(shares) + sum(accepted[len(shares) :])
        return sum(accepted)

    def tokens_per_step(
        self, depth: int, p_min: float | None = None, first_kept: bool = False
    ) -> float:
        """Tokens one verification step yields: the accepted drafts and the target's own."""
        return 1.0 + self.accepted_per_step(depth, p_min, first_kept)

    def to_json(self) -> dict[str, object]:
        return {
            "rate": round(self.rate, 4),
            "at_depth": self.depth,
            "at_p_min": self.p_min,
            "drafts_per_step": None
            if self.drafts_per_step is None
            else round(self.drafts_per_step, 4),
            "per_position": [round(r, 4) for r in self.per_position],
            "source": self.source,
            "measured": self.measured,
        }


def from_counters(
    predicted: int,
    drafted: int,
    accepted: int,
    depth: int,
    p_min: float,
    source: str,
    first_kept: bool = False,
) -> Acceptance | None:
    """A run's acceptance from its counters (None: they do not describe drafting steps)."""
    steps = predicted - accepted
    if steps <= 0 or drafted <= 0 or not 0 <= accepted <= drafted or depth <= 0:
        return None
    return Acceptance(
        rate=accepted / drafted,
        depth=depth,
        source=source,
        measured=True,
        p_min=p_min,
        drafts_per_step=min(float(depth), drafted / steps),
        first_kept=first_kept,
    )


def given_acceptance(rate: float, depth: int, p_min: float = PUBLISHED_P_MIN) -> Acceptance:
    """An acceptance the user gave (``--acceptance``), at the plan's depth and p-min."""
    return Acceptance(
        rate=min(max(rate, 0.0), 1.0),
        depth=max(1, depth),
        source=f"given: {rate:.2f} accepted / drafted at the plan's draft depth {depth} and "
        f"p-min {p_min:g}",
        p_min=p_min,
    )


def position_rate(rate: float, depth: int) -> float:
    """The per-position ``p`` whose ``(p + … + p^depth) / depth`` is ``rate`` (full drafts)."""
    rate = min(max(rate, 0.0), 1.0)
    if depth <= 1 or rate in (0.0, 1.0):
        return rate
    return _solve(rate * depth, depth)


DEFAULT_ACCEPTANCE = Acceptance(
    rate=PUBLISHED_ACCEPTED / PUBLISHED_DRAFTED,
    depth=PUBLISHED_DEPTH,
    source="default: the published setup's counters on upstream (Qwen3.6-35B-A3B, depth 3, "
    "p-min 0.75, nine prompt categories: 1,052 of 1,120 drafts accepted, 1.66 drafts a step; "
    "reference/world-2026-12.md §1); no benchmark of this model on this engine yet",
    p_min=PUBLISHED_P_MIN,
    drafts_per_step=PUBLISHED_DRAFTED / (PUBLISHED_PREDICTED - PUBLISHED_ACCEPTED),
)
"""What the estimate assumes on upstream until a benchmark measures this model's acceptance."""

IK_DEFAULT_ACCEPTANCE = Acceptance(
    rate=0.8749,
    depth=PUBLISHED_DEPTH,
    source="default: the published setup on ik_llama.cpp (Qwen3.6-35B-A3B, depth 3, p-min "
    "0.75: 0.8749 accepted; reference/world-2026-12.md §1); no benchmark of this model on this "
    "engine yet",
    p_min=PUBLISHED_P_MIN,
    first_kept=True,
)
"""The same for ik_llama.cpp (which keeps its first draft whatever p-min)."""


def default_acceptance(first_kept: bool) -> Acceptance:
    """The cited acceptance of an engine (by how it drafts: ik keeps its first draft), until a
    benchmark measures one."""
    return IK_DEFAULT_ACCEPTANCE if first_kept else DEFAULT_ACCEPTANCE


ZERO_ACCEPTANCE = Acceptance(
    rate=0.0,
    depth=1,
    source="a zero-weight model: its drafts are never right",
)
