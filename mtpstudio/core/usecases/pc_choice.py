"""The PC a plan is for, as the window offers it: the catalogue CPUs and a RAM spec checked."""

from __future__ import annotations

from mtpstudio.core.catalog.cpus import cpu_spec, cpu_specs
from mtpstudio.core.speed.host_target import parse_ram


def cpu_choices() -> list[tuple[str, str]]:
    """(id, label) of every catalogue CPU, in the catalogue's order."""
    return [(c.id, c.label) for c in cpu_specs()]


def catalogue_cpu_id(text: str) -> str:
    """The catalogue id of the CPU ``text`` names (its id or name, any case).

    Raises:
        CatalogError: no such CPU; the message lists the catalogue's ids.
    """
    return cpu_spec(text).id


def checked_ram(text: str, cpu: str | None) -> str:
    """A RAM spec as the plan keeps it (lower case, no spaces).

    Raises:
        CatalogError: the text is not a RAM spec (the message says which forms it takes).
    """
    parse_ram(text, cpu_spec(cpu) if cpu else None)
    return text.strip().lower().replace(" ", "")
