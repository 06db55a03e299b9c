"""A GPU's rates for the speed model: its published memory bandwidth and its PCIe link.

The catalogue (``resources/catalog/gpus.json``) gives each card's bandwidth (bus width times data
rate, the vendor's figure) and its PCIe generation and lanes; a detected card is found there by
its name. A card the catalogue lacks is planned with a stated typical figure.
"""

from __future__ import annotations

from mtpstudio.core.catalog.gpus import INT32_SHARE, GpuCard, gpu_card_named
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.speed.estimate import CardRates

GB = 1e9
PCIE_LANE_BYTES = {3: 0.985 * GB, 4: 1.969 * GB, 5: 3.938 * GB, 6: 7.563 * GB}
"""Bytes per second per lane and direction after line coding (PCIe 3.0 to 6.0)."""
PCIE_REACHED = 0.8
"""The share of the link a host-to-card copy of pinned memory reaches."""
UNKNOWN_BANDWIDTH = 500 * GB
"""A typical 12-16 GB card (the catalogue's RTX 4070 SUPER: 504 GB/s)."""

DATACENTER = {
    "NVIDIA H100 80GB HBM3": (
        3350 * GB,
        5,
        16,
        16896 * INT32_SHARE["Hopper"] * 1980e6,
        "NVIDIA's H100 SXM5 datasheet: 3.35 TB/s HBM3, 16,896 CUDA cores at 1,980 MHz",
    ),
    "NVIDIA H200": (
        4800 * GB,
        5,
        16,
        16896 * INT32_SHARE["Hopper"] * 1980e6,
        "NVIDIA's H200 SXM datasheet: 4.8 TB/s HBM3e, 16,896 CUDA cores at 1,980 MHz",
    ),
}
"""The cards the GPU kit ran on (not planning targets, so not in the catalogue): bandwidth,
PCIe generation and lanes, 32-bit integer operations per second, source."""


def catalogue_card(device: TargetDevice) -> GpuCard | None:
    """The catalogue card ``device`` is (by name; a catalogue target's name ends in
    ``(catalogue)``)."""
    return gpu_card_named(device.name, device.total_bytes)


def pcie_bytes(gen: int, lanes: int) -> float:
    return PCIE_LANE_BYTES.get(gen, PCIE_LANE_BYTES[4]) * lanes * PCIE_REACHED


def card_rates(device: TargetDevice) -> CardRates:
    """The rates of a GPU target: the catalogue's, or a stated typical card's."""
    card = catalogue_card(device)
    name = device.name.removesuffix(" (catalogue)").strip()
    if card is None and name in DATACENTER:
        bandwidth, gen, lanes, int_ops, source = DATACENTER[name]
        return CardRates(
            device.id, name, bandwidth, pcie_bytes(gen, lanes), source, int_ops=int_ops
        )
    if card is None:
        return CardRates(
            device.id,
            device.name,
            UNKNOWN_BANDWIDTH,
            pcie_bytes(4, 16),
            f"no published bandwidth for {device.name}: a typical 12-16 GB card's assumed",
            known=False,
        )
    return CardRates(
        device.id,
        card.name,
        card.bandwidth_gb_s * GB,
        pcie_bytes(card.pcie_gen, card.pcie_lanes),
        f"published for the {card.name}: {card.bus_width_bits}-bit {card.memory_type} at "
        f"{card.data_rate_gbps:g} Gbps; PCIe {card.pcie_gen}.0 x{card.pcie_lanes}",
        int_ops=card.int32_ops,
    )
