"""The CPU kernels' cost of a further token in a batch, solved from the engine's own passes.

A verification step runs a pass of a few tokens. Through a weight one token has used, another
token of the same pass costs the kernel only part of its rate (the weights are in the core's
caches and the quantised input is ready): ``CpuKernels.column_share``. It is measured with the
engine's own ``llama-bench -p 1,2,3,4 -n 0`` on the full-size zero-weight Qwen3.6-35B-A3B on
this CPU (``benchmarks/bench_speed_cpu.py --calibrate-columns [--engine ik] --out …``): a
zero-weight router ties, so every token picks the same experts (``Routing.SAME``) and a pass of
``n`` tokens uses each weight ``n`` times. ``solve_column_share`` is the share whose estimates of
those passes grow from one token to ``n`` as the measured ones do (least squares on the growth;
the one-token pass is the kernel tables' own check).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mtpstudio.core.engines.profiles import documented_profile
from mtpstudio.core.memory.placement import ModelWeights, place
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.speed.cpu_kernels import CpuKernels, kernels_for
from mtpstudio.core.speed.estimate import SpeedRates, pass_time
from mtpstudio.core.speed.host_rates import HostRates, rates_from_probe
from mtpstudio.core.speed.traffic import ModelCost, Routing, pass_load

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speed"
RECORDINGS = {"upstream": FIXTURES / "cpu-columns.json", "ik": FIXTURES / "cpu-columns-ik.json"}
MODEL_CARD = "qwen3.6-35b-a3b-iq4_xs"
"""The model the passes ran on (its zero-weight file, ``bench_speed_cpu.zero_35b``)."""


@dataclass(frozen=True)
class ColumnRecording:
    """The engine's measured seconds per pass of ``n`` tokens, where and how it ran."""

    engine: str
    flavour: str
    machine: str
    threads: int
    host: HostRates
    seconds: dict[int, float]

    @classmethod
    def from_json(cls, data: Any) -> ColumnRecording:
        if not isinstance(data, dict) or not isinstance(data.get("passes"), list):
            raise ValueError("not a column-share recording")
        seconds = {int(p["tokens"]): float(p["seconds"]) for p in data["passes"]}
        if 1 not in seconds or len(seconds) < 2 or min(seconds.values()) <= 0:
            raise ValueError("a column-share recording needs a one-token pass and a longer one")
        host = rates_from_probe(data["probe"], int(data["cores"]), "the recording's probe")
        return cls(
            engine=str(data["engine"]),
            flavour=str(data["flavour"]),
            machine=str(data["machine"]),
            threads=int(data["threads"]),
            host=replace(host, machine=str(data["machine"]), clock_ghz=float(data["clock_ghz"])),
            seconds=seconds,
        )


def read_recording(path: Path) -> ColumnRecording:
    return ColumnRecording.from_json(json.loads(path.read_text(encoding="utf-8")))


def recorded_host(flavour: str = "upstream") -> HostRates:
    """The rates probed (and the clock read) beside an engine's recorded passes: the machine
    the CPU kernel tables were measured on, the same on every machine that reads it."""
    return read_recording(RECORDINGS[flavour]).host


def estimated_pass(
    model: ModelInfo, kernels: CpuKernels, flavour: str, host: HostRates, threads: int, n: int
) -> float:
    """The estimate's seconds of one CPU pass of ``n`` tokens through the whole model (the
    tokens picking the same experts, one row of logits: llama-bench's prompt pass)."""
    rules = documented_profile(EngineFlavour(flavour)).speed
    cost = ModelCost.from_model(model, ModelWeights.from_model(model), kernels,
                                rules.fused_moe_graph)  # fmt: skip
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    load = pass_load(model, cost, placement, None, blocks=range(model.n_layer), tokens=n,
                     outputs=1, depth=0, cache_types=("f16", "f16"),
                     routing=Routing.SAME)  # fmt: skip
    return pass_time(load, SpeedRates(host), threads, kernels=kernels,
                     n_head=model.n_head).seconds  # fmt: skip


def solve_column_share(recording: ColumnRecording, model: ModelInfo) -> float:
    """The ``column_share`` (0 to 1) whose estimated growth from one token to each measured
    ``n`` is the measured growth, in the least-squares sense (the estimate is linear in it)."""
    rules = documented_profile(EngineFlavour(recording.flavour)).speed
    base = kernels_for(rules.cpu_kernels)

    def growth(share: float, n: int) -> float:
        kernels = replace(base, column_share=share)
        one = estimated_pass(model, kernels, recording.flavour, recording.host,
                             recording.threads, 1)  # fmt: skip
        return estimated_pass(model, kernels, recording.flavour, recording.host,
                              recording.threads, n) - one  # fmt: skip

    longer = [n for n in sorted(recording.seconds) if n > 1]
    measured = [recording.seconds[n] - recording.seconds[1] for n in longer]
    at_zero = [growth(0.0, n) for n in longer]
    slope = [growth(1.0, n) - z for n, z in zip(longer, at_zero, strict=True)]
    den = sum(s * s for s in slope)
    if den <= 0:
        raise ValueError("the passes do not depend on the column share")
    share = sum(s * (m - z) for s, m, z in zip(slope, measured, at_zero, strict=True)) / den
    return min(1.0, max(0.0, share))


def committed_share(flavour: str) -> float:
    """The column share the engine's recording solves to, to the four digits the kernel tables
    write (``cpu_kernels.CPU_KERNELS.column_share`` and ``IK_CPU_KERNELS``'s must equal it)."""
    from mtpstudio.core.catalog.models import model_card_info

    share = solve_column_share(read_recording(RECORDINGS[flavour]), model_card_info(MODEL_CARD))
    if share == 0:
        return 0.0
    return round(share, 3 - math.floor(math.log10(abs(share))))
