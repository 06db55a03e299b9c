"""Upstream b11549 as an era of its own: told by its parser's ``--moe-cache-mib``, its MoE cache
asked for only where it exists, RPC protocol 8.0.0 kept apart from b11434's 7.0.0, its default
port known where mtpstudio guesses one, and the cache's own log lines read."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from support.argv import launch_spec
from support.servers import free_port

from mtpstudio.core.bench.client import BenchClient
from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.engines.argv import rpc_protocol_refused
from mtpstudio.core.engines.build import Backend, EngineBuild
from mtpstudio.core.engines.profiles import (
    profile_for,
    upstream,
    upstream_moe_cache,
    upstream_ranges,
)
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.errors import BenchError, PlanError
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.server.moe_cache_log import parse_moe_cache_log


def _build(flags: frozenset[str], build_number: int | None = None) -> EngineBuild:
    base = documented_build(EngineFlavour.UPSTREAM)
    return dataclasses.replace(
        base,
        accepted_flags=flags,
        build_number=build_number,
        backends=(Backend.CUDA, Backend.RPC, Backend.CPU),
    )


B11434 = _build(upstream.PROFILE.documented_flags | {"--rpc"}, 0)
B11549 = _build(upstream_moe_cache.PROFILE.documented_flags | {"--rpc"}, 11549)


def _plan(**sections: Any) -> Plan:
    data: dict[str, Any] = {"model": {"path": "/m/q.gguf"}, "engine": {"flavour": "upstream"}}
    data.update(sections)
    return plan_from_dict(data)


def test_the_era_is_told_by_the_flag_its_parser_added() -> None:
    assert profile_for(B11549) is upstream_moe_cache.PROFILE
    assert profile_for(B11434) is upstream.PROFILE
    # a build number alone does not make b11549 (a build without git says 0, or nothing)
    numbered = _build(upstream.PROFILE.documented_flags, 11549)
    assert profile_for(numbered) is upstream.PROFILE
    # after b11549 the model is mapped in ranges; that era keeps the MoE cache
    later = _build(upstream.PROFILE.documented_flags, 11739)
    assert profile_for(later) is upstream_ranges.PROFILE
    assert (
        upstream_ranges.PROFILE.memory.moe_cache and upstream_ranges.PROFILE.memory.maps_in_ranges
    )
    assert not upstream_moe_cache.PROFILE.memory.maps_in_ranges  # b11549's loader is b11434's


@pytest.mark.parametrize(
    ("server", "engine", "refused"),
    [
        ((7, 0, 0), (7, 0, 0), False),
        ((8, 0, 0), (8, 0, 0), False),
        ((8, 0, 0), (7, 0, 0), True),  # another major
        ((7, 0, 0), (8, 0, 0), True),
        ((8, 1, 0), (8, 0, 0), True),  # a newer minor than the client's
        ((8, 0, 3), (8, 1, 0), False),  # an older minor, any patch
    ],
)
def test_the_engine_refuses_another_rpc_protocol_as_ggml_rpc_does(
    server: tuple[int, int, int], engine: tuple[int, int, int], refused: bool
) -> None:
    assert rpc_protocol_refused(server, engine) is refused


def _rpc(protocol: list[int] | None) -> dict[str, Any]:
    return {"rpc": [{"host": "192.168.1.20", "port": 50052, "memory_mib": 8192,
                     **({"protocol": protocol} if protocol else {})}]}  # fmt: skip


def test_a_plan_on_an_rpc_server_of_another_protocol_is_blocked() -> None:
    newer = _plan(split=_rpc([8, 0, 0]))
    spec = launch_spec(newer, B11434)
    assert any("speaks RPC protocol 8.0.0" in b and "7.0.0" in b for b in spec.blockers)
    assert any("same llama.cpp build on every machine" in a for a in spec.alternatives)
    assert launch_spec(newer, B11549).blockers == ()
    assert "--rpc" in launch_spec(newer, B11549).args
    older = launch_spec(_plan(split=_rpc([7, 0, 0])), B11549)
    assert any("speaks RPC protocol 7.0.0" in b for b in older.blockers)
    unprobed = launch_spec(_plan(split=_rpc(None)), B11549)
    assert unprobed.blockers == ()  # sized by hand: nothing known to refuse


@pytest.mark.parametrize("protocol", [[300, 0, 0], [8, -1, 0], [8, 0]])
def test_a_hostile_protocol_in_a_plan_file_is_refused(protocol: list[int]) -> None:
    with pytest.raises(PlanError) as caught:
        _plan(split=_rpc(protocol))
    assert "split.rpc.0.protocol" in str(caught.value)


def test_the_moe_cache_is_asked_for_only_where_the_build_has_it() -> None:
    plan = _plan(runtime={"moe": "n_cpu_moe", "n_cpu_moe": 20, "moe_cache_mib": 2048})
    spec = launch_spec(plan, B11549)
    at = spec.args.index("--moe-cache-mib")
    assert spec.args[at + 1] == "2048" and spec.blockers == ()
    old = launch_spec(plan, B11434)
    assert "--moe-cache-mib" not in old.args
    assert any("has no --moe-cache-mib" in b for b in old.blockers)
    cpu = launch_spec(_plan(device="cpu", runtime={"moe_cache_mib": 2048}), B11549)
    assert "--moe-cache-mib" not in cpu.args
    assert any("MoE cache requires a GPU backend" in w for w in cpu.warnings)
    off = launch_spec(_plan(runtime={"moe_cache_mib": 0}), B11549)
    assert "--moe-cache-mib" not in off.args


def test_a_dead_url_names_the_default_ports_of_the_eras() -> None:
    port = free_port()
    target = BenchTarget(f"http://127.0.0.1:{port}")
    with BenchClient(target, 2.0) as client, pytest.raises(BenchError) as caught:
        client.check_ready()
    assert f"no server answers at http://127.0.0.1:{port}" in str(caught.value)
    hint = caught.value.hint or ""
    assert "9931 from llama.cpp b11549 on; 8080 before it and in ik_llama.cpp" in hint


# The MoE cache's lines as src/llama-moe-cache.cpp prints them (its printf formats filled in).
CACHE_LOG = """\
impl:      CUDA0 MoE cache size =  2048.00 MiB for 12240.00 MiB of host experts
impl: 30 layers, iq4_xs:  1284 slots (16.7%)
srv  log_server_r: done request: POST /completion 127.0.0.1 200
llama_moe_cache: ubatch <= 8: hits = 3000, misses = 1000, hit rate = 75.00%, uploaded = 640.50 MiB
llama_moe_cache: ubatch  > 8: hits = 100, misses = 300, hit rate = 25.00%, uploaded = 192.00 MiB
"""


def test_the_engines_cache_lines_are_read() -> None:
    log = parse_moe_cache_log(CACHE_LOG)
    assert log.sizes_mib == {"CUDA0": 2048.0} and log.host_experts_mib == {"CUDA0": 12240.0}
    (group,) = log.groups
    shown = (group.layers, group.tensor_type, group.slots, group.share_pct)
    assert shown == (30, "iq4_xs", 1284, 16.7)
    assert [s.batches for s in log.stats] == ["ubatch <= 8", "ubatch  > 8"]
    assert log.hit_rate == pytest.approx(3100 / 4400)
    assert log.words() == (
        "MoE cache hit rate 70.5% (3,100 hits, 1,300 misses, 832 MiB copied to the card), as "
        "the engine counted it"
    )
    assert parse_load_log(CACHE_LOG).moe_cache.sizes_mib == {"CUDA0": 2048.0}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("llama_moe_cache: ubatch <= 8: hits = 1, misses = 1, hit rate = 250.00%, uploaded = "
         "1.00 MiB", None),
        ("impl:      CUDA0 MoE cache size = 999999999999.00 MiB for 1.00 MiB of host experts",
         None),
        ("llama_context: failed to initialize the context: MoE cache requires a GPU backend",
         "MoE cache: the engine refused it: MoE cache requires a GPU backend"),
        ("impl: no layer has all of its experts in host memory, MoE cache is disabled",
         "MoE cache: no layer keeps all of its experts in RAM, so the engine disabled it"),
        ("", None),
    ],
)  # fmt: skip
def test_impossible_or_refusing_cache_lines(text: str, words: str | None) -> None:
    assert parse_moe_cache_log(text).words() == words
