"""The MoE cache (``--moe-cache-mib``, upstream b11549) as planned: what it allocates, which
layers it holds, what it does for speed, and the lever that offers it.

The rules are read from ``src/llama-moe-cache.cpp`` of the xllamacpp 2026.10.11549 tree; the
cache needs a GPU backend (the CPU build refuses it: tests/server/test_todays_engines_real.py),
so these check the rules at the real model's full size, not a GPU's own figures.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.build import Backend
from mtpstudio.core.engines.profiles import upstream, upstream_moe_cache
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.memory.budget import compute_budget, device_fits
from mtpstudio.core.memory.devices import HostSpec, TargetDevice
from mtpstudio.core.memory.moe_cache import (
    GPU_ALIGNMENT,
    bank_bytes,
    expert_parts,
    moe_cache,
)
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict, plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    fit_suggestions,
    resolve,
)
from mtpstudio.core.speed.traffic import HOST, ModelCost, pass_load
from mtpstudio.core.units import GIB, MIB

CARD = "qwen3.6-35b-a3b-iq4_xs"
FACTS = upstream_moe_cache.PROFILE.memory
TARGET = TargetDevice("CUDA0", "RTX 4070 SUPER", 12 * GIB)


@pytest.fixture(scope="module")
def model() -> ModelInfo:
    return model_card_info(CARD)


def _plan(**runtime: Any) -> Plan:
    return plan_from_dict(
        {
            "model": {"path": "/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"},
            "engine": {"flavour": "upstream"},
            "runtime": {"ctx": 131072, "moe": "n_cpu_moe", "n_cpu_moe": 30, **runtime},
        }
    )


def test_the_cache_holds_the_layers_whose_experts_stay_in_ram(model: ModelInfo) -> None:
    budget = compute_budget(_plan(moe_cache_mib=2048), model, TARGET, FACTS)
    cache = budget.moe_cache
    assert cache is not None and cache.skipped is None
    assert cache.cached_layers == frozenset(range(30))  # --n-cpu-moe 30: layers 0-29
    (group,) = cache.groups  # every layer's experts are IQ4_XS of one shape
    parts = expert_parts(ModelWeights.from_model(model).layers[0].tensors)
    assert [t.name.split(".")[2] for t in parts] == ["ffn_gate_exps", "ffn_up_exps",
                                                      "ffn_down_exps"]  # fmt: skip
    assert group.slot_bytes == sum(t.n_bytes // t.shape[2] for t in parts)
    # the most slots whose banks (one spare slot each) fit 2 GiB, and not one more
    assert bank_bytes(parts, group.n_slots, exact=False) <= 2048 * MIB
    assert bank_bytes(parts, group.n_slots + 1, exact=False) > 2048 * MIB
    assert group.share == group.n_slots / (30 * model.n_expert)
    assert cache.device_bytes % GPU_ALIGNMENT == 0 and cache.device_bytes <= 2048 * MIB
    assert cache.map_bytes == 30 * model.n_expert * 4  # one int32 slot map per cached layer
    gpu = budget.devices[0].segments
    assert gpu["moe_cache"] == cache.device_bytes
    assert budget.host.segments["moe_cache"] == cache.map_bytes
    plain = compute_budget(_plan(), model, TARGET, FACTS).devices[0]
    assert plain.free_bytes is not None and budget.devices[0].free_bytes is not None
    assert plain.free_bytes - budget.devices[0].free_bytes == cache.device_bytes
    assert "30 layers" in cache.words() and "MoE cache" in cache.words()


def test_an_engine_without_the_cache_plans_none(model: ModelInfo) -> None:
    budget = compute_budget(_plan(moe_cache_mib=2048), model, TARGET, upstream.PROFILE.memory)
    assert budget.moe_cache is None and "moe_cache" not in budget.devices[0].segments


@pytest.mark.parametrize(
    ("runtime", "said"),
    [
        ({"moe": "gpu"}, "no layer keeps all of its experts in RAM"),
        ({"n_gpu_layers": 0, "n_cpu_moe": 0}, "no layer keeps all of its experts in RAM"),
        ({"moe_cache_mib": 1}, "too small to hold the experts of one token"),
    ],
)
def test_a_cache_with_nothing_to_hold_says_why(
    model: ModelInfo, runtime: dict[str, Any], said: str
) -> None:
    budget = compute_budget(_plan(**{"moe_cache_mib": 1024, **runtime}), model, TARGET, FACTS)
    cache = budget.moe_cache
    assert cache is not None and cache.device_bytes == 0 and not cache.cached_layers
    assert cache.skipped is not None and said in cache.skipped
    assert cache.skipped in budget.warnings


def test_experts_the_cpu_repacks_are_no_host_weights(model: ModelInfo) -> None:
    """Q4_K experts are repacked by the CPU backend (x86 with AVX2): not cacheable unless
    --no-repack, and the plan says so."""
    tensors = tuple(
        dataclasses.replace(t, type_name="Q4_K") if "_exps" in t.name else t for t in model.tensors
    )
    q4k = dataclasses.replace(model, tensors=tensors)
    weights = ModelWeights.from_model(q4k)
    budget = compute_budget(_plan(moe_cache_mib=1024), q4k, TARGET, FACTS, weights=weights)
    placement = budget.placement
    repacked = moe_cache(q4k, weights, placement, 1024 * MIB)
    assert repacked.skipped is not None and "--no-repack" in repacked.skipped
    kept = moe_cache(q4k, weights, placement, 1024 * MIB, repack=False)
    assert kept.cached_layers == frozenset(range(30))


def test_cached_layers_run_their_experts_on_the_card(model: ModelInfo) -> None:
    """One token through a cached layer: its experts are read on the card, the misses (the
    share the slots do not hold) copied over PCIe, nothing of them on the CPU; a prompt's
    batch (over 32 tokens) takes the usual path."""
    budget = compute_budget(_plan(moe_cache_mib=2048), model, TARGET, FACTS)
    cache = budget.moe_cache
    assert cache is not None
    weights = ModelWeights.from_model(model)
    cost = ModelCost.from_model(model, weights)

    def load(tokens: int, with_cache: bool) -> Any:
        return pass_load(model, cost, budget.placement, "CUDA0", blocks=[0], tokens=tokens,
                         outputs=1, depth=0, cache_types=("q8_0", "q8_0"),
                         moe_cache=cache if with_cache else None)  # fmt: skip

    plain, cached = load(1, False), load(1, True)
    experts = cost.blocks[0].expert_bytes * model.n_expert_used / model.n_expert
    assert plain.on(HOST).bytes == pytest.approx(experts)
    assert cached.on(HOST).bytes == 0 and cached.hops == 0
    assert cached.pcie_bytes == pytest.approx(experts * (1 - cache.share_of(0)))
    assert cached.on("CUDA0").bytes == pytest.approx(plain.on("CUDA0").bytes + experts)
    batch = load(64, True)
    assert batch.pcie_bytes == load(64, False).pcie_bytes  # op offload: the whole tensors


def _resolved(model: ModelInfo, build_flags: frozenset[str], **changes: Any) -> Any:
    build = dataclasses.replace(
        documented_build(EngineFlavour.UPSTREAM),
        accepted_flags=build_flags,
        backends=(Backend.CUDA, Backend.CPU),
    )
    machine = MachineFacts(HostSpec(64 * GIB, 50 * GIB), (), (build,))
    plan = plan_with(Plan(), {"model.card": CARD, "device": "rtx-4070-super", **changes})
    return resolve(plan, PlanningContext(machine, model))


def test_the_lever_offers_the_largest_cache_that_fits_where_the_engine_has_it(
    model: ModelInfo,
) -> None:
    changes = {"runtime.ctx": 32768, "runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 30}
    resolved = _resolved(model, upstream_moe_cache.PROFILE.documented_flags, **changes)
    assert resolved.profile is upstream_moe_cache.PROFILE
    held = {"mtp.enabled": resolved.mtp.requested}  # the levers search at the plan's MTP
    (lever,) = [s for s in fit_suggestions(resolved) if s.lever == "moe-cache"]
    mib = lever.changes["runtime.moe_cache_mib"]
    assert mib % 256 == 0 and mib > 0 and lever.fits
    cache = lever.budget.moe_cache
    assert cache is not None and cache.cached_layers and "MoE cache" in lever.message
    more = budget_for(resolved.with_changes({**held, "runtime.moe_cache_mib": mib + 256}))
    assert not device_fits(more)  # the largest step that fits
    # b11434's parser has no --moe-cache-mib: no such lever
    older = _resolved(model, upstream.PROFILE.documented_flags, **changes)
    assert older.profile is upstream.PROFILE
    assert not [s for s in fit_suggestions(older) if s.lever == "moe-cache"]
