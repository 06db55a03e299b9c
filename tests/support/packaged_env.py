"""The environment a packaged program runs in during tests: nothing points at the source tree."""

from __future__ import annotations

import os


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without PYTHON* variables, an active venv or the repo's .venv on PATH."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if ".venv" not in part
    )
    env.update(extra)
    return env
