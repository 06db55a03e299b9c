"""What one llama-server build is and accepts, as probed (the contract detection -> adapters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from mtpstudio.core.plan.choices import EngineFlavour


class MtpSupport(StrEnum):
    """Whether MTP drafting can be requested from a build."""

    AVAILABLE = "available"  # upstream: draft-mtp is among --spec-type values
    UNAVAILABLE = "unavailable"  # the build has no way to ask for MTP
    UNKNOWN_UNTIL_LAUNCH = "unknown until launch"  # ik: -mtp exists; the arch decides at load


class Backend(StrEnum):
    """The compute backend a build was compiled for."""

    CPU = "CPU"
    CUDA = "CUDA"
    VULKAN = "Vulkan"
    ROCM = "ROCm"
    METAL = "Metal"
    SYCL = "SYCL"
    RPC = "RPC"


@dataclass(frozen=True)
class EngineBuild:
    """A probed ``llama-server`` binary.

    ``accepted_flags`` / ``rejected_flags`` hold the spellings (e.g. ``"--spec-draft-n-max"``)
    that the ``<flag> <value> --version`` probe found accepted or rejected. Adapters must never
    emit a flag that is not in ``accepted_flags``.
    """

    binary: Path
    flavour: EngineFlavour
    version: str
    build_number: int | None = None
    commit: str | None = None
    backends: tuple[Backend, ...] = (Backend.CPU,)
    accepted_flags: frozenset[str] = frozenset()
    rejected_flags: frozenset[str] = frozenset()
    spec_types: tuple[str, ...] = ()
    mtp: MtpSupport = MtpSupport.UNAVAILABLE
    companions: dict[str, Path] = field(default_factory=dict)
    size: int = 0
    mtime_ns: int = 0

    def accepts(self, flag: str) -> bool:
        """True when the probe found ``flag`` accepted by this build."""
        return flag in self.accepted_flags

    @property
    def has_gpu_backend(self) -> bool:
        return any(b not in (Backend.CPU, Backend.RPC) for b in self.backends)
