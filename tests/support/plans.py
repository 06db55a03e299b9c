"""The plan the launch tests start real servers from: a tiny model on the CPU, on a free
loopback port, with a small context and two threads (quick on a 2-core CI machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtpstudio.core.plan import Plan, plan_with
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
