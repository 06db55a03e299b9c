"""The tuner's candidate space: which knobs make sense for this model and device, and their values.

Pure: a TuneSpace lists values per knob (empty = keep the starting plan's value); ``expand``
turns it into candidates, each a set of dotted ``plan_with`` changes from the starting Plan.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import CacheType, MoePlacement
from mtpstudio.core.plan.schema import Plan

DRAFT_MAX_VALUES = (1, 2, 3, 4)
P_MIN_VALUES = (0.5, 0.75, 0.9)
DRAFT_CACHE_VALUES = (CacheType.F16, CacheType.Q8_0)
# The published winner left 1664 MiB free (--fit-margin 1664); try around the plan's own margin.
FIT_MARGIN_PUBLISHED = 1664
FIT_MARGIN_STEP = 512
N_CPU_MOE_STEP = 2


@dataclass(frozen=True)
class MoeChoice:
    """Where the experts go: the engine's fit with a margin, or the first N layers on the CPU."""

    placement: MoePlacement
    value: int

    @property
    def label(self) -> str:
        if self.placement is MoePlacement.FIT:
            return f"fit-margin={self.value}"
        return f"n-cpu-moe={self.value}"

    def changes(self) -> dict[str, Any]:
        if self.placement is MoePlacement.FIT:
            return {"runtime.moe": "fit", "runtime.fit_margin_mib": self.value}
        return {"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": self.value}


@dataclass(frozen=True)
class TuneSpace:
    """Values to try per knob; an empty tuple keeps the starting plan's value."""

    draft_max: tuple[int, ...] = ()
    p_min: tuple[float, ...] = ()
    draft_cache: tuple[CacheType, ...] = ()
    kv_cache: tuple[CacheType, ...] = ()
    moe: tuple[MoeChoice, ...] = ()
    threads: tuple[int | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "draft_max": list(self.draft_max),
            "p_min": list(self.p_min),
            "draft_cache": [c.value for c in self.draft_cache],
            "kv_cache": [c.value for c in self.kv_cache],
            "moe": [m.label for m in self.moe],
            "threads": list(self.threads),
        }


@dataclass(frozen=True)
class Candidate:
    """One configuration to try: its short label and the changes from the starting plan."""

    label: str
    changes: dict[str, Any]

    @property
    def n_changed(self) -> int:
        return len(self.changes)


