"""The replayed graph allocator: ggml-alloc's rules on small graphs, and the engine's own trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.alloc_trace import ENGINE_LOGS, engine_trace

from devkit.budget_check import LoadConfig, predicted
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory.graph_alloc import AllocEvent, Tensor, reserved_bytes
from mtpstudio.core.memory.hybrid_graph import HybridDims, hybrid_trunk_graph
from mtpstudio.core.memory.nextn_graph import nextn_compute_bytes, nextn_graph
from mtpstudio.core.memory.trunk_graph import TrunkShape


def _node(name: str, op: str, nbytes: int, *srcs: Tensor, **kw: object) -> Tensor:
    return Tensor(name, op, nbytes, srcs, layout=("c", nbytes), **kw)  # type: ignore[arg-type]


def _input(name: str, nbytes: int) -> Tensor:
    return Tensor(name, "NONE", nbytes, layout=("c", nbytes), is_input=True)


def test_an_inplace_chain_reuses_its_input() -> None:
    x = _input("x", 100)
    a = _node("a", "RMS_NORM", 100, x)
    b = _node("b", "MUL", 100, a)
    c = _node("c", "ROPE", 100, b)
    assert reserved_bytes([x], [a, b, c]) == 128  # one aligned block
    # a matmul may not overwrite its input: a second block
    d = _node("d", "MUL_MAT", 100, x)
    assert reserved_bytes([x], [d]) == 256


def test_a_hole_too_small_is_skipped_and_the_smallest_fitting_one_taken() -> None:
    a, s1, b, s2 = _input("a", 64), _input("s1", 32), _input("b", 128), _input("s2", 32)
    n1 = _node("n1", "MUL_MAT", 32, a, b)  # frees a and b: holes of 64 and 128 bytes
    n2 = _node("n2", "MUL_MAT", 48, n1)  # best fit: the 64-byte hole, not the 128-byte one
    n3 = _node("n3", "MUL_MAT", 256, n2, s1, s2)  # no hole holds it: the end of the buffer
    events: list[AllocEvent] = []
    peak = reserved_bytes([a, s1, b, s2], [n1, n2, n3], events=events)
    allocs = [(size, offset) for kind, size, offset in events if kind == "alloc"]
    assert allocs == [(64, 0), (32, 64), (128, 96), (32, 224), (32, 256), (64, 0), (256, 256)]
    assert peak == 512


def test_a_view_keeps_its_source_alive_until_the_view_is_used() -> None:
    x = _input("x", 64)
    big = _node("big", "MUL_MAT", 256, x)
    view = Tensor("v", "VIEW", 128, (big,), layout=("v",), view_of=big)
    other = _node("other", "MUL_MAT", 256, x)  # big is still alive: no reuse
    use = _node("use", "CONT", 128, view, other)
    assert reserved_bytes([x], [big, view, other, use]) == 64 + 256 + 256 + 128
    # without the view, big dies after `other`'s allocation would start: its block is reused
    big2 = _node("big", "MUL_MAT", 256, x)
    done = _node("done", "CONT", 256, big2)
    after = _node("after", "MUL_MAT", 256, x)
    assert reserved_bytes([x], [big2, done, after]) == 64 + 256 + 256


def test_outputs_are_never_freed() -> None:
    x = _input("x", 64)
    out = _node("out", "MUL_MAT", 256, x, is_output=True)
    tail = _node("tail", "MUL_MAT", 256, out)
    again = _node("again", "MUL_MAT", 256, tail)
    assert reserved_bytes([x], [out, tail, again]) == 64 + 3 * 256


@pytest.mark.parametrize(
    ("trace", "rotations", "logged_mib"),
    [
        ("upstream-11434-mtp-alloc-35b-a3b-16k-ub512.txt", (0, 0), 68.02),
        # a q8_0 draft cache: Q/K, V and the attention output pass Hadamard rotations
        ("upstream-11434-mtp-alloc-35b-a3b-16k-ub512-q8_0.txt", (256, 64), 68.28),
    ],
)
def test_the_nextn_graph_replays_the_engines_allocator_trace(
    trace: str, rotations: tuple[int, int], logged_mib: float
) -> None:
    """Every allocation and free of the 35B-A3B draft graph, at the engine's offsets.

    Recorded with upstream 11434 built with ggml-alloc.c's AT_PRINTF on, loading the zero-weight
    35B-A3B card: ``llama-server -c 16384 -np 1 -fa on -ub 512 --spec-type draft-mtp`` (plus
    ``-ctk q8_0 -ctv q8_0 --spec-draft-type-k q8_0 --spec-draft-type-v q8_0`` for the second);
    the draft context's 512-token reservation, whose log line gives ``logged_mib``.
    """
    want = engine_trace(ENGINE_LOGS / trace)
    assert len(want) > 60
    model = model_card_info("qwen3.6-35b-a3b-iq4_xs")
    k_rot, v_rot = rotations
    got: list[AllocEvent] = []
    graph = nextn_graph(model, 512, 16384, 1, k_rot=k_rot, v_rot=v_rot)
    peak = reserved_bytes(*graph, events=got)
    assert got == want
    assert round(peak / 2**20, 2) == logged_mib


@pytest.mark.parametrize(
    ("card", "ctx", "rotations", "logged_mib"),
    # the draft context's "CPU compute buffer size" lines, upstream 11434, -ub 512, one slot
    [
        ("qwen3.6-35b-a3b-iq4_xs", 4096, (0, 0), 65.02),
        ("qwen3.6-35b-a3b-iq4_xs", 8192, (0, 0), 68.02),
        ("qwen3.6-35b-a3b-iq4_xs", 12288, (0, 0), 72.02),
        ("qwen3.6-35b-a3b-iq4_xs", 16384, (0, 0), 68.02),
        ("qwen3.6-35b-a3b-iq4_xs", 24576, (0, 0), 68.02),
        ("qwen3.6-35b-a3b-iq4_xs", 32768, (0, 0), 76.02),
        ("qwen3.6-35b-a3b-iq4_xs", 131072, (256, 64), 168.28),
        ("qwen3.6-27b-iq4_xs", 8192, (0, 0), 130.02),
        ("qwen3.6-27b-iq4_xs", 32768, (0, 0), 130.02),
        ("qwen3.6-27b-iq4_xs", 131072, (256, 64), 196.28),
    ],
)
def test_the_draft_buffer_follows_the_engine_up_and_down(
    card: str, ctx: int, rotations: tuple[int, int], logged_mib: float
) -> None:
    model = model_card_info(card)
    k_rot, v_rot = rotations
    got = nextn_compute_bytes(model, 512, ctx, 1, k_rot=k_rot, v_rot=v_rot)
    assert round(got / 2**20, 2) == logged_mib


def test_the_first_delta_net_block_replays_the_engines_allocator_trace() -> None:
    """The trunk's allocations from its inputs to layer 0's delta-net output, at the engine's
    offsets (the recorded part of the trace): with MTP (three rollback states) at ubatch 128
    this is where the buffer peaks, and the whole trunk's replay reaches the logged size.

    Recorded like the draft traces: ``llama-server -c 4096 -np 1 -fa on -ub 128 --spec-type
    draft-mtp --spec-draft-n-max 3`` on the zero-weight 35B-A3B card (the trunk's 128-token
    reservation; its log line: ``CPU compute buffer size = 28.10 MiB``).
    """
    want = engine_trace(
        ENGINE_LOGS / "upstream-11434-trunk-alloc-35b-a3b-4k-ub128-mtp3-to-delta-net.txt"
    )
    model = model_card_info("qwen3.6-35b-a3b-iq4_xs")
    got: list[AllocEvent] = []
    graph = hybrid_trunk_graph(HybridDims.of(model), TrunkShape(128, 4, 4096, n_rs_seq=3))
    peak = reserved_bytes(*graph, events=got)
    assert got[: len(want)] == want
    assert round(peak / 2**20, 2) == 28.10


@pytest.mark.parametrize(
    ("card", "ubatch", "draft_max", "logged_mib"),
    # the trunk's "CPU compute buffer size" lines, upstream 11434, 4096 ctx, f16 cache
    [
        ("qwen3.6-35b-a3b-iq4_xs", 64, 1, 14.10),
        ("qwen3.6-35b-a3b-iq4_xs", 64, 3, 18.10),
        ("qwen3.6-35b-a3b-iq4_xs", 128, 1, 24.10),
        ("qwen3.6-35b-a3b-iq4_xs", 128, 3, 28.10),
        ("qwen3.6-35b-a3b-iq4_xs", 192, 1, 30.01),
        ("qwen3.6-35b-a3b-iq4_xs", 192, 3, 38.10),
        ("qwen3.6-35b-a3b-iq4_xs", 256, 3, 40.01),
        ("qwen3.6-35b-a3b-iq4_xs", 512, 3, 80.02),
        ("qwen3.6-35b-a3b-iq4_xs", 128, 0, 20.01),
        ("qwen3.6-27b-iq4_xs", 64, 1, 22.37),
        ("qwen3.6-27b-iq4_xs", 64, 3, 28.37),
        ("qwen3.6-27b-iq4_xs", 128, 1, 39.01),
        ("qwen3.6-27b-iq4_xs", 128, 3, 43.62),
        ("qwen3.6-27b-iq4_xs", 256, 3, 78.01),
    ],
)
def test_the_trunk_buffer_at_small_ubatches(
    card: str, ubatch: int, draft_max: int, logged_mib: float
) -> None:
    """Below ~256 tokens the delta-net block's kept states decide; above, the FFN: the
    replayed trunk follows both to the engine's two decimals."""
    info = model_card_info(card)
    config = LoadConfig("sweep", 4096, mtp=draft_max, ubatch=ubatch)
    got = predicted(config, info)["compute"]
    assert got == pytest.approx(logged_mib, abs=0.006)


