"""What the render tests share: the golden copies of the rendered files, the home the layouts
are planned for, and the plan of the issue's acceptance (the user's own command line)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.service.render import ServiceLayout, UnitScope, render_service_files
from support.argv import launch_spec

GOLDEN = Path(__file__).resolve().parents[1] / "render" / "golden"
UPDATE = os.environ.get("MTPSTUDIO_UPDATE_GOLDEN") == "1"
HOME = Path("/home/alice")

MODEL = "/home/alice/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"
BINARY = {"upstream": "/opt/llama.cpp/bin/llama-server", "ik": "/opt/ik_llama.cpp/bin/llama-server"}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {path}; run with MTPSTUDIO_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} differs from its golden copy; if the change is intended, rerun with "
        "MTPSTUDIO_UPDATE_GOLDEN=1 and review the diff"
    )


def layout(plan: Plan, scope: UnitScope) -> ServiceLayout:
    return ServiceLayout.for_plan(
        plan, scope, config_dir=HOME / ".config", data_dir=HOME / ".local/share"
    )


def users_plan(flavour: str) -> Plan:
    return plan_from_dict(
        {
            "model": {"path": MODEL, "card": None},
            "engine": {"flavour": flavour},
            "runtime": {
                "ctx": 131072, "cache_type_k": "q8_0", "cache_type_v": "q8_0",
                "moe": "fit", "fit_margin_mib": 1664, "threads": 8,
            },
            "mtp": {
                "enabled": True, "draft_max": 3, "draft_p_min": 0.75,
                "cache_type_k": "q8_0", "cache_type_v": "q8_0",
            },
            "desktop": "llvmpipe",
        }
    )  # fmt: skip


def unit_text(binary: Path, **plan: Any) -> str:
    """The system unit rendered for the acceptance model with these plan sections."""
    data: dict[str, Any] = {"model": {"path": MODEL}}
    data.update(plan)
    p = plan_from_dict(data)
    spec = launch_spec(p, documented_build(p.engine.flavour, binary))
    return render_service_files(p, spec, scope=UnitScope.SYSTEM, user="alice")["unit"].text


def unit_plan_text(made: Any, user: str = "alice") -> str:
    """The system unit rendered for a ``service_files.unit_plan`` (its command and its check)."""
    return render_service_files(
        made.resolved.effective, made.spec, scope=UnitScope.SYSTEM, user=user,
        prestart=made.prestart,
    )["unit"].text  # fmt: skip