def drafts(plan: Plan, model: ModelInfo | None) -> bool:
    """The plan drafts tokens: MTP on a model that has an MTP layer, or a draft model."""
    if plan.draft.path is not None:
        return True
    # MTP on, or on auto (which turns it on where the model has an MTP layer)
    return plan.mtp.enabled is not False and (model is None or model.has_mtp)


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def default_space(
    plan: Plan,
    model: ModelInfo | None,
    *,
    gpu: bool,
    cpu_count: int | None,
    kv_types: tuple[CacheType, ...] = (),
) -> TuneSpace:
    """The knobs that make sense here: drafting knobs only when the plan drafts, MoE knobs only
    for an MoE model on a GPU, threads around the machine's cores."""
    mtp = plan.mtp
    drafting = drafts(plan, model)
    moe: tuple[MoeChoice, ...] = ()
    if gpu and model is not None and model.is_moe:
        rt = plan.runtime
        if rt.moe is MoePlacement.FIT:
            m = rt.fit_margin_mib
            margins = sorted({m, max(256, m - FIT_MARGIN_STEP), m + FIT_MARGIN_STEP,
                              FIT_MARGIN_PUBLISHED})  # fmt: skip
            moe = tuple(MoeChoice(MoePlacement.FIT, v) for v in margins)
        elif rt.moe is MoePlacement.N_CPU_MOE:
            n = rt.n_cpu_moe
            values = sorted({max(0, min(model.n_layer, n + d))
                             for d in (-N_CPU_MOE_STEP, 0, N_CPU_MOE_STEP)})  # fmt: skip
            moe = tuple(MoeChoice(MoePlacement.N_CPU_MOE, v) for v in values)
    threads: tuple[int | None, ...] = ()
    if cpu_count:
        threads = _unique(
            t for t in (plan.runtime.threads, cpu_count, max(1, cpu_count // 2)) if t != 0
        )
    return TuneSpace(
        draft_max=_unique((*DRAFT_MAX_VALUES, mtp.draft_max)) if drafting else (),
        p_min=_unique((*P_MIN_VALUES, mtp.draft_p_min)) if drafting else (),
        draft_cache=_unique((mtp.cache_type_k, *DRAFT_CACHE_VALUES)) if drafting else (),
        kv_cache=_unique(kv_types),
        moe=moe,
        threads=threads,
    )


def _knobs(plan: Plan, space: TuneSpace) -> list[list[tuple[str, dict[str, Any]]]]:
    """Per knob: (label part, changes) for every value; the plan's own value has no changes."""
    mtp, rt = plan.mtp, plan.runtime
    knobs: list[list[tuple[str, dict[str, Any]]]] = []

    def add(values: Iterable[tuple[str, dict[str, Any], bool]]) -> None:
        knobs.append([("", {}) if same else (text, ch) for text, ch, same in values])

    if space.draft_max:
        add((f"dmax={v}", {"mtp.draft_max": v, "mtp.draft_min": min(mtp.draft_min, v)},
             v == mtp.draft_max) for v in space.draft_max)  # fmt: skip
    if space.p_min:
        add((f"pmin={v:g}", {"mtp.draft_p_min": v}, v == mtp.draft_p_min) for v in space.p_min)
    if space.draft_cache:
        add((f"dkv={c.value}", _kv("mtp", c), c is mtp.cache_type_k and c is mtp.cache_type_v)
            for c in space.draft_cache)  # fmt: skip
    if space.kv_cache:
        add((f"kv={c.value}", _kv("runtime", c), c is rt.cache_type_k and c is rt.cache_type_v)
            for c in space.kv_cache)  # fmt: skip
    if space.moe:
        add((m.label, m.changes(), _same_moe(plan, m)) for m in space.moe)
    if space.threads:
        add((f"threads={t if t is not None else 'auto'}", {"runtime.threads": t},
             t == rt.threads) for t in space.threads)  # fmt: skip
    return knobs


def _kv(section: str, c: CacheType) -> dict[str, Any]:
    return {f"{section}.cache_type_k": c.value, f"{section}.cache_type_v": c.value}


def _same_moe(plan: Plan, m: MoeChoice) -> bool:
    rt = plan.runtime
    if m.placement is not rt.moe:
        return False
    return m.value == (rt.fit_margin_mib if m.placement is MoePlacement.FIT else rt.n_cpu_moe)


def expand(plan: Plan, space: TuneSpace, ctx_floor: int | None = None) -> list[Candidate]:
    """Every combination except the starting plan itself, fewest changes first (stable order).

    A context floor above the plan's context raises every candidate's context to it.
    """
    floor: dict[str, Any] = {}
    if ctx_floor is not None and ctx_floor > plan.runtime.ctx:
        floor = {"runtime.ctx": ctx_floor}
    seen: set[str] = set()
    out: list[Candidate] = []
    for combo in itertools.product(*_knobs(plan, space)):
        changes: dict[str, Any] = dict(floor)
        parts: list[str] = []
        for text, ch in combo:
            changes.update(ch)
            if text:
                parts.append(text)
        if not parts and not floor:
            continue  # the starting plan: measured as the baseline
        key = repr(sorted(changes.items()))
        if key in seen:
            continue
        seen.add(key)
        if floor:
            parts.insert(0, f"ctx={ctx_floor}")
        out.append(Candidate(" ".join(parts), changes))
    out.sort(key=lambda c: len(c.label.split()))
    return out
