"""Byte units used across the core."""

from __future__ import annotations

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024


def mib(n_bytes: int | float) -> float:
    """Bytes as MiB."""
    return n_bytes / MIB
