"""The plans tests start from: a tiny model on the CPU, on a free loopback port, with a small
context and two threads (what the launch tests run real servers from, quick on a 2-core CI
machine), and the demo card on a catalogue GPU (what the planning tests plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from support.servers import free_port


def cpu_plan(binary: Path, model: Path, flavour: str = "upstream", **changes: Any) -> Plan:
    """A CPU plan for a tiny model on a free loopback port; ``changes`` by dotted key."""
    base: dict[str, Any] = {
        "device": "cpu",
        "model.path": str(model),
        "model.card": None,
        "engine.flavour": flavour,
        "engine.binary": str(binary),
        "runtime.ctx": 512,
        "runtime.cache_type_k": "f16",
        "runtime.cache_type_v": "f16",
        "runtime.threads": 2,
        "mtp.enabled": False,
        "server.port": free_port(),
    }
    base.update(changes)
    return plan_with(Plan(), base)


def demo_plan(**changes: Any) -> Plan:
    """The demo card (Qwen3.6-35B-A3B) on an RTX 4070 Super with upstream; ``changes`` by
    dotted key."""
    card = {
        "model.card": DEFAULT_MODEL_CARD,
        "device": "rtx-4070-super",
        "engine.flavour": "upstream",
    }
    return plan_with(plan_with(Plan(), card), dict(changes))


def published_resolved(**changes: Any) -> Any:
    """The published setup on the catalogue RTX 4070 SUPER (the demo's defaults where they fit),
    resolved on a machine without detection; ``changes`` by dotted key."""
    from mtpstudio.core.catalog.models import model_card_info
    from mtpstudio.core.planner.resolve import (
        PlanningContext,
        machine_for,
        published_demo_plan,
        resolve,
    )

    pctx = PlanningContext(machine_for(None), model_card_info(DEFAULT_MODEL_CARD))
    plan, said = published_demo_plan(plan_with(Plan(), {"device": "rtx-4070-super"}), pctx)
    assert said.startswith("Demo defaults: the published setup"), said
    return resolve(plan_with(plan, dict(changes)), pctx)
