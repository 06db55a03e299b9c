"""The CPU's kernels and threads in the speed estimate: the table is what its recording says, the
fit recovers what it is given, the graph's nodes are counted as the engine runs them, and two
threads gain what the measured kernels let them gain."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest

from devkit.arch_gguf import ArchSpec, write_arch_header
from devkit.cpu_columns import committed_share
from mtpstudio.core.memory.graph_alloc import Tensor
from mtpstudio.core.memory.placement import ModelWeights, place
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.speed.cpu_kernels import (
    CPU_KERNELS,
    REFERENCE_GEMV,
    CalibrationRun,
    CpuKernels,
    KernelRate,
    Recording,
    fit_kernels,
    rounded,
    source_text,
)
from mtpstudio.core.speed.estimate import DecodeShape, SpeedEstimate, SpeedRates, estimate
from mtpstudio.core.speed.graph_nodes import PLAIN_BLOCK, count_nodes, graph_nodes
from mtpstudio.core.speed.host_rates import HostRates
from mtpstudio.core.speed.traffic import ModelCost, Routing

RECORDING = Path(__file__).parents[1] / "fixtures" / "speed" / "cpu-kernels.json"
SOURCE = Path(__file__).parents[2] / "mtpstudio" / "core" / "speed" / "cpu_kernels.py"

HOST = HostRates(
    read_bytes_per_s=((1, 30e9), (2, 45e9)),
    gemv_flop_per_s=REFERENCE_GEMV,
    gemm_flop_per_s=2 * REFERENCE_GEMV,
    cores=2,
    source="stated for the test",
    machine=CPU_KERNELS.machine,  # the machine the table was measured on
)


def test_the_table_is_the_fit_of_its_recording() -> None:
    """CPU_KERNELS is what the committed calibration implies, to the digits written: the table
    cannot be edited by hand, nor the recording replaced, without the other."""
    recording = Recording.from_json(json.loads(RECORDING.read_text(encoding="utf-8")))
    fitted = dataclasses.replace(
        rounded(fit_kernels(recording)), column_share=committed_share("upstream")
    )
    assert fitted == CPU_KERNELS
    assert source_text(fitted) in SOURCE.read_text(encoding="utf-8")
    assert "thin" in recording.runs[0].name  # the per-node run is in it
    measured_types = {r.kernel_type for r in recording.runs}
    assert {"Q8_0", "Q4_K", "IQ4_XS", "Q6_K", "Q5_K"} <= measured_types


def _runs_from(table: CpuKernels, gemv: float) -> Recording:
    """What a machine with exactly this table would measure on the calibration's shapes."""
    core = gemv / REFERENCE_GEMV
    runs = [
        CalibrationRun(
            "thin-Q8_0", MappingProxyType({"Q8_0": 50_000}), 30_000, 2_000, 3_000, 0.0, 0.0
        )
    ]
    for t in table.rates:
        for name, weights, rows in (
            ("wide", 250_000_000, 98_000),
            ("narrow", 240_000_000, 219_000),
        ):
            runs.append(
                CalibrationRun(
                    f"{name}-{t}", MappingProxyType({t: weights}), rows, 70, 98, 0.0, 0.0
                )
            )
    timed = []
    for r in runs:
        w = sum(table.rate(t).one / core * n for t, n in r.weights.items())
        w2 = sum(table.rate(t).several / core * n / 2 for t, n in r.weights.items())
        timed.append(
            dataclasses.replace(
                r,
                one_thread_s=w + r.nodes * table.node_s / core,
                two_threads_s=w2 + r.rows * table.row_s + r.syncs * table.sync_s,
            )
        )
    return Recording(tuple(timed), gemv, "test machine", "test engine")