def test_the_trunk_of_a_model_without_mtp_has_the_mixed_inputs_too(
    tmp_path: Path,
) -> None:
    """The mixed-batch inputs belong to every default-context graph of these architectures:
    the tiny hybrid test model (no nextn layer) shows them in its trace as well.

    Recorded on the tiny ``hybrid`` model of ``tests/integration/test_budget_accuracy.py``
    (f32 weights): ``llama-server -c 4096 -np 1 -fa on -ub 512``, MTP off (8.53 MiB logged).
    """
    from support.tiny_models import TinyModelCache
    from support.tiny_shapes import HYBRID  # the accuracy suite's shapes

    from mtpstudio.core.model.gguf import read_model_info

    model = read_model_info(TinyModelCache(tmp_path)("hybrid", **HYBRID))
    assert not model.has_mtp
    trace = "upstream-11434-trunk-alloc-tiny-hybrid-4k-ub512-to-delta-net.txt"
    want = engine_trace(ENGINE_LOGS / trace)
    got: list[AllocEvent] = []
    graph = hybrid_trunk_graph(HybridDims.of(model), TrunkShape(512, 1, 4096))
    peak = reserved_bytes(*graph, events=got)
    assert got[: len(want)] == want
    assert round(peak / 2**20, 2) == 8.53
