"""The device types the memory model plans for: the target device and the host's memory."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetDevice:
    """The device the plan is for: a GPU (detected or from the catalogue) or the CPU.

    Attributes:
        id: ``CUDA0``-style id, or ``CPU`` for a CPU-only plan.
        name: what to call it.
        total_bytes: memory size; ``None`` when unknown (CPU without host facts).
        desktop_bytes: VRAM the desktop (compositor, shell) holds.
        other_bytes: VRAM other processes hold.
        driver_overhead_bytes: the engine's own driver/CUDA context, outside its buffers.
        vendor: ``nvidia``, ``amd``, ``intel`` … (None: the CPU, or not known); decides which
            desktop reclamations apply.
        compute_capability: ``8.9``-style, for NVIDIA cards (CUDA's rules depend on it).
        rpc_endpoint: ``host:port`` of a remote rpc-server this device is reached through
            (its id is ``RPC<n>``); None for a local device.
    """

    id: str
    name: str
    total_bytes: int | None
    desktop_bytes: int = 0
    other_bytes: int = 0
    driver_overhead_bytes: int = 0
    vendor: str | None = None
    compute_capability: str | None = None
    rpc_endpoint: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.id != "CPU"

    @property
    def is_cuda(self) -> bool:
        """An NVIDIA card the engine drives through its own CUDA backend (not through RPC)."""
        return (
            self.is_gpu
            and self.rpc_endpoint is None
            and (self.vendor == "nvidia" or self.id.startswith("CUDA"))
        )


@dataclass(frozen=True)
class HostSpec:
    """System memory facts (from detection); unknown values are ``None``."""

    total_bytes: int | None = None
    available_bytes: int | None = None
