"""Small text helpers for sizes, counts and error sentences shown in the GUI."""

from __future__ import annotations

from mtpstudio.core.units import GIB
from mtpstudio.core.usecases.budget_words import gib, mib
from mtpstudio.core.usecases.words import error_sentence

__all__ = ["error_sentence", "gb_gib", "gib", "mib", "signed_mib"]


def gb_gib(n_bytes: int) -> str:
    """``19.52 GB (18.18 GiB)``: both units, as model sizes are published in GB."""
    return f"{n_bytes / 1e9:.2f} GB ({n_bytes / GIB:.2f} GiB)"


def signed_mib(delta_mib: float) -> str:
    """A difference in MiB to two decimals with its sign; one that rounds to zero is "0.00"
    (not "-0.00" or "+0.00")."""
    rounded = round(delta_mib, 2)
    return "0.00" if rounded == 0 else f"{rounded:+,.2f}"
