"""A GPU's rates for the speed model: its published memory bandwidth and its PCIe link.

The catalogue (``resources/catalog/gpus.json``) gives each card's bandwidth (bus width times data
rate, the vendor's figure) and its PCIe generation and lanes; a detected card is found there by
its name; the cards the GPU kit ran on are in its ``datacenter`` section. A card the catalogue
lacks is planned with a stated typical figure.
"""

from __future__ import annotations

from mtpstudio.core.catalog.gpus import GpuCard, datacenter_card, gpu_card_named
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.speed.estimate import CardRates

GB = 1e9
PCIE_LANE_BYTES = {3: 0.985 * GB, 4: 1.969 * GB, 5: 3.938 * GB, 6: 7.563 * GB}
"""Bytes per second per lane and direction after line coding (PCIe 3.0 to 6.0)."""
PCIE_REACHED = 0.8
"""The share of the link a host-to-card copy of pinned memory reaches."""
UNKNOWN_BANDWIDTH = 500 * GB
"""A typical 12-16 GB card (the catalogue's RTX 4070 SUPER: 504 GB/s)."""


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
    kit = datacenter_card(name) if card is None else None
    if kit is not None:
        return CardRates(
            device.id,
            name,
            kit.bandwidth_gb_s * GB,
            pcie_bytes(kit.pcie_gen, kit.pcie_lanes),
            kit.source,
            int_ops=kit.int32_ops,
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