def test_the_fit_recovers_the_table_it_is_given() -> None:
    truth = CpuKernels(
        rates=MappingProxyType(
            {
                "Q4_K": KernelRate(2.5e-11, 3.1e-11),
                "Q8_0": KernelRate(4.5e-11, 4.6e-11),
                "IQ4_XS": KernelRate(4.0e-11, 5.5e-11),
            }
        ),
        fallback=KernelRate(4.0e-11, 5.5e-11),
        row_s=1.2e-8,
        node_s=3e-7,
        sync_s=5e-7,
        source="",
    )
    fitted = fit_kernels(_runs_from(truth, gemv=60e9))
    for t, k in truth.rates.items():
        assert fitted.rates[t].one == pytest.approx(k.one, rel=1e-3)
        assert fitted.rates[t].several == pytest.approx(k.several, rel=1e-3)
    assert fitted.row_s == pytest.approx(truth.row_s, rel=1e-3)
    assert fitted.node_s == pytest.approx(truth.node_s, rel=1e-2)
    assert fitted.sync_s == pytest.approx(truth.sync_s, rel=1e-2)


def test_views_are_skipped_and_a_norm_runs_with_its_multiply() -> None:
    x = Tensor("x", "NONE", 4)
    norm = Tensor("norm", "RMS_NORM", 4, (x,), layer=0)
    scaled = Tensor("scaled", "MUL", 4, (norm, x), layer=0)
    view = Tensor("view", "VIEW", 4, (scaled,), view_of=scaled, layer=0)
    product = Tensor("product", "MUL_MAT", 4, (view,), layer=0)
    other_mul = Tensor("mul", "MUL", 4, (product, x), layer=0)
    counts = count_nodes([norm, scaled, view, product, other_mul])
    assert counts[0].nodes == 3  # norm+mul, product, mul
    assert counts[0].syncs == 4  # and the product's second barrier


def _llama(tmp_path: Path, **sizes: int) -> ModelInfo:
    spec = ArchSpec("llama", 4096, sizes.get("n_embd", 2048), sizes.get("n_layer", 4),
                    16, 4, 128, ffn_length=sizes.get("ffn", 8192), context_length=4096,
                    weight_type="Q8_0")  # fmt: skip
    path = tmp_path / "llama.gguf"
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_arch_header(spec, path)
    return read_model_info(path)


def test_a_plain_block_is_what_the_llama_graph_computes(tmp_path: Path) -> None:
    nodes = graph_nodes(_llama(tmp_path))
    assert nodes.modelled
    assert nodes.block(2) == PLAIN_BLOCK


def _speed(model: ModelInfo, threads: int) -> SpeedEstimate:
    cost = ModelCost.from_model(model, ModelWeights.from_model(model))
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    shape = DecodeShape(None, threads, ("f16", "f16"), False, 0, 512)
    return estimate(model, cost, placement, shape, SpeedRates(HOST), None, context=16,
                    routing=Routing.SAME)  # fmt: skip


def _tok_s(model: ModelInfo, threads: int) -> float:
    return _speed(model, threads).decode_tok_s


def test_two_threads_gain_less_where_rows_are_short(tmp_path: Path) -> None:
    """Claiming 64 rows at a time costs each product per row: a model of short rows gains less
    from a second thread than one of long rows (the recording's narrow runs against its wide
    ones)."""
    wide = _llama(tmp_path / "w", n_embd=2048, ffn=8192)
    narrow = _llama(tmp_path / "n", n_embd=512, ffn=32768)
    gain_wide = _tok_s(wide, 2) / _tok_s(wide, 1)
    gain_narrow = _tok_s(narrow, 2) / _tok_s(narrow, 1)
    assert 1.0 < gain_narrow < gain_wide < 2.0


def test_many_small_nodes_are_slower_with_two_threads(tmp_path: Path) -> None:
    """A graph of many nodes and almost no weights waits at every barrier: two threads lose
    (the recording's thin run is slower with two threads than with one)."""
    thin = _llama(tmp_path, n_embd=64, n_layer=128, ffn=256)
    assert _tok_s(thin, 2) < _tok_s(thin, 1)
    one, two = (_speed(thin, n).step_s["cpu fixed"] for n in (1, 2))
    assert two > 1.2 * one  # a barrier costs more than running a node alone


