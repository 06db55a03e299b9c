"""The speed estimate beside published community runs (issue 43).

``tests/fixtures/speed/published-runs.json`` is a table of runs others published: the card, the
CPU and RAM where they said, the model and quant, the context, where the experts were, the
engine, the draft depth, p-min and acceptance (or the server's counters), and the decode tok/s
with and without MTP, each with its source and the quote the figures come from. Each run is
planned as mtpstudio plans it (the catalogue card, the catalogue CPU or, where the run names
none, the stand-in below, the quant's recipe on the model's card) and its estimate is printed
beside the published figure. The table checks the model; nothing is fitted to it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from mtpstudio.core.catalog.models import model_card_path
from mtpstudio.core.engines.profiles import documented_profile
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.memory.machine import MachineFacts
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import PlanningContext, budget_for, resolve, speed_for
from mtpstudio.core.speed.acceptance import Acceptance, from_counters, given_acceptance
from mtpstudio.core.speed.host_rates import HostRates
from mtpstudio.core.speed.inputs import SpeedInputs

TABLE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speed" / "published-runs.json"
STAND_IN_CPU = "ryzen-7-7700x"
STAND_IN_RAM = "ddr5-6000x2"
"""The PC a run that names no CPU is planned on: a common desktop beside such cards (stated)."""
MODELS = {"35b": "qwen3.6-35b-a3b", "27b": "qwen3.6-27b"}
GIB = 1024**3


@dataclass(frozen=True)
class PublishedRun:
    """One published run, as the table holds it."""

    id: str
    source: str
    card: str
    model: str
    quant: str
    context: int
    cache: tuple[str, str]
    placement: dict[str, Any]
    engine: str
    tok_s_off: float | None
    tok_s_on: float | None
    depth: int | None = None
    p_min: float | None = None
    acceptance: float | None = None
    counters: tuple[int, int, int] | None = None
    cpu: str | None = None
    ram: str | None = None
    threads: int | None = None
    desktop: str = "none"
    filled: int = 512

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PublishedRun:
        counters = data.get("counters")
        return cls(
            id=data["id"],
            source=data["source"],
            card=data["card"],
            model=data["model"],
            quant=data["quant"],
            context=int(data["context"]),
            cache=(data["cache"][0], data["cache"][1]),
            placement=dict(data["placement"]),
            engine=data["engine"],
            tok_s_off=data.get("tok_s_off"),
            tok_s_on=data.get("tok_s_on"),
            depth=data.get("depth"),
            p_min=data.get("p_min"),
            acceptance=data.get("acceptance"),
            counters=None
            if counters is None
            else (counters["predicted"], counters["drafted"], counters["accepted"]),
            cpu=data.get("cpu"),
            ram=data.get("ram"),
            threads=data.get("threads"),
            desktop=data.get("desktop", "none"),
            filled=int(data.get("filled", 512)),
        )

    @property
    def engine_p_min(self) -> float:
        """The run's p-min: as given, else its engine's default (upstream 0, ik 0.75)."""
        if self.p_min is not None:
            return self.p_min
        return documented_profile(EngineFlavour(self.engine)).speed.default_p_min


def published_runs(path: Path = TABLE) -> list[PublishedRun]:
    document = json.loads(path.read_text("utf-8"))
    return [PublishedRun.from_json(r) for r in document["runs"]]


def source_key(source: str) -> str:
    """A run's independent source: its repository (``github owner/name …``, ``owner/name …``),
    its site (a URL's host), or its forum post (``r/LocalLLaMA post ID``)."""
    words = source.split()
    if words[0] == "github" and len(words) > 1:
        return words[1]
    if words[0].startswith("https://"):
        return words[0].split("/")[2]
    if words[0].startswith("r/") and len(words) > 2:
        return " ".join(words[:3])
    return words[0]


def sources(runs: Iterable[PublishedRun]) -> set[str]:
    """The independent sources of ``runs`` (``source_key``)."""
    return {source_key(r.source) for r in runs}


@cache
def run_model(model: str, quant: str) -> ModelInfo:
    """The catalogue card of the run's model at the run's quant (``qwen3.6-27b-q4_k_m``)."""
    return read_model_info(model_card_path(f"{MODELS[model]}-{quant.lower()}"))


def run_plan(run: PublishedRun, header: Path, mtp: bool) -> Plan:
    changes: dict[str, Any] = {
        "model.path": str(header),
        "model.card": None,
        "device": run.card,
        "engine.flavour": run.engine,
        "runtime.ctx": run.context,
        "runtime.cache_type_k": run.cache[0],
        "runtime.cache_type_v": run.cache[1],
        "mtp.enabled": mtp,
        "mtp.draft_max": max(1, run.depth or 2),
        "mtp.draft_p_min": run.engine_p_min,
        "host.cpu": run.cpu or STAND_IN_CPU,
        "host.ram": run.ram if run.cpu else (run.ram or STAND_IN_RAM),
        "desktop": run.desktop,
    }
    if run.threads:
        changes["runtime.threads"] = run.threads
    kind = run.placement["kind"]
    if kind == "fit":
        changes["runtime.moe"] = "fit"
        changes["runtime.fit_margin_mib"] = int(run.placement.get("target_mib", 1024))
    elif kind == "n_cpu_moe":
        changes["runtime.moe"] = "n_cpu_moe"
        changes["runtime.n_cpu_moe"] = int(run.placement["n"])
    elif kind == "all_cpu":
        changes["runtime.moe"] = "all_cpu"
    elif kind == "layers":
        changes["runtime.moe"] = "gpu"
        changes["runtime.n_gpu_layers"] = int(run.placement["n_gpu_layers"])
    else:
        changes["runtime.moe"] = "gpu"
    return plan_with(Plan(), changes)


def run_acceptance(run: PublishedRun) -> Acceptance | None:
    """The run's own acceptance: its counters where it gave them, else its rate."""
    depth = max(1, run.depth or 1)
    first_kept = documented_profile(EngineFlavour(run.engine)).speed.first_draft_kept
    if run.counters is not None:
        predicted, drafted, accepted = run.counters
        found = from_counters(
            predicted, drafted, accepted, depth, run.engine_p_min, run.id, first_kept
        )
        if found is not None:
            return found
    if run.acceptance is None:
        return None
    given = given_acceptance(run.acceptance, depth, run.engine_p_min)
    return replace(given, first_kept=first_kept)


@dataclass(frozen=True)
class RunEstimate:
    run: PublishedRun
    off: float
    on: float | None

    @property
    def errors(self) -> list[float]:
        out = []
        if self.run.tok_s_off:
            out.append(self.off / self.run.tok_s_off - 1)
        if self.run.tok_s_on and self.on is not None:
            out.append(self.on / self.run.tok_s_on - 1)
        return out

    @property
    def speedup_error(self) -> float | None:
        """(estimated on/off) / (published on/off) − 1, for a run with both."""
        if self.on is None or not self.run.tok_s_on or not self.run.tok_s_off:
            return None
        return (self.on / self.off) / (self.run.tok_s_on / self.run.tok_s_off) - 1


def estimate_run(run: PublishedRun, host: HostRates) -> RunEstimate:
    model = run_model(run.model, run.quant)
    machine = MachineFacts(HostSpec(256 * GIB, 250 * GIB), (), (), (), None)
    pctx = PlanningContext(machine, model, speed=SpeedInputs(host))
    header = Path(model.paths[0])
    off_plan = resolve(run_plan(run, header, mtp=False), pctx)
    off = speed_for(off_plan, budget_for(off_plan), context=run.filled).plain_tok_s
    on = None
    acceptance = run_acceptance(run)
    if run.tok_s_on and acceptance is not None:
        on_plan = resolve(run_plan(run, header, mtp=True), pctx)
        speed = speed_for(on_plan, budget_for(on_plan), acceptance=acceptance, context=run.filled)
        on = speed.decode_tok_s if speed.mtp else speed.plain_tok_s
    return RunEstimate(run, off, on)


def summary_lines(estimates: list[RunEstimate]) -> list[str]:
    lines = []
    for e in estimates:
        r = e.run
        off = f"{r.tok_s_off:6.1f} est {e.off:6.1f}" if r.tok_s_off else " " * 17
        on = f"{r.tok_s_on:6.1f} est {e.on:6.1f}" if r.tok_s_on and e.on is not None else " " * 17
        err = " ".join(f"{x:+.0%}" for x in e.errors)
        spd = "" if e.speedup_error is None else f" speed-up {e.speedup_error:+.0%}"
        lines.append(f"{r.id[:40]:40} {r.card:17} {r.engine:8} off {off} | on {on}  {err}{spd}")
    errors = [abs(x) for e in estimates for x in e.errors]
    if errors:
        lines.append(
            f"all: {len(errors)} figures from {len(estimates)} runs, median |error| "
            f"{statistics.median(errors):.1%}, worst {max(errors):.1%}"
        )
    for key in ("card", "engine"):
        groups: dict[str, list[float]] = {}
        for e in estimates:
            groups.setdefault(getattr(e.run, key), []).extend(abs(x) for x in e.errors)
        for name, errs in sorted(groups.items()):
            if errs:
                lines.append(
                    f"  {key} {name}: {len(errs)} figures, median {statistics.median(errs):.1%}, "
                    f"worst {max(errs):.1%}"
                )
    speedups = [abs(s) for e in estimates if (s := e.speedup_error) is not None]
    if speedups:
        lines.append(
            f"on/off pairs: {len(speedups)}, speed-up error median "
            f"{statistics.median(speedups):.1%}, worst {max(speedups):.1%}"
        )
    return lines
