"""Byte units used across the core."""

from __future__ import annotations

import math
import re

from mtpstudio.core.errors import PlanError

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024


def mib(n_bytes: int | float) -> float:
    """Bytes as MiB."""
    return n_bytes / MIB


_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)


def _scaled(text: str, scales: dict[str, int]) -> int | None:
    m = _COUNT.match(text.replace(",", "").replace("_", ""))
    if not m or m.group(2).lower() not in scales:
        return None
    number = float(m.group(1)) * scales[m.group(2).lower()]
    if not math.isfinite(number) or number != int(number):
        return None
    return int(number)


TOKEN_SCALES = {"": 1, "k": 1024, "m": 1024 * 1024}
MIB_SCALES = {"": 1, "m": 1, "g": 1024}


def parse_token_count(text: str, what: str = "--ctx") -> int:
    """``131072``, ``128k`` or ``128 k`` (x1024), ``1m`` (x1024²) or ``1e6`` as a whole
    number of tokens (the CLI's ``--ctx`` and the window's token boxes).

    Raises:
        PlanError: one sentence saying what was wrong.
    """
    value = _scaled(text, TOKEN_SCALES)
    if value is None:
        raise PlanError(
            f"{what} {text!r} is not a whole number of tokens",
            hint="Write it like 32768, 128k (= 131072) or 1e6.",
        )
    return value


def parse_mib(text: str, what: str = "the size") -> int:
    """``1024``, ``512M`` or ``1.5G`` (x1024) as a whole number of MiB.

    Raises:
        PlanError: one sentence saying what was wrong.
    """
    value = _scaled(text, MIB_SCALES)
    if value is None:
        raise PlanError(
            f"{what} {text!r} is not a whole number of MiB",
            hint="Write it like 1024, 512M or 1.5G (= 1536 MiB).",
        )
    return value
