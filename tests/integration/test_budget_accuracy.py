"""The memory model against the real engines: predicted buffers vs the ones they log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.servers import LlamaServer
from support.tiny_models import TinyModelCache

from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.engine_facts import memory_facts
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan import EngineFlavour, plan_from_dict
from mtpstudio.core.server.load_log import parse_load_log
from mtpstudio.core.units import MIB

pytestmark = [pytest.mark.engine, pytest.mark.slow]

EXACT_MIB = 0.01  # the log prints two decimals
COMPUTE_TOLERANCE = 0.10
BIG = dict(n_ctx_train=65536)
HYBRID = dict(
    n_embd=256,
    n_head=4,
    n_head_kv=2,
    head_dim=64,
    n_layer=4,
    n_expert=8,
    n_expert_used=2,
    n_ff_exp=128,
    n_ff_shexp=128,
    ssm_d_state=64,
    ssm_n_group=2,
    ssm_dt_rank=4,
    n_vocab=4000,
    **BIG,
)
DENSE = dict(
    n_embd=256, n_ff=512, n_head=4, n_head_kv=2, head_dim=64, n_layer=2, n_vocab=4000, **BIG
)
MOE = dict(
    n_embd=256,
    n_head=4,
    n_head_kv=2,
    head_dim=64,
    n_layer=2,
    n_expert=8,
    n_expert_used=2,
    n_ff_exp=128,
    n_vocab=4000,
    **BIG,
)


@dataclass(frozen=True)
class Config:
    """One measured configuration: a model, the server options and the plan that says the same."""

    name: str
    engine: str
    kind: str
    model: dict[str, Any]
    ctx: int
    ctk: str = "f16"
    ctv: str = "f16"
    parallel: int = 1
    fa: str = "on"
    ubatch: int = 512
    mtp: int = 0  # draft max; 0 = MTP off
    draft_ctk: str = "f16"
    draft_ctv: str = "f16"
    moe: str = "gpu"
    n_cpu_moe: int = 0
    extra: tuple[str, ...] = field(default=())

    def server_args(self) -> list[str]:
        args = ["-ctk", self.ctk, "-ctv", self.ctv, "-fa", self.fa, "-ub", str(self.ubatch)]
        if self.engine == "upstream":
            args += ["-lv", "4"]
        if self.mtp:
            args += [
                "--spec-type",
                "draft-mtp",
                "--spec-draft-n-max",
                str(self.mtp),
                "--spec-draft-type-k",
                self.draft_ctk,
                "--spec-draft-type-v",
                self.draft_ctv,
            ]
        if self.moe == "all_cpu":
            args += ["--cpu-moe"]
        elif self.moe == "n_cpu_moe":
            args += ["--n-cpu-moe", str(self.n_cpu_moe)]
        return args + list(self.extra)

    def plan_data(self) -> dict[str, Any]:
        return {
            "device": "cpu",
            "engine": {"flavour": self.engine},
            "runtime": {
                "ctx": self.ctx,
                "cache_type_k": self.ctk,
                "cache_type_v": self.ctv,
                "parallel": self.parallel,
                "flash_attn": self.fa,
                "ubatch": self.ubatch,
                "moe": self.moe,
                "n_cpu_moe": self.n_cpu_moe,
            },
            "mtp": {
                "enabled": bool(self.mtp),
                "draft_max": max(self.mtp, 1),
                "cache_type_k": self.draft_ctk,
                "cache_type_v": self.draft_ctv,
            },
        }


def C(name: str, engine: str, kind: str, model: dict[str, Any], ctx: int, **kw: Any) -> Config:
    return Config(name, engine, kind, model, ctx, **kw)


UPSTREAM = [
    C("dense f32 ctx256", "upstream", "dense", DENSE, 256),
    C(
        "dense f16 q8_0 4k",
        "upstream",
        "dense",
        {**DENSE, "dtype": "f16"},
        4096,
        ctk="q8_0",
        ctv="q8_0",
    ),
    C(
        "dense q8_0 q4_0 32k",
        "upstream",
        "dense",
        {**DENSE, "dtype": "q8_0"},
        32768,
        ctk="q4_0",
        ctv="q4_0",
    ),
    C("dense q5_1 np2 8k", "upstream", "dense", DENSE, 8192, ctk="q5_1", ctv="q5_1", parallel=2),
    C("dense f16/q8_0 np4 2k", "upstream", "dense", DENSE, 2048, ctv="q8_0", parallel=4),
    C("dense fa off 4k", "upstream", "dense", DENSE, 4096, fa="off"),
    C("dense ub128 8k", "upstream", "dense", DENSE, 8192, ubatch=128),
    C("moe f32 q8_0 4k", "upstream", "moe", MOE, 4096, ctk="q8_0", ctv="q8_0"),
    C("moe f16 np2 16k", "upstream", "moe", {**MOE, "dtype": "f16"}, 16384, parallel=2),
    C(
        "moe q8_0 cpu-moe 1k",
        "upstream",
        "moe",
        {**MOE, "dtype": "q8_0"},
        1024,
        ctk="q4_0",
        ctv="q4_0",
        moe="all_cpu",
    ),
    C("moe n-cpu-moe 1", "upstream", "moe", MOE, 4096, moe="n_cpu_moe", n_cpu_moe=1),
    C("moe q5_1 np4 4k", "upstream", "moe", MOE, 4096, ctk="q5_1", ctv="q5_1", parallel=4),
    C("hybrid f32 4k", "upstream", "hybrid", HYBRID, 4096),
    C(
        "hybrid f16 q8_0 np2 8k",
        "upstream",
        "hybrid",
        {**HYBRID, "dtype": "f16"},
        8192,
        ctk="q8_0",
        ctv="q8_0",
        parallel=2,
    ),
    C("hybrid fa off 2k", "upstream", "hybrid", HYBRID, 2048, fa="off"),
    C("hybrid-mtp, MTP off 4k", "upstream", "hybrid-mtp", HYBRID, 4096),
    C("mtp dmax1 f16", "upstream", "hybrid-mtp", HYBRID, 4096, mtp=1),
    C("mtp dmax2 q8_0", "upstream", "hybrid-mtp", HYBRID, 8192, ctk="q8_0", ctv="q8_0", mtp=2),
    C(
        "mtp dmax3 q5_1 draft q8_0",
        "upstream",
        "hybrid-mtp",
        HYBRID,
        4096,
        ctk="q5_1",
        ctv="q5_1",
        mtp=3,
        draft_ctk="q8_0",
        draft_ctv="q8_0",
    ),
    C("mtp dmax3 np2", "upstream", "hybrid-mtp", HYBRID, 4096, mtp=3, parallel=2),
    C("mtp q4_0 32k", "upstream", "hybrid-mtp", HYBRID, 32768, ctk="q4_0", ctv="q4_0", mtp=2),
    C("mtp ctx256", "upstream", "hybrid-mtp", HYBRID, 256, mtp=2),
    C(
        "mtp q8_0 weights np4",
        "upstream",
        "hybrid-mtp",
        {**HYBRID, "dtype": "q8_0"},
        4096,
        mtp=2,
        parallel=4,
    ),
    C(
        "mtp f16 w, q4_0 16k dmax1",
        "upstream",
        "hybrid-mtp",
        {**HYBRID, "dtype": "f16"},
        16384,
        ctk="q4_0",
        ctv="q4_0",
        mtp=1,
    ),
    C("mtp cpu-moe", "upstream", "hybrid-mtp", HYBRID, 4096, mtp=2, moe="all_cpu"),
]
IK = [
    C("ik dense f32 4k", "ik", "dense", DENSE, 4096),
    C("ik dense q8_0 8k", "ik", "dense", {**DENSE, "dtype": "q8_0"}, 8192, ctk="q8_0", ctv="q8_0"),
    C("ik dense fa off 1000", "ik", "dense", DENSE, 1000, fa="off"),
    C("ik moe f16 np2", "ik", "moe", {**MOE, "dtype": "f16"}, 4096, parallel=2),
    C("ik hybrid f32 4k", "ik", "hybrid", HYBRID, 4096),
    C("ik hybrid q8_0 np2", "ik", "hybrid", HYBRID, 8192, ctk="q8_0", ctv="q8_0", parallel=2),
    C("ik hybrid q4_0 32k", "ik", "hybrid", HYBRID, 32768, ctk="q4_0", ctv="q4_0"),
]

SEGMENTS = (
    "weights",
    "kv_cache",
    "recurrent_state",
    "mtp_kv_cache",
    "output",
    "compute",
    "mtp_compute",
)
ROWS: list[tuple[str, str, str, float, float]] = []


def measured(config: Config, log: str) -> dict[str, float]:
    report = parse_load_log(log)
    main = report.context("main")
    assert main is not None, "no context lines in the log"
    out = {
        "weights": sum(report.model.values()),
        "kv_cache": sum(main.kv.values()),
        "recurrent_state": sum(main.recurrent.values()),
        "output": sum(main.output.values()),
        "compute": sum(main.compute.values()),
    }
    mtp = report.context("mtp")
    if config.mtp:
        assert mtp is not None, "MTP was asked for but no MTP context was logged"
        out["mtp_kv_cache"] = sum(mtp.kv.values())
        out["mtp_compute"] = sum(mtp.compute.values())
    return out


def predicted(config: Config, model_path: Any) -> dict[str, float]:
    plan = plan_from_dict(config.plan_data())
    info = read_model_info(model_path)
    facts = memory_facts(EngineFlavour(config.engine))
    budget = compute_budget(plan, info, TargetDevice("CPU", "CPU", None), facts)
    p = {k: v / MIB for k, v in budget.parts.items()}
    out = {
        "weights": p["weights_total"],
        "kv_cache": p["kv_cache"] + (p["recurrent_state"] if facts.recurrent_in_kv_buffer else 0),
        "recurrent_state": 0.0 if facts.recurrent_in_kv_buffer else p["recurrent_state"],
        "output": p["output"],
        "compute": p["compute"],
    }
    if config.mtp:
        out["mtp_kv_cache"] = p["mtp_kv_cache"]
        out["mtp_compute"] = p["mtp_compute"]
    return out


@pytest.mark.parametrize("config", UPSTREAM + IK, ids=lambda c: c.name)
def test_prediction_matches_the_engine_log(
    config: Config,
    tiny_model: TinyModelCache,
    running_server: Callable[..., LlamaServer],
) -> None:
    model_path = tiny_model(config.kind, **config.model)
    server = running_server(
        config.engine,
        model_path,
        config.server_args(),
        ctx_size=config.ctx,
        parallel=config.parallel,
    )
    got = measured(config, server.log_text())
    want = predicted(config, model_path)
    problems = []
    for segment in SEGMENTS:
        if segment not in got:
            continue
        g, w = got[segment], want[segment]
        ROWS.append((config.name, config.engine, segment, w, g))
        if segment in ("compute", "mtp_compute"):
            ok = abs(w - g) <= COMPUTE_TOLERANCE * max(g, 0.01) + EXACT_MIB
        else:
            ok = abs(w - g) <= EXACT_MIB
        if not ok:
            problems.append(f"{segment}: predicted {w:.2f} MiB, logged {g:.2f} MiB")
    assert problems == []


def accuracy_table() -> list[str]:
    """The predicted-vs-logged table and the largest error per segment (printed by conftest)."""
    if not ROWS:
        return []
    lines = [
        "predicted vs logged (MiB)",
        f"{'configuration':32} {'engine':8} {'segment':16} {'predicted':>10} {'logged':>10}"
        f" {'error':>8}",
    ]
    worst: dict[str, float] = {}
    for name, eng, seg, w, g in ROWS:
        err = w - g
        rel = f"{100 * err / g:+.1f}%" if g else ""
        lines.append(f"{name:32} {eng:8} {seg:16} {w:10.2f} {g:10.2f} {rel:>8}")
        key = f"{eng}/{seg}"
        if seg.endswith("compute"):
            worst[key] = max(worst.get(key, 0.0), abs(err) / g if g else 0.0)
        else:
            worst[key] = max(worst.get(key, 0.0), abs(err))
    lines.append("largest error per segment:")
    for key, value in sorted(worst.items()):
        shown = f"{100 * value:.1f}% (relative)" if key.endswith("compute") else f"{value:.3f} MiB"
        lines.append(f"  {key:28} {shown}")
    return lines
