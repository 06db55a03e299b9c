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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mtpstudio.core.memory.moe_cache import MoeCache
from mtpstudio.core.memory.placement import Placement
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.speed.acceptance import Acceptance, draft_attempts
from mtpstudio.core.speed.cpu_kernels import CPU_KERNELS, REFERENCE_GEMV, CpuKernels
from mtpstudio.core.speed.decode_rules import MMVQ_MAX_BATCH, UPSTREAM_RULES, DecodeRules
from mtpstudio.core.speed.host_rates import HostRates
from mtpstudio.core.speed.traffic import (
    HOST,
    ROUTING_REUSE,
    Load,
    ModelCost,
    PassLoad,
    Routing,
    pass_load,
)

GB = 1e9

CARD_NODE_S = 2.218e-6
CARD_NODE_EAGER_S = 4.776e-6
CARD_COLUMN_OPS = 1.459
"""The card coefficients as ``devkit/speed_check.solve_card_coefficients`` solved them from the
H100 kit recording (``tests/fixtures/cuda_truth/upstream-11434-cuda-nvidia-h100-80gb-hbm3-*``);
``tests/speed/test_card_coefficients.py`` solves them again and compares."""

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
    int_ops: float | None = None
    """32-bit integer operations per second, the lanes the quantized mat-vec kernel
    dequantises and multiplies on (None: not stated; its arithmetic is then left out)."""


@dataclass(frozen=True)
class SpeedParams:
    """The fixed costs and efficiencies the estimate assumes (seconds, fractions), each with
    what it was measured on (``benchmarks/bench_speed_cpu.py`` and ``devkit/speed_check.py``
    print the checks; ``coefficients()`` lists them all).

    Attributes:
        card_efficiency: the share of a card's published bandwidth decoding reaches; assumed
            (matrix-vector kernels reach 75-90 % of it).
        card_node_s: a card's time per graph node of a pass that replays a CUDA graph (each
            kernel's launch and latency floor on the card), and
        card_node_eager_s: the same where the CPU launches every kernel (graphs off, or a
            shape the graph has not warmed up to), and
        card_column_ops: the 32-bit integer operations per weight and per column the quantized
            mat-vec kernel spends on a card (it dequantises every weight again for each column
            and multiplies on the integer lanes: the first column hides under the reading of
            the weights, each further one adds its own): all three solved from the GPU kit's three
            decode probes on an H100 (b11434, full-size zero-weight Qwen3.6-35B-A3B and 27B
            IQ4_XS, MTP depth 3, acceptance 0: 103.8 tok/s, 65.9 without graphs, 48.7 for the
            27B; ``devkit/speed_check.solve_card_coefficients``), the kit's host CPU taken as
            the assumed desktop's.
        pass_s: the fixed time of one pass on a card (synchronising, copying the logits,
            sampling): assumed.
        hop_s: moving the activations between two devices once (a synchronisation): assumed.
        cpu_attention_share: the CPU flash-attention kernel's rate per operation as a share of
            the probed matrix-vector rate, and
        cpu_attention_visit_s: its fixed time per cached cell and query head, on a core of
            ``REFERENCE_GEMV`` (scaled by the probed core's rate): both fitted on two generated
            llamas (heads of 64 and of 256) with the upstream CPU build
            (``bench_speed_cpu.py --calibrate-attention``); the per-visit cost dominates.

    The CPU's own share of a card's pass (building and scheduling its graph, node by node) is
    the CPU kernels' ``node_s`` (``cpu_kernels``, measured on generated models on this CPU),
    scaled to the host's core.
    """

    card_efficiency: float = 0.8
    card_node_s: float = CARD_NODE_S
    card_node_eager_s: float = CARD_NODE_EAGER_S
    card_column_ops: float = CARD_COLUMN_OPS
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
    graphs: float = 1.0,
    params: SpeedParams = PARAMS,
    prefill: bool = False,
    flash_attn: bool = True,
    n_head: int = 1,
    kernels: CpuKernels = CPU_KERNELS,
    tiled_experts: bool = False,
) -> PassTime:
    """The seconds of one pass: each device's share, the hops, the PCIe copies.

    On a card a pass reads its bytes; a batch of up to ``MMVQ_MAX_BATCH`` tokens runs the
    quantized mat-vec kernel, which spends ``card_column_ops`` integer operations per weight and
    token on the card's integer lanes: the first token's work overlaps the reading (it counts
    only where it takes longer), each further token's adds to it (``tiled_experts``: the routed
    experts of a batch run the tiled kernel instead, bound by their bytes); each of its nodes
    costs ``card_node_s`` where it replays a CUDA graph (``graphs``: the share of such passes)
    and ``card_node_eager_s`` where the CPU launches it, both scaled
    to the host's core (the kit's host counted as a reference core): per token the CPU builds
    and schedules the graph, and updates the captured one (the cache's views move every token)
    or launches every kernel, node by node; it also schedules each node at the CPU kernels'
    ``node_s``."""
    parts: dict[str, float] = {}
    cards = False
    core_scale = REFERENCE_GEMV / rates.host.gemv_flop_per_s
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
        reads = load_here.bytes / (card.bandwidth * params.card_efficiency)
        first = further = 0.0
        if not prefill and load.tokens <= MMVQ_MAX_BATCH and card.int_ops:
            columns = load_here.flops - load_here.attention_flops - load_here.state_flops
            if tiled_experts and load.tokens > 1:
                columns -= load_here.expert_flops
            arithmetic = columns / 2.0 * params.card_column_ops / card.int_ops
            first = arithmetic / load.tokens
            further = arithmetic - first
        parts["card"] = parts.get("card", 0.0) + max(reads, first) + further
        share = min(1.0, max(0.0, graphs))
        node = params.card_node_s + (1.0 - share) * (params.card_node_eager_s - params.card_node_s)
        node *= core_scale  # the host's work per node, on its core
        parts["card fixed"] = parts.get("card fixed", 0.0) + load_here.nodes * (
            node + kernels.node_s * core_scale
        )
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
    p_min: float = 0.75


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
    rules: DecodeRules = UPSTREAM_RULES,
) -> SpeedEstimate:
    """Decode (as planned and without MTP) and prefill tokens per second of a placement
    (``moe_cache``: the GPU cache of RAM experts the budget planned; ``graphs``: CUDA graphs
    on; ``rules``: how the engine runs an MTP step)."""
    trunk = range(model.n_layer)
    nextn = range(model.n_layer, model.block_count)

    def run(
        blocks: range, tokens: int, outputs: int, prefill: bool = False, replay: float = 1.0
    ) -> PassTime:
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
            graphs=replay if graphs else 0.0,
            params=params,
            prefill=prefill,
            flash_attn=shape.flash_attn,
            n_head=model.n_head,
            kernels=cost.kernels,
            tiled_experts=rules.tiled_moe_verify,
        )

    plain = run(trunk, 1, 1)
    plain_tok_s = 1.0 / plain.seconds if plain.seconds > 0 else 0.0
    mtp = shape.mtp and shape.depth > 0 and len(nextn) > 0 and acceptance is not None
    step = plain
    decode_tok_s = plain_tok_s
    if mtp:
        assert acceptance is not None
        step = mtp_step(
            acceptance,
            shape,
            rules,
            model.is_moe,
            lambda n, replay: run(trunk, n, n, replay=replay),
            lambda n, outputs: run(nextn, n, outputs, replay=0.0),
        )
        tokens = acceptance.tokens_per_step(shape.depth, shape.p_min, rules.first_draft_kept)
        decode_tok_s = tokens / step.seconds
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
            rules=rules,
        ),
        prefill_ceiling=shape.gpu is not None,
    )