def test_a_slower_kernel_is_estimated_slower(tmp_path: Path) -> None:
    """The kernel's rate, not the probe's float rate, sets a compute-bound decode: the same
    model with a slower kernel is slower by the table's ratio."""
    model = _llama(tmp_path)
    q8 = _tok_s(model, 1)
    slow = dataclasses.replace(
        CPU_KERNELS,
        rates=MappingProxyType({**CPU_KERNELS.rates, "Q8_0": KernelRate(
            CPU_KERNELS.rate("Q8_0").one * 2, CPU_KERNELS.rate("Q8_0").several * 2)}),
    )  # fmt: skip
    cost = ModelCost.from_model(model, ModelWeights.from_model(model), slow)
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    shape = DecodeShape(None, 1, ("f16", "f16"), False, 0, 512)
    slowed = estimate(model, cost, placement, shape, SpeedRates(HOST), None, context=16,
                      routing=Routing.SAME).decode_tok_s  # fmt: skip
    assert slowed < q8 * 0.6


def test_another_machine_takes_the_stated_thread_costs(tmp_path: Path) -> None:
    """What threads cost is the measured machine's own: a host that is not it takes the stated
    costs (no per-row cost), so two threads gain more there than on the measured machine."""
    model = _llama(tmp_path, n_embd=512, ffn=32768)
    here = _tok_s(model, 2) / _tok_s(model, 1)
    elsewhere_host = dataclasses.replace(HOST, machine="Some Desktop CPU (16 CPUs)")
    cost = ModelCost.from_model(model, ModelWeights.from_model(model))
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    speeds = [
        estimate(model, cost, placement, DecodeShape(None, n, ("f16", "f16"), False, 0, 512),
                 SpeedRates(elsewhere_host), None, context=16, routing=Routing.SAME)
        for n in (1, 2)
    ]  # fmt: skip
    assert speeds[1].decode_tok_s / speeds[0].decode_tok_s > here
    assert any("assumed (not this machine)" in line for line in speeds[1].basis)
    assert CPU_KERNELS.thread_costs(CPU_KERNELS.machine).measured


IK_RECORDING = RECORDING.with_name("cpu-kernels-ik.json")


def test_ik_s_table_is_the_fit_of_its_own_recording() -> None:
    """ik_llama.cpp's kernels were measured like upstream's, with its own llama-bench, on the
    same machine; its table is that recording's fit, and the kernels a plan uses follow its
    engine."""
    from mtpstudio.core.speed.cpu_kernels import IK_CPU_KERNELS, kernels_for

    recording = Recording.from_json(json.loads(IK_RECORDING.read_text(encoding="utf-8")))
    fitted = dataclasses.replace(
        rounded(fit_kernels(recording)), column_share=committed_share("ik")
    )
    assert fitted == IK_CPU_KERNELS
    assert source_text(fitted, "IK_CPU_KERNELS") in SOURCE.read_text(encoding="utf-8")
    assert json.loads(IK_RECORDING.read_text())["engine"].startswith("ik-")
    assert IK_CPU_KERNELS.machine == CPU_KERNELS.machine  # one machine: the two compare
    from mtpstudio.core.engines.profiles import documented_profile
    from mtpstudio.core.plan.choices import EngineFlavour

    ik_speed = documented_profile(EngineFlavour.IK).speed
    up_speed = documented_profile(EngineFlavour.UPSTREAM).speed
    assert kernels_for(ik_speed.cpu_kernels) is IK_CPU_KERNELS
    assert kernels_for(up_speed.cpu_kernels) is CPU_KERNELS
    assert IK_CPU_KERNELS.rates["IQ4_XS"].one < CPU_KERNELS.rates["IQ4_XS"].one
