"""The core's small things the faces need: its errors, one sentence for one, sizes, paths.

The CLI and the GUI reach these through the use-case layer like everything else of the core;
this module stays light (no planner, no pydantic), so a face can import it at start-up.
"""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.errors import (
    AdapterError,
    BenchError,
    CatalogError,
    GgufError,
    HubError,
    MtpStudioError,
    PlanError,
    RenderError,
    ServerError,
)
from mtpstudio.core.outside_text import visible
from mtpstudio.core.units import GIB, MIB, parse_mib, parse_token_count

__all__ = [
    "GIB",
    "MIB",
    "AdapterError",
    "BenchError",
    "CatalogError",
    "GgufError",
    "HubError",
    "MtpStudioError",
    "PlanError",
    "RenderError",
    "ServerError",
    "config_dir",
    "error_sentence",
    "models_dir",
    "parse_mib",
    "parse_token_count",
    "state_dir",
    "visible",
]


def error_sentence(exc: BaseException) -> str:
    """One readable sentence for an exception (core errors carry their own wording)."""
    if isinstance(exc, MtpStudioError):
        text = str(exc)
        if exc.hint:
            text += f". {exc.hint}" if not text.endswith(".") else f" {exc.hint}"
    else:
        text = f"Unexpected error ({type(exc).__name__}): {exc}"
    text = visible(" ".join(text.split()))
    return text[:1].upper() + text[1:]


def config_dir() -> Path:
    """mtpstudio's config folder (``core.paths``; loaded only when asked, for a quick start-up)."""
    from mtpstudio.core import paths

    return paths.config_dir()


def models_dir() -> Path:
    """Where downloaded models go (``core.paths``)."""
    from mtpstudio.core import paths

    return paths.models_dir()


def state_dir() -> Path:
    """Where mtpstudio keeps its records of what it installed and ran (``core.paths``)."""
    from mtpstudio.core import paths

    return paths.state_dir()
