"""Replayed compute buffers kept between runs (``memory.replay_store``): the answers read back
give every figure the replays give, a file of other code or of the wrong shape is never
trusted, and a damaged or edited entry is replayed again instead of changing a figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory import hybrid_graph, nextn_graph, replay_store, trunk_graph
from mtpstudio.core.memory.cuda_rules import CudaHostRules, CudaRules
from mtpstudio.core.memory.cuda_schedule import Residency
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.memory.graph_alloc import CPU_RULES, BackendRules
from mtpstudio.core.memory.hybrid_graph import HybridDims
from mtpstudio.core.memory.replay_store import (
    MAX_ENTRIES,
    ReplayStore,
    Unkeyable,
    canonical,
    check_store,
)
from mtpstudio.core.memory.trunk_graph import TrunkShape
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    fit_suggestions,
)
from mtpstudio.core.planner.resolve import resolve as resolve_plan
from mtpstudio.core.speed import graph_nodes

MOE = "qwen3.6-35b-a3b-iq4_xs"
DENSE = "qwen3.6-27b-iq4_xs"
HOST = HostSpec(64 << 30, 50 << 30)
REPLAYS: list[Any] = [
    hybrid_graph._hybrid_bytes,
    hybrid_graph._built_graph,
    trunk_graph._trunk_bytes,
    trunk_graph._nextn_block_bytes,
    nextn_graph._nextn_bytes,
    graph_nodes._counted,
]

PLANS = [
    (MOE, {"device": "rtx-4070-super", "runtime.ctx": 131072}),  # the demo's plan
    (MOE, {"device": "rtx-3060-12gb", "runtime.ctx": 65536, "runtime.cache_type_k": "f16",
           "runtime.cache_type_v": "f16", "mtp.draft_max": 2}),
    (MOE, {"device": "rtx-4070-super", "runtime.ctx": 262144, "runtime.moe": "n_cpu_moe",
           "runtime.n_cpu_moe": 24}),
    (DENSE, {"device": "rtx-4060-ti-16gb", "runtime.ctx": 65536, "runtime.moe": "gpu"}),
]  # fmt: skip


def _forget_this_run() -> None:
    """What a new process starts without: the in-memory caches of the replays."""
    for replay in REPLAYS:
        replay.cache_clear()


@pytest.fixture
def use_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], ReplayStore]]:
    """``use_store(path) -> ReplayStore``: the process's store replaced by one on ``path``,
    the replays' in-memory caches empty (as in a new process)."""

    def use(path: Path) -> ReplayStore:
        store = ReplayStore(lambda: path)
        monkeypatch.setattr(replay_store, "STORE", store)
        _forget_this_run()
        return store

    yield use
    _forget_this_run()


def _figures(card: str, changes: dict[str, Any]) -> str:
    """Every figure of the plan: its budget and every lever's suggestion with its budget."""
    pctx = PlanningContext(MachineFacts(HOST, (), ()), model_card_info(card))
    resolved = resolve_plan(plan_with(Plan(), {"model.card": card, **changes}), pctx)
    budget = budget_for(resolved)
    suggestions = fit_suggestions(resolved, budget)
    return json.dumps(
        {
            "budget": budget.to_json(),
            "suggestions": [
                [s.message, s.fits, s.budget.to_json() if s.budget else None] for s in suggestions
            ],
        },
        sort_keys=True,
    )