def mtp_step(
    acceptance: Acceptance,
    shape: DecodeShape,
    rules: DecodeRules,
    moe: bool,
    verify: Callable[[int, float], PassTime],
    draft: Callable[[int, int], PassTime],
) -> PassTime:
    """One MTP step's seconds, as the engine runs it (``decode_rules``).

    A step that drafted ``k`` tokens verifies ``k + 1`` in one pass of the target; ``k``
    follows p-min's continuation (``acceptance``). The MTP context's passes: upstream's one
    single-token pass per draft position tried (the one whose token fell below p-min ran too)
    and its catch-up over the verified batch; ik's pass over the accepted tokens, which yields
    the first draft, and one single-token pass per further position tried. The MTP context's
    passes replay no CUDA graph (their shapes alternate); a verification replays one as the
    engine's rules say.
    """
    depth = shape.depth
    chances = acceptance.chances(depth, shape.p_min, rules.first_draft_kept)
    reach = [1.0, *chances]  # the chance of at least k drafts, k = 0..depth
    lengths = [reach[k] - (reach[k + 1] if k < depth else 0.0) for k in range(depth + 1)]
    replay = rules.verify_graph_share(moe, shape.p_min, lengths)
    parts: dict[str, float] = {}

    def add(prefix: str, passed: PassTime, times: float) -> None:
        for name, v in passed.parts.items():
            key = f"{prefix}{name}"
            parts[key] = parts.get(key, 0.0) + times * v

    for k, chance in enumerate(lengths):
        if chance > 0:
            add("", verify(k + 1, replay), chance)
    single = draft(1, 1)
    q = acceptance.continuation(shape.p_min)
    add("draft ", single, draft_attempts(depth, q, rules.first_draft_kept))
    if rules.accept_pass:  # ik: the accepted tokens through the MTP block give the first draft
        accepted = acceptance.accepted_per_step(depth, shape.p_min, rules.first_draft_kept)
        add("draft ", _between(lambda n: draft(n, 1), 1.0 + accepted), 1.0)
    else:  # upstream: the catch-up (no logits) over the verified batch
        for k, chance in enumerate(lengths):
            if chance > 0 and rules.catch_up:
                add("draft ", draft(k + 1, 0), chance)
    return PassTime(sum(parts.values()), parts)


def _between(run: Callable[[int], PassTime], tokens: float) -> PassTime:
    """A pass of a fractional token count: the two whole ones around it, weighted."""
    low = max(1, int(tokens))
    share = tokens - low
    below = run(low)
    if share <= 1e-9:
        return below
    above = run(low + 1)
    names = set(below.parts) | set(above.parts)
    parts = {
        n: (1 - share) * below.parts.get(n, 0.0) + share * above.parts.get(n, 0.0) for n in names
    }
    return PassTime(sum(parts.values()), parts)


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
    rules: DecodeRules = UPSTREAM_RULES,
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
            f"MTP draft depth {shape.depth}, p-min {shape.p_min:g}: "
            f"{acceptance.drafts_at(shape.depth, shape.p_min, rules.first_draft_kept):.2f} "
            "drafts and "
            f"{acceptance.tokens_per_step(shape.depth, shape.p_min, rules.first_draft_kept):.2f}"
            f" tokens per step ({rules.name}'s drafting) from acceptance "
            f"{acceptance.rate:.2f} at depth {acceptance.depth} ({acceptance.source})"
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
            f"by each token, {ROUTING_REUSE:.0%} of them again by the next (measured on "
            "Qwen3-30B-A3B, arXiv 2505.16056)"
            if routing is Routing.INDEPENDENT
            else "alike by every token"
        )
    )
    return tuple(lines)
