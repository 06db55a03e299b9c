"""The seeds' setup estimated: Qwen3.6-35B-A3B IQ4_XS on an RTX 4070 SUPER at 128k, q8_0, MTP 3.

Run: .venv/bin/python benchmarks/bench_speed_seeds.py

For upstream llama.cpp and for ik_llama.cpp since 8337e4c (the era that drafts Qwen3.6 with its
MTP layer), with the desktop as it is, the llvmpipe session and the display on the iGPU, it
prints the decode estimate (MTP on, and off) beside the seeds' measured figures, for the
stated desktop host (``ASSUMED_HOST``: the seeds' CPU and RAM are not known) and for this
computer's probed one, with the seeds' own acceptance (0.94 upstream, 0.87 ik) and with the
default. Nothing here runs a model: the seeds' numbers are the measurement.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.profiles import ik_stages, upstream
from mtpstudio.core.memory.devices import HostSpec
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    MachineFacts,
    PlanningContext,
    budget_for,
    resolve,
    speed_for,
)
from mtpstudio.core.speed.acceptance import DEFAULT_ACCEPTANCE, Acceptance
from mtpstudio.core.speed.host_rates import ASSUMED_HOST, HostRates, load_host_rates
from mtpstudio.core.speed.inputs import SpeedInputs

SEEDS = {"device": "rtx-4070-super", "runtime.ctx": 131072, "runtime.cache_type_k": "q8_0",
         "runtime.cache_type_v": "q8_0", "mtp.draft_max": 3, "mtp.draft_p_min": 0.75}  # fmt: skip
MEASURED = {"upstream": (89.76, 0.94), "ik": (110.24, 0.87)}
"""The seeds' runs: tok/s and acceptance (issue 37; which engine gave which is the seeds'
pairing: the higher acceptance on upstream, the higher tok/s on ik)."""
DESKTOPS = ("none", "llvmpipe", "igpu")


def build(flavour: str) -> EngineBuild:
    """The documented build of the era that drafts Qwen3.6 with MTP."""
    if flavour == "upstream":
        profile = upstream.PROFILE
        types = profile.documented_spec_types
    else:
        profile = ik_stages.PROFILE
        types = ("none", "ngram-mod", ik_stages.MTP_STAGE.probe)
    drafts = frozenset(s for e in profile.draft.spellings.values() for s in e.spellings)
    return EngineBuild(
        binary=Path(f"/opt/{flavour}/llama-server"),
        flavour=EngineFlavour(flavour),
        version="documented",
        backends=(Backend.CUDA, Backend.CPU),
        accepted_flags=profile.documented_flags | drafts,
        spec_types=types,
        mtp=MtpSupport.AVAILABLE,
    )


def row(flavour: str, desktop: str, host: HostRates, acceptance: Acceptance) -> str:
    machine = MachineFacts(HostSpec(64 * 2**30, 60 * 2**30), (), (build(flavour),))
    pctx = PlanningContext(machine, model_card_info("qwen3.6-35b-a3b-iq4_xs"),
                           speed=SpeedInputs(host))  # fmt: skip
    plan = plan_with(Plan(), {**SEEDS, "engine.flavour": flavour, "desktop": desktop})
    resolved = resolve(plan, pctx)
    budget = budget_for(resolved)
    speed = speed_for(resolved, budget, acceptance=acceptance)
    trunk = pctx.model.n_layer
    cpu = len([i for i in budget.placement.cpu_expert_layers if i < trunk])
    split = budget.placement.partial
    where = f"{trunk - cpu} of {trunk} expert layers on the card" + (
        f" (layer {split.layer} split)" if split is not None else ""
    )
    mtp = "MTP 3" if speed.mtp else "no MTP"
    return (f"    {desktop:<9} {where:<42} {mtp:<7} {speed.decode_tok_s:7.1f} tok/s "
            f"(without MTP {speed.plain_tok_s:6.1f})")  # fmt: skip


def main() -> int:
    probed = load_host_rates()
    hosts = [("the stated desktop", ASSUMED_HOST)]
    if probed is not None:
        hosts.append(("this computer", probed))
    for name, host in hosts:
        print(f"\nhost: {name}: {host.source}")
        for flavour in ("upstream", "ik"):
            got, acc = MEASURED[flavour]
            seeds = Acceptance(acc, 3, source="the seeds' run")
            print(f"  {flavour}: the seeds measured {got} tok/s at acceptance {acc}")
            for label, acceptance in (("the seeds' acceptance", seeds),
                                      ("the default acceptance", DEFAULT_ACCEPTANCE)):  # fmt: skip
                print(f"   with {label} ({acceptance.rate} at depth {acceptance.depth}):")
                for desktop in DESKTOPS:
                    print(row(flavour, desktop, host, replace(acceptance)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