@pytest.mark.parametrize(("card", "changes"), PLANS)
def test_answers_read_back_give_the_figures_of_fresh_replays(
    card: str,
    changes: dict[str, Any],
    tmp_path: Path,
    use_store: Callable[[Path], ReplayStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "replays.json"
    first = use_store(path)
    figures = _figures(card, changes)
    assert first.misses > 0 and first.hits == 0
    first.save()
    assert path.is_file()

    again = use_store(path)  # a later run: every answer from the file
    assert _figures(card, changes) == figures
    assert again.hits == first.misses and again.misses == 0 and again.rejected == 0

    monkeypatch.setenv(replay_store.DISABLE_ENV, "1")  # no store at all: every buffer replayed
    none = use_store(tmp_path / "unused.json")
    assert _figures(card, changes) == figures
    assert none.hits == none.misses == 0


def _stored_demo(path: Path, use_store: Callable[[Path], ReplayStore]) -> str:
    store = use_store(path)
    figures = _figures(*PLANS[0])
    store.save()
    return figures


def test_an_edited_entry_is_replayed_not_used(
    tmp_path: Path, use_store: Callable[[Path], ReplayStore]
) -> None:
    """Every answer in the file changed (a hand edit, a bit flip, answers swapped between
    entries): the seals no longer match, so every buffer is replayed and the figures stand."""
    path = tmp_path / "replays.json"
    figures = _stored_demo(path, use_store)
    data = json.loads(path.read_text())
    entries = data["entries"]
    keys = list(entries)
    values = [entries[k][0] for k in keys]
    for key, value in zip(keys, values[1:] + values[:1], strict=True):  # answers swapped
        entries[key][0] = value if value != entries[key][0] else value + 128
    path.write_text(json.dumps(data))

    store = use_store(path)
    assert _figures(*PLANS[0]) == figures
    assert store.rejected == len(keys) and store.hits == 0
    store.save()  # written back with the replayed answers: the next run reads them
    first = next(i for i, value in enumerate(values) if isinstance(value, int))
    assert use_store(path).get(keys[first]) == values[first]


def test_an_entry_under_another_key_is_not_used(
    tmp_path: Path, use_store: Callable[[Path], ReplayStore]
) -> None:
    """A whole entry (answer and seal) copied under another key does not answer for it."""
    path = tmp_path / "replays.json"
    figures = _stored_demo(path, use_store)
    data = json.loads(path.read_text())
    entries = data["entries"]
    first, *rest = list(entries)
    for key in rest:
        entries[key] = entries[first]
    path.write_text(json.dumps(data))
    store = use_store(path)
    assert _figures(*PLANS[0]) == figures
    assert store.rejected >= len(rest) - 1


@pytest.mark.parametrize(
    "damage",
    [
        "not json {",
        "[]",
        '{"format": 2, "code": "%s", "entries": {}}',
        '{"format": 1, "code": "xyz", "entries": {}}',
        '{"format": 1, "code": "%s", "entries": []}',
        '{"format": 1, "code": "%s", "entries": {"k": [1, "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [1.5, "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [true, "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [-1, "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [%d, "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": ["1", "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [1, "zz"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [1]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [[1, -2], "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [[1, [2]], "0011223344556677"]}}',
        '{"format": 1, "code": "%s", "entries": {"%s": [[%d], "0011223344556677"]}}',
    ],
)
def test_a_file_of_the_wrong_shape_is_set_aside_and_rebuilt(
    damage: str, tmp_path: Path, use_store: Callable[[Path], ReplayStore]
) -> None:
    path = tmp_path / "replays.json"
    args = (replay_store.code_digest(), "ab" * 16, 1 << 60)[: damage.count("%")]
    path.write_text(damage % args if args else damage)
    store = use_store(path)
    figures = _figures(*PLANS[0])
    assert store.hits == 0 and store.misses > 0
    assert [p.name.startswith("replays.json.bad-") for p in tmp_path.iterdir()] == [True]
    store.save()
    assert _stored_demo(path, use_store) == figures
    assert replay_store.STORE.hits > 0


def test_a_file_of_other_code_is_not_read(
    tmp_path: Path, use_store: Callable[[Path], ReplayStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers stored by another version of the memory model (another source digest) are
    not used; the file is replaced by this code's answers."""
    path = tmp_path / "replays.json"
    _stored_demo(path, use_store)
    other = ReplayStore(lambda: path, code=lambda: "c" * 64)
    monkeypatch.setattr(replay_store, "STORE", other)
    _forget_this_run()
    _figures(*PLANS[0])
    assert other.hits == 0 and other.misses > 0
    other.save()
    code, entries = check_store(json.loads(path.read_text()))
    assert code == "c" * 64 and len(entries) == other.misses  # none of the other code's kept


def test_the_code_digest_covers_the_memory_models_source() -> None:
    digest = replay_store.code_digest()
    assert len(digest) == 64
    memory = Path(replay_store.__file__).parent
    assert {"graph_alloc.py", "cuda_rules.py", "cuda_schedule.py", "hybrid_graph.py"} <= {
        p.name for p in memory.glob("*.py")
    }


def test_the_store_keeps_at_most_max_entries(tmp_path: Path) -> None:
    path = tmp_path / "replays.json"
    store = ReplayStore(lambda: path)
    for i in range(MAX_ENTRIES + 10):
        store.put(f"{i:032x}", i)
    store.save()
    _, entries = check_store(json.loads(path.read_text()))
    assert len(entries) == MAX_ENTRIES
    assert f"{MAX_ENTRIES + 9:032x}" in entries and f"{0:032x}" not in entries  # oldest out
    store.put("f" * 32, 1 << 50)  # no buffer is that large: not kept
    assert ReplayStore(lambda: path).get("f" * 32) is None


def test_answers_of_several_counts_are_kept_and_checked(tmp_path: Path) -> None:
    """The speed model's node counts are kept as a list; an answer of the other kind (a
    count where counts were stored, or the reverse) is not used, and an overlong one is not
    kept."""
    path = tmp_path / "replays.json"
    store = ReplayStore(lambda: path)
    store.put("1" * 32, (3, 4, 5))
    store.put("2" * 32, 7)
    store.put("3" * 32, tuple(range(replay_store.MAX_COUNTS + 1)))
    store.save()
    again = ReplayStore(lambda: path)
    assert again.get("1" * 32, tuple) == (3, 4, 5)
    assert again.get("2" * 32, tuple) is None and again.rejected == 1
    assert again.get("1" * 32, int) is None and again.rejected == 2
    assert again.get("3" * 32, tuple) is None and again.rejected == 2


def test_keys_are_stable_and_tell_inputs_apart() -> None:
    shape = TrunkShape(512, 1, 4096, cache_types=("q8_0", "q8_0"))
    weights = frozenset({(3, "ffn_up_exps.weight", 100), (4, "ffn_up_exps.weight", 100)})
    rules = CudaRules(residency=Residency(ram_weights=weights, ram_cache_layers=frozenset({3})))
    store = ReplayStore(lambda: Path("/nonexistent"))
    key = store.key("hybrid_trunk", (shape, rules))
    assert key is not None and len(key) == 32
    # built again from other objects (other set orders): the same key
    again = CudaRules(
        residency=Residency(ram_weights=frozenset(sorted(weights, reverse=True)),
                            ram_cache_layers=frozenset({3}))
    )  # fmt: skip
    assert store.key("hybrid_trunk", (shape, again)) == key
    different = [
        store.key("trunk", (shape, rules)),
        store.key("hybrid_trunk", (TrunkShape(512, 1, 4352, cache_types=shape.cache_types), rules)),
        store.key("hybrid_trunk", (shape, CudaHostRules(device=rules))),
        store.key("hybrid_trunk", (shape, CudaRules(residency=rules.residency, cc=(9, 0)))),
        store.key("hybrid_trunk", (shape, CPU_RULES)),
        store.key("hybrid_trunk", (TrunkShape(512, 1, 4096, flash_attn=False), rules)),
    ]
    assert key not in different and len(set(different)) == len(different)


KEY_IN_A_CHILD = """
from mtpstudio.core.memory.cuda_rules import CudaRules
from mtpstudio.core.memory.cuda_schedule import Residency
from mtpstudio.core.memory.replay_store import STORE
from mtpstudio.core.memory.trunk_graph import TrunkShape
roles = ("ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_exps.weight", "attn_q.weight")
weights = frozenset((layer, role, 100 + layer) for layer in range(8) for role in roles)
rules = CudaRules(residency=Residency(ram_weights=weights))
print(STORE.key("hybrid_trunk", (TrunkShape(512, 1, 4096), rules)))
"""


def test_keys_do_not_depend_on_the_processs_hash_seed() -> None:
    """Sets of names iterate in another order in every process: the key does not."""
    keys = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", KEY_IN_A_CHILD], capture_output=True,
                              text=True, env=env, check=True)  # fmt: skip
        keys.add(done.stdout.strip())
    assert len(keys) == 1 and len(keys.pop()) == 32


def test_inputs_of_other_types_are_replayed_and_not_kept() -> None:
    """A backend's rules from outside the memory model (their source is not in the digest)
    have no key: the replay runs and nothing is stored."""

    class OwnRules(BackendRules):
        pass

    store = ReplayStore(lambda: Path("/nonexistent"))
    dims = HybridDims.of(model_card_info(MOE))
    assert store.key("hybrid_trunk", (dims, TrunkShape(8, 1, 256), OwnRules())) is None
    with pytest.raises(Unkeyable):
        canonical(object())
    assert canonical(frozenset({(2, "b"), (1, "a")})) == ["s", [["t", [1, "a"]], ["t", [2, "b"]]]]
    # a bool is not taken for the int it equals
    assert json.dumps(canonical((True, 2))) != json.dumps(canonical((1, 2)))
    assert json.dumps(canonical(frozenset({True, 2}))) != json.dumps(canonical(frozenset({1, 2})))


REPLAY_IN_A_CHILD = """
from mtpstudio.core.memory.hybrid_graph import hybrid_compute_bytes
from mtpstudio.core.memory.replay_store import STORE
from mtpstudio.core.memory.trunk_graph import TrunkShape
from mtpstudio.core.catalog.models import model_card_info
model = model_card_info("qwen3.6-35b-a3b-iq4_xs")
print(hybrid_compute_bytes(model, TrunkShape(512, 1, 8192)), STORE.hits, STORE.misses)
"""


def test_a_process_writes_its_answers_at_exit_and_the_next_reads_them(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop(replay_store.DISABLE_ENV, None)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", REPLAY_IN_A_CHILD], capture_output=True,
                              text=True, env=env, check=True)  # fmt: skip
        runs.append(done.stdout.split())
    (first, hits, misses), (again, hits_again, misses_again) = runs
    assert first == again and int(first) > 0
    assert (hits, misses) == ("0", "1") and (hits_again, misses_again) == ("1", "0")
    assert (tmp_path / "mtpstudio" / replay_store.CACHE_NAME).is_file()
