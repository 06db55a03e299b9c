"""The memory model against the real engines: predicted buffers vs the ones they log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.servers import LlamaServer
from support.tiny_models import TinyModelCache
from support.tiny_shapes import DENSE, HYBRID, MOE

from devkit.budget_check import (
    EXACT_MIB,
    SEGMENTS,
    LoadConfig,
    measured,
    predicted,
)
from mtpstudio.core.model.gguf import read_model_info

pytestmark = [pytest.mark.engine, pytest.mark.slow]

COMPUTE_TOLERANCE = 0.10


@dataclass(frozen=True)
class Config(LoadConfig):
    """One measured configuration: a tiny model besides the load options and their plan."""

    kind: str = "dense"
    model: dict[str, Any] = field(default_factory=dict)


def C(name: str, engine: str, kind: str, model: dict[str, Any], ctx: int, **kw: Any) -> Config:
    return Config(name=name, engine=engine, kind=kind, model=model, ctx=ctx, **kw)


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
    C("ik mtp dmax3 f16", "ik", "hybrid-mtp", HYBRID, 4096, mtp=3),
    C("ik mtp dmax2 q8_0 8k", "ik", "hybrid-mtp", HYBRID, 8192, ctk="q8_0", ctv="q8_0", mtp=2),
    C("ik mtp dmax1 cpu-moe", "ik", "hybrid-mtp", HYBRID, 4096, mtp=1, moe="all_cpu"),
]
B11549 = [  # upstream b11549 (xllamacpp 2026.10.11549): the same accuracy as b11434
    C("b11549 dense q8_0 8k", "upstream-b11549", "dense", DENSE, 8192, ctk="q8_0", ctv="q8_0"),
    C("b11549 moe n-cpu-moe 1", "upstream-b11549", "moe", MOE, 4096, moe="n_cpu_moe", n_cpu_moe=1),
    C("b11549 hybrid f16 np2", "upstream-b11549", "hybrid", {**HYBRID, "dtype": "f16"}, 8192,
      parallel=2),
    C("b11549 hybrid-mtp, MTP off", "upstream-b11549", "hybrid-mtp", HYBRID, 4096),
    C("b11549 mtp dmax3 q8_0", "upstream-b11549", "hybrid-mtp", HYBRID, 4096, ctk="q8_0",
      ctv="q8_0", mtp=3, draft_ctk="q8_0", draft_ctv="q8_0"),
    C("b11549 mtp np2 cpu-moe", "upstream-b11549", "hybrid-mtp", HYBRID, 4096, mtp=2, parallel=2,
      moe="all_cpu"),
]  # fmt: skip

ROWS: list[tuple[str, str, str, float, float]] = []


@pytest.mark.parametrize("config", UPSTREAM + IK + B11549, ids=lambda c: c.name)
def test_prediction_matches_the_engine_log(
    config: Config,
    tiny_model: TinyModelCache,
    running_server: Callable[..., LlamaServer],
) -> None:
    model_path = tiny_model(config.kind, **config.model)
    server = running_server(
        config.engine,
        model_path,
        config.engine_args(),
        ctx_size=config.ctx,
        parallel=config.parallel,
    )
    got = measured(config, server.log_text())
    want = predicted(config, read_model_info(model_path))
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
