"""The Plan's choices (its enumerations), without pydantic.

What the command line's parser offers (``--cache-type-k``'s choices, ``--flash-attn``'s …) is
read from here, so registering a subcommand costs no import of the Plan model; the Plan's fields
take these types.
"""

from __future__ import annotations

from enum import StrEnum


class CacheType(StrEnum):
    """K/V cache element types both engines accept for ``-ctk``/``-ctv``."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    Q8_0 = "q8_0"
    Q5_1 = "q5_1"
    Q5_0 = "q5_0"
    Q4_1 = "q4_1"
    Q4_0 = "q4_0"
    IQ4_NL = "iq4_nl"


class EngineFlavour(StrEnum):
    """Which llama.cpp family a ``llama-server`` binary belongs to."""

    UPSTREAM = "upstream"
    IK = "ik"


class FlashAttention(StrEnum):
    """``-fa`` setting."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class MoePlacement(StrEnum):
    """Where the routed-expert tensors go."""

    FIT = "fit"
    N_CPU_MOE = "n_cpu_moe"
    ALL_CPU = "all_cpu"
    GPU = "gpu"


class LoadMode(StrEnum):
    """How weights are loaded: memory-mapped, read into memory, or locked in RAM."""

    MMAP = "mmap"
    NO_MMAP = "no-mmap"
    MLOCK = "mlock"


class SplitMode(StrEnum):
    """``-sm``: how a model is split over several devices."""

    LAYER = "layer"
    ROW = "row"


class ShortVram(StrEnum):
    """What a service's check before the engine starts does when a GPU has less free memory
    than the plan needs at that moment."""

    REFUSE = "refuse"
    """Do not start: one line in the journal says what holds the memory."""
    WARN = "warn"
    """Start all the same, and say so in the journal (the engine may run out of memory)."""
    FIT = "fit"
    """Start with the engine's own fit instead of the plan's placement, and say so: it places
    by what is free then, leaving the desktop's share and the margin free."""


class DesktopReclaim(StrEnum):
    """How desktop VRAM is reclaimed, lightest first."""

    NONE = "none"
    NVIDIA_PROFILE = "nvidia-profile"
    IGPU = "igpu"
    LLVMPIPE = "llvmpipe"
