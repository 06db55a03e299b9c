"""Every coefficient the speed estimate uses, in one list, each with what it was measured on.

``coefficient_lines()`` is what ``tests/speed/test_card_coefficients.py`` prints: the card's
three, solved from the GPU kit's H100 decode probes; the CPU kernels' tables of each engine,
measured on generated models on one machine; the RAM's read share and the other stated
assumptions. A value here is either measured (its recording is in ``tests/fixtures``) or says
that it is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.speed.cpu_kernels import CPU_KERNELS, IK_CPU_KERNELS, REFERENCE_GEMV
from mtpstudio.core.speed.estimate import PARAMS
from mtpstudio.core.speed.host_target import KERNEL_VECTOR_BITS, RAM_READ_SHARE
from mtpstudio.core.speed.traffic import ROUTING_REUSE

KIT = "the GPU kit's H100 decode probes (b11434, full-size zero-weight 35B-A3B and 27B IQ4_XS)"


@dataclass(frozen=True)
class Coefficient:
    name: str
    value: str
    basis: str


ATTENTION = "fitted on two generated llamas (bench_speed_cpu.py --calibrate-attention)"
ASSUMED = {
    "card_efficiency": "assumed (mat-vec kernels reach 75-90 % of the bandwidth)",
    "pass_s": "assumed (sampling, copying the logits, synchronising)",
    "hop_s": "assumed (one CPU-GPU synchronisation)",
    "RAM_READ_SHARE": "assumed (another PC's RAM: the share of its peak a read reaches)",
}


def coefficients() -> tuple[Coefficient, ...]:
    p = PARAMS
    up, ik = CPU_KERNELS, IK_CPU_KERNELS
    solved = f"solved from {KIT}"
    return (
        Coefficient("card_node_s", f"{p.card_node_s * 1e6:.3f} µs", solved),
        Coefficient("card_node_eager_s", f"{p.card_node_eager_s * 1e6:.3f} µs", solved),
        Coefficient("card_column_ops", f"{p.card_column_ops:.3f} integer ops", solved),
        Coefficient("card_efficiency", f"{p.card_efficiency:.0%}", ASSUMED["card_efficiency"]),
        Coefficient("pass_s", f"{p.pass_s * 1e3:.2f} ms", ASSUMED["pass_s"]),
        Coefficient("hop_s", f"{p.hop_s * 1e6:.0f} µs", ASSUMED["hop_s"]),
        Coefficient("cpu_attention_share", f"{p.cpu_attention_share:g}", ATTENTION),
        Coefficient("cpu_attention_visit_s", f"{p.cpu_attention_visit_s * 1e9:.1f} ns", ATTENTION),
        Coefficient(
            "CPU_KERNELS", f"{len(up.rates)} types, node {up.node_s * 1e6:.3f} µs", up.source
        ),
        Coefficient(
            "IK_CPU_KERNELS", f"{len(ik.rates)} types, node {ik.node_s * 1e6:.3f} µs", ik.source
        ),
        Coefficient(
            "CPU_KERNELS.column_share",
            f"{up.column_share:g}",
            "solved from upstream's passes of 1-4 tokens through the zero-weight 35B-A3B on "
            "the kernel tables' machine (tests/fixtures/speed/cpu-columns.json)",
        ),
        Coefficient(
            "IK_CPU_KERNELS.column_share",
            f"{ik.column_share:g}",
            "solved from ik's passes of 1-4 tokens the same way (cpu-columns-ik.json)",
        ),
        Coefficient(
            "ROUTING_REUSE",
            f"{ROUTING_REUSE:.3f}",
            "read from a publication: Qwen3-30B-A3B's next token picks this share of the "
            "previous one's experts again (arXiv 2505.16056, LRU hit rate at 8 experts)",
        ),
        Coefficient(
            "REFERENCE_GEMV",
            f"{REFERENCE_GEMV / 1e9:.0f} GFLOP/s",
            "the core the kernel tables are stated for (the kit's host taken as one)",
        ),
        Coefficient("RAM_READ_SHARE", f"{RAM_READ_SHARE:.0%}", ASSUMED["RAM_READ_SHARE"]),
        Coefficient(
            "KERNEL_VECTOR_BITS",
            str(KERNEL_VECTOR_BITS),
            "read from the engines' CPU kernels (AVX2 code)",
        ),
    )


def coefficient_lines() -> list[str]:
    return [f"{c.name:22} {c.value:>28}  {c.basis}" for c in coefficients()]
