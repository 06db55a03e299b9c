"""Tokens per second before any run: decode and prefill estimated from the bytes each pass reads.

A pass's time on a device is what it reads there over the device's rate, and on the CPU the
operations over its rate when those take longer (a few cores run out of arithmetic before the
RAM runs out of bandwidth), plus the fixed cost of each block run there (kernel launches on a
card, thread barriers on the CPU), of each hop between devices and of the pass itself (sampling,
synchronising). Decoding without MTP is one pass of one token per token; with MTP a step is one
verification pass over the drafts and the draft's own passes, and yields
``Acceptance.tokens_per_step`` tokens. Prompt processing is estimated apart, per ubatch.

Every figure is an estimate until a benchmark of the same plan on this computer measures it
(``SpeedEstimate.measured``); each says what it rests on (``basis``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mtpstudio.core.memory.moe_cache import MoeCache
from mtpstudio.core.memory.placement import Placement
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.speed.acceptance import Acceptance
from mtpstudio.core.speed.cpu_kernels import CPU_KERNELS, REFERENCE_GEMV, CpuKernels
from mtpstudio.core.speed.host_rates import HostRates
from mtpstudio.core.speed.traffic import HOST, Load, ModelCost, PassLoad, Routing, pass_load

GB = 1e9

DEFAULT_DEPTH = 512
"""The filled context an estimate is for: a short chat (the benchmark's prompts and answers)."""


@dataclass(frozen=True)
class CardRates:
    """A GPU's rates: memory bandwidth and its PCIe link (bytes per second)."""

    device: str
    name: str
    bandwidth: float
    pcie: float
    source: str
    known: bool = True


@dataclass(frozen=True)
class SpeedParams:
    """The fixed costs and efficiencies the estimate assumes (seconds, fractions).

    Where each comes from (``benchmarks/bench_speed_kit.py`` and ``bench_speed_cpu.py`` print
    the checks):

    Attributes:
        card_efficiency: the share of a card's published bandwidth decoding reaches; assumed
            (matrix-vector kernels reach 75-90 % of it).
        card_block_s: a card's fixed time per block and pass with CUDA graphs (the kernels'
            launch and latency floors): fitted to the GPU kit's 35B-A3B decode probe on an H100
            (b11434, 103.8 tok/s); the kit's 27B probe checks it.
        card_block_nographs_s: the same with graphs off (every kernel launched by the CPU):
            fitted to the kit's 35B-A3B probe with ``GGML_CUDA_DISABLE_GRAPHS=1`` (65.9 tok/s).
        pass_s: the fixed time of one pass on a card (synchronising, copying the logits,
            sampling): assumed.
        hop_s: moving the activations between two devices once (a synchronisation): assumed.
        cpu_attention_share: the CPU flash-attention kernel's rate per operation as a share of
            the probed matrix-vector rate, and
        cpu_attention_visit_s: its fixed time per cached cell and query head, on a core of
            ``REFERENCE_GEMV`` (scaled by the probed core's rate): both fitted on two generated
            llamas (heads of 64 and of 256) with the upstream CPU build
            (``bench_speed_cpu.py --calibrate-attention``); the per-visit cost dominates.
    """

    card_efficiency: float = 0.8
    card_block_s: float = 167e-6
    card_block_nographs_s: float = 296e-6
    pass_s: float = 0.3e-3
    hop_s: float = 30e-6
    cpu_attention_share: float = 7.3
    cpu_attention_visit_s: float = 38.7e-9


PARAMS = SpeedParams()


@dataclass(frozen=True)
class SpeedRates:
    """The devices' rates an estimate uses: the host's and each card's, by device id."""

    host: HostRates
    cards: dict[str, CardRates] = field(default_factory=dict)


@dataclass(frozen=True)
class PassTime:
    """One pass's seconds, split by where they go."""

    seconds: float
    parts: dict[str, float]


@dataclass(frozen=True)
class SpeedEstimate:
    """Decode and prefill tokens per second of one plan, with the basis of the figures.

    Attributes:
        decode_tok_s: decoding as planned (with MTP when it drafts).
        plain_tok_s: decoding one token per pass (MTP off).
        prefill_tok_s: prompt processing, per ubatch.
        prefill_ceiling: the prefill figure leaves a card's arithmetic out (its memory, PCIe
            copies and fixed costs only): an upper bound. On the CPU its arithmetic counts.
        mtp: the plan drafts; ``depth`` its draft depth; ``acceptance`` the figure used.
        step_s: the seconds of one decoding step, split by where they go.
        depth_tokens: the filled context the figures are for.
        basis: one line per assumption or measured rate the figures rest on.
        trust: ``estimate``, or ``measured`` once a benchmark of this plan measured it.
        measured_tok_s: that benchmark's tok/s (the estimate stays beside it).
    """

    decode_tok_s: float
    plain_tok_s: float
    prefill_tok_s: float | None
    mtp: bool
    depth: int
    acceptance: Acceptance | None
    step_s: dict[str, float]
    depth_tokens: int
    basis: tuple[str, ...]
    trust: str = "estimate"
    measured_tok_s: float | None = None
    measured_source: str = ""
    prefill_ceiling: bool = False

    @property
    def error(self) -> float | None:
        """(estimate − measured) / measured, once measured."""
        if self.measured_tok_s is None or self.measured_tok_s <= 0:
            return None
        return self.decode_tok_s / self.measured_tok_s - 1.0

    def with_measurement(self, tok_s: float, source: str) -> SpeedEstimate:
        return replace(self, trust="measured", measured_tok_s=tok_s, measured_source=source)

    def to_json(self) -> dict[str, Any]:
        return {
            "decode_tok_s": round(self.decode_tok_s, 2),
            "decode_tok_s_without_mtp": round(self.plain_tok_s, 2),
            "prefill_tok_s": None if self.prefill_tok_s is None else round(self.prefill_tok_s, 1),
            "prefill_is_ceiling": self.prefill_ceiling,
            "mtp": self.mtp,
            "draft_depth": self.depth if self.mtp else None,
            "acceptance": None if self.acceptance is None else self.acceptance.to_json(),
            "context_filled": self.depth_tokens,
            "step_ms": {k: round(v * 1000, 3) for k, v in self.step_s.items()},
            "trust": self.trust,
            "measured_tok_s": self.measured_tok_s,  # as measured (the stored run's own rate)
            "measured_source": self.measured_source or None,
            "error": None if self.error is None else round(self.error, 4),
            "basis": list(self.basis),
        }


def host_time(
    load: Load,
    host: HostRates,
    kernels: CpuKernels,
    threads: int,
    params: SpeedParams,
    prefill: bool,
    flash_attn: bool,
    n_head: int,
) -> dict[str, float]:
    """The CPU's share of a pass: its products, the attention over its cache, its graph's fixed
    costs (``cpu_kernels``).

    Decoding, the products take what the engine's kernels take per weight type (one thread, or
    several sharing each product and claiming its rows), or what reading their bytes from RAM
    takes when that is longer; a prompt's batch takes its operations at the probed matrix-matrix
    rate instead. The attention over the cache follows, then the graph's nodes (one thread) or
    its synchronisations (several).
    """
    workers = max(1, min(threads, host.cores))
    core_scale = REFERENCE_GEMV / host.gemv_flop_per_s
    costs = kernels.thread_costs(host.machine)
    bandwidth = host.read_bandwidth(threads)
    flops = host.prefill_flops(threads) if prefill else host.decode_flops(threads)
    reads = (load.bytes - load.kv_bytes) / bandwidth
    if prefill:
        products = (load.flops - load.attention_flops) / flops
    else:
        products = load.cpu.seconds(workers, core_scale, costs.row_s) + load.state_flops / flops
    weights = max(reads, products)
    attention = 0.0
    if load.attention_flops:
        rate = flops
        visits = 0.0
        if flash_attn:  # one cell at a time, per head: a fixed cost and the products
            heads = max(1, min(workers, n_head))
            rate = params.cpu_attention_share * host.gemv_flop_per_s * heads
            visits = load.attention_visits * params.cpu_attention_visit_s * core_scale / heads
        attention = max(load.kv_bytes / bandwidth, load.attention_flops / rate + visits)
    return {
        "cpu": weights + attention,
        "cpu fixed": kernels.fixed_seconds(load.nodes, load.syncs, workers, core_scale, costs),
    }


def pass_time(
    load: PassLoad,
    rates: SpeedRates,
    threads: int,
    *,
    graphs: bool = True,
    params: SpeedParams = PARAMS,
    prefill: bool = False,
    flash_attn: bool = True,
    n_head: int = 1,
    kernels: CpuKernels = CPU_KERNELS,
) -> PassTime:
    """The seconds of one pass: each device's share, the hops, the PCIe copies."""
    parts: dict[str, float] = {}
    cards = False
    for device, load_here in load.loads.items():
        if device == HOST:
            parts.update(
                host_time(
                    load_here, rates.host, kernels, threads, params, prefill, flash_attn, n_head
                )
            )
            continue
        card = rates.cards.get(device)
        if card is None:
            continue
        cards = True
        block = params.card_block_s if graphs else params.card_block_nographs_s
        parts["card"] = parts.get("card", 0.0) + load_here.bytes / (
            card.bandwidth * params.card_efficiency
        )
        parts["card fixed"] = parts.get("card fixed", 0.0) + load_here.blocks * block
        if load.pcie_bytes:
            parts["pcie"] = parts.get("pcie", 0.0) + load.pcie_bytes / card.pcie
    if load.hops:
        parts["hops"] = load.hops * params.hop_s
    if cards:
        parts["pass fixed"] = params.pass_s
    return PassTime(sum(parts.values()), parts)


@dataclass(frozen=True)
class DecodeShape:
    """What the estimate needs of a resolved plan (the effective settings)."""

    gpu: str | None
    threads: int
    cache_types: tuple[str, str]
    mtp: bool
    depth: int
    ubatch: int
    op_offload: bool = True
    flash_attn: bool = True


def estimate(
    model: ModelInfo,
    cost: ModelCost,
    placement: Placement,
    shape: DecodeShape,
    rates: SpeedRates,
    acceptance: Acceptance | None,
    *,
    context: int = DEFAULT_DEPTH,
    routing: Routing = Routing.INDEPENDENT,
    graphs: bool = True,
    params: SpeedParams = PARAMS,
    moe_cache: MoeCache | None = None,
) -> SpeedEstimate:
    """Decode (as planned and without MTP) and prefill tokens per second of a placement
    (``moe_cache``: the GPU cache of RAM experts the budget planned)."""
    trunk = range(model.n_layer)
    nextn = range(model.n_layer, model.block_count)

    def run(blocks: range, tokens: int, outputs: int, prefill: bool = False) -> PassTime:
        load = pass_load(
            model,
            cost,
            placement,
            shape.gpu,
            blocks=blocks,
            tokens=tokens,
            outputs=outputs,
            depth=context,
            cache_types=shape.cache_types,
            routing=routing,
            op_offload=shape.op_offload,
            moe_cache=moe_cache,
        )
        return pass_time(
            load,
            rates,
            shape.threads,
            graphs=graphs,
            params=params,
            prefill=prefill,
            flash_attn=shape.flash_attn,
            n_head=model.n_head,
            kernels=cost.kernels,
        )

    plain = run(trunk, 1, 1)
    plain_tok_s = 1.0 / plain.seconds if plain.seconds > 0 else 0.0
    mtp = shape.mtp and shape.depth > 0 and len(nextn) > 0 and acceptance is not None
    step = plain
    decode_tok_s = plain_tok_s
    if mtp:
        assert acceptance is not None
        verify = run(trunk, shape.depth + 1, shape.depth + 1)
        draft = run(nextn, 1, 1)
        seconds = verify.seconds + shape.depth * draft.seconds
        decode_tok_s = acceptance.tokens_per_step(shape.depth) / seconds
        parts = dict(verify.parts)
        for k, v in draft.parts.items():
            parts[f"draft {k}"] = parts.get(f"draft {k}", 0.0) + shape.depth * v
        step = PassTime(seconds, parts)
    ubatch = max(1, shape.ubatch)
    pre = run(trunk, ubatch, 1, prefill=True)
    prefill_tok_s = ubatch / pre.seconds if pre.seconds > 0 else None
    return SpeedEstimate(
        decode_tok_s=decode_tok_s,
        plain_tok_s=plain_tok_s,
        prefill_tok_s=prefill_tok_s,
        mtp=mtp,
        depth=shape.depth,
        acceptance=acceptance if mtp else None,
        step_s=step.parts,
        depth_tokens=context,
        basis=basis_lines(
            rates,
            shape,
            acceptance if mtp else None,
            routing,
            context,
            params,
            cost.kernels,
            cpu_products=plain.parts.get("cpu", 0.0) > 0,
            moe_cache=moe_cache,
        ),
        prefill_ceiling=shape.gpu is not None,
    )


def basis_lines(
    rates: SpeedRates,
    shape: DecodeShape,
    acceptance: Acceptance | None,
    routing: Routing,
    context: int,
    params: SpeedParams,
    kernels: CpuKernels = CPU_KERNELS,
    *,
    cpu_products: bool = False,
    moe_cache: MoeCache | None = None,
) -> tuple[str, ...]:
    """What an estimate rests on, one line each."""
    host = rates.host
    lines = [
        f"system RAM: {host.read_bandwidth(shape.threads) / GB:.1f} GB/s read by "
        f"{shape.threads} thread{'s' if shape.threads != 1 else ''}, "
        f"{host.decode_flops(shape.threads) / GB:.0f} GFLOP/s ({host.source})",
    ]
    if cpu_products:
        threads = kernels.thread_costs(host.machine)
        lines.append(
            f"products on the CPU at the engine's rate per weight type ({kernels.source}), "
            f"scaled to this core; what its threads cost to share the work "
            + ("measured on this machine" if threads.measured else "assumed (not this machine)")
        )
    for card in rates.cards.values():
        if card.device == shape.gpu:
            lines.append(
                f"{card.device}: {card.bandwidth / GB:.0f} GB/s ({card.source}), "
                f"{params.card_efficiency:.0%} of it reached; PCIe {card.pcie / GB:.0f} GB/s"
            )
    if acceptance is not None:
        lines.append(
            f"MTP draft depth {shape.depth}: {acceptance.tokens_per_step(shape.depth):.2f} "
            f"tokens per step from acceptance {acceptance.rate:.2f} at depth "
            f"{acceptance.depth} ({acceptance.source})"
        )
    if moe_cache is not None and moe_cache.cached_layers:
        lines.append(
            f"{moe_cache.words()}: the hit rate taken as that share, as if every expert were "
            "equally likely and each token picked its own (routing is skewed, so the engine's "
            "own hit rate after a benchmark is usually higher); misses copied over PCIe"
        )
    lines.append(
        f"{context:,} tokens of context filled; experts picked "
        + (
            "independently by each token"
            if routing is Routing.INDEPENDENT
            else "alike by every token"
        )
    )
    return tuple(lines)
