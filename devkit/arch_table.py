"""The accuracy table over architectures: zero-weight models of realistic sizes, their loads.

Each model keeps the width of a published one (vocabulary, hidden size, heads, FFN, experts,
window) and, where the file would be too large for a shared test machine, fewer layers (the
layer count is in its name): the compute buffer depends on the layer count only through the
allocator's reuse of freed blocks, which the replay follows layer by layer. Every load stays
under about 6 GiB of RAM (the K/V cache is really allocated; flash attention off keeps a
``n_kv x n_tokens x n_head`` score matrix, so those rows stay at 16k and below).
"""

from __future__ import annotations

from pathlib import Path

from devkit.arch_gguf import ArchSpec, hybrid_spec, write_zero_arch
from devkit.budget_check import LoadConfig
from mtpstudio.core.catalog.spec import ModelCardSpec

_NO_WARMUP = ("--no-warmup", "-t", "2")


def _c(name: str, ctx: int, **kw: object) -> LoadConfig:
    return LoadConfig(name, ctx, extra=_NO_WARMUP, **kw)  # type: ignore[arg-type]


def _q(name: str, ctx: int, cache: str, **kw: object) -> LoadConfig:
    return _c(name, ctx, ctk=cache, ctv=cache, **kw)


MODELS: dict[str, ArchSpec | ModelCardSpec] = {
    # the example: a plain llama with a 32k vocabulary
    "llama 1024 v32k 8L": ArchSpec("llama", 32000, 1024, 8, 16, 8, 64, ffn_length=2816),
    # Llama 3.2 1B and Llama 3 8B widths
    "llama 2048 v128k 16L": ArchSpec("llama", 128256, 2048, 16, 32, 8, 64, ffn_length=8192),
    "llama 4096 v128k 8L": ArchSpec("llama", 128256, 4096, 8, 32, 8, 128, ffn_length=14336),
    # Mixtral 8x7B width: 8 experts, 2 used
    "llama-moe 4096 8x2 3L": ArchSpec(
        "llama", 32000, 4096, 3, 32, 8, 128, ffn_length=14336, n_expert=8, n_expert_used=2
    ),
    # Qwen2.5 0.5B (whole) and 7B widths, with Q/K/V biases
    "qwen2 896 v152k 24L": ArchSpec(
        "qwen2", 151936, 896, 24, 14, 2, 64, ffn_length=4864, qkv_bias=True, tied_output=True
    ),
    "qwen2 3584 v152k 6L": ArchSpec(
        "qwen2", 152064, 3584, 6, 28, 4, 128, ffn_length=18944, qkv_bias=True
    ),
    # Qwen3 0.6B (whole) and 8B widths
    "qwen3 1024 v152k 28L": ArchSpec(
        "qwen3", 151936, 1024, 28, 16, 8, 128, ffn_length=3072, qk_norm=True, tied_output=True
    ),
    "qwen3 4096 v152k 8L": ArchSpec(
        "qwen3", 151936, 4096, 8, 32, 8, 128, ffn_length=12288, qk_norm=True
    ),
    # Qwen3 30B-A3B width: 128 experts, 8 used
    "qwen3moe 2048 128x8 6L": ArchSpec(
        "qwen3moe",
        151936,
        2048,
        6,
        32,
        4,
        128,
        n_expert=128,
        n_expert_used=8,
        expert_ffn_length=768,
        qk_norm=True,
    ),
    # Gemma 3 1B (whole) and 4B widths: sliding-window layers on a second cache
    "gemma3 1152 v262k 26L": ArchSpec(
        "gemma3",
        262144,
        1152,
        26,
        4,
        1,
        256,
        ffn_length=6912,
        sliding_window=512,
        tied_output=True,
    ),
    "gemma3 2560 v262k 12L": ArchSpec(
        "gemma3",
        262144,
        2560,
        12,
        8,
        4,
        256,
        ffn_length=10240,
        sliding_window=1024,
        tied_output=True,
    ),
    # GLM-4.5-Air width: a dense first layer, then 128 experts (8 used, sigmoid routing with a
    # selection bias, scaled weights) and one shared expert
    # GLM-4.5-Air width, with its MTP block after the trunk as the converter writes it
    "glm4moe 4096 128x8 2L+MTP": ArchSpec(
        "glm4moe",
        151552,
        4096,
        2,
        96,
        8,
        128,
        ffn_length=10944,
        n_expert=128,
        n_expert_used=8,
        expert_ffn_length=1408,
        dense_lead=1,
        shared_experts=1,
        qkv_bias=True,
        nextn=1,
    ),
    # the Qwen3.6 geometries (three gated delta-net layers, one gated attention layer)
    "qwen35moe 2048 256x8 4L": hybrid_spec("moe", n_layer=4),
    "qwen35 5120 4L": hybrid_spec("dense", n_layer=4),
}

TABLE: dict[str, tuple[LoadConfig, ...]] = {
    "llama 1024 v32k 8L": (
        _c("32k f16", 32768),
        _c("128k f16", 131072),
        _c("16k fa off", 16384, fa="off"),
        _q("64k q8_0 ub2048", 65536, "q8_0", ubatch=2048),
    ),
    "llama 2048 v128k 16L": (
        _c("4k f16", 4096),
        _q("32k q4_0", 32768, "q4_0"),
        _c("8k fa off ub1024", 8192, fa="off", ubatch=1024),
        _c("16k ub128", 16384, ubatch=128),
    ),
    "llama 4096 v128k 8L": (
        _c("16k f16", 16384),
        _q("128k q4_0", 131072, "q4_0"),
        _q("32k q8_0 ub2048", 32768, "q8_0", ubatch=2048),
        _c("8k fa off", 8192, fa="off"),
    ),
    "llama-moe 4096 8x2 3L": (
        _c("32k f16", 32768),
        _q("32k q8_0 ub1024", 32768, "q8_0", ubatch=1024),
        _c("8k fa off ub256", 8192, fa="off", ubatch=256),
    ),
    "qwen2 896 v152k 24L": (
        _c("32k f16", 32768),
        _q("128k q8_0", 131072, "q8_0"),
        _c("4k fa off ub2048", 4096, fa="off", ubatch=2048),
    ),
    "qwen2 3584 v152k 6L": (
        _c("8k f16 ub128", 8192, ubatch=128),
        _q("64k q4_0", 65536, "q4_0"),
        _c("16k fa off", 16384, fa="off"),
    ),
    "qwen3 1024 v152k 28L": (
        _c("16k f16", 16384),
        _q("32k q8_0 ub1024", 32768, "q8_0", ubatch=1024),
        _c("8k fa off", 8192, fa="off"),
        _c("8k np2", 8192, parallel=2),
    ),
    "qwen3 4096 v152k 8L": (
        _c("8k f16", 8192),
        _q("128k q4_0 ub256", 131072, "q4_0", ubatch=256),
        _c("4k fa off ub1024", 4096, fa="off", ubatch=1024),
    ),
    "qwen3moe 2048 128x8 6L": (
        _c("4k f16", 4096),
        _q("32k q8_0 ub2048", 32768, "q8_0", ubatch=2048),
        _c("16k fa off ub128", 16384, fa="off", ubatch=128),
        _q("128k q4_0", 131072, "q4_0"),
    ),
    "gemma3 1152 v262k 26L": (
        _c("32k f16", 32768),
        _q("128k q8_0", 131072, "q8_0"),
        _c("8k fa off", 8192, fa="off"),
        _c("4k ub128", 4096, ubatch=128),
    ),
    "gemma3 2560 v262k 12L": (
        _c("16k f16", 16384),
        _q("128k q4_0 ub1024", 131072, "q4_0", ubatch=1024),
        _c("8k fa off ub256", 8192, fa="off", ubatch=256),
    ),
    "glm4moe 4096 128x8 2L+MTP": (
        _c("16k f16", 16384),
        _q("64k q8_0 ub1024", 65536, "q8_0", ubatch=1024),
        _c("4k fa off ub256", 4096, fa="off", ubatch=256),
        _c("mtp dmax1 8k", 8192, mtp=1),
        _c("mtp dmax3 16k ub1024", 16384, mtp=3, ubatch=1024),
        _q("mtp dmax3 32k q8_0/q8_0", 32768, "q8_0", mtp=3, draft_ctk="q8_0", draft_ctv="q8_0"),
        _c("mtp dmax2 4k fa off ub256", 4096, mtp=2, fa="off", ubatch=256),
        _c("mtp dmax2 8k np2", 8192, mtp=2, parallel=2),
    ),
    "qwen35moe 2048 256x8 4L": (
        _c("32k f16", 32768),
        _q("128k q8_0 ub2048", 131072, "q8_0", ubatch=2048),
        _c("8k fa off", 8192, fa="off"),
        _c("16k ub128", 16384, ubatch=128),
    ),
    "qwen35 5120 4L": (
        _c("16k f16", 16384),
        _q("64k q4_0 ub1024", 65536, "q4_0", ubatch=1024),
        _c("4k fa off ub256", 4096, fa="off", ubatch=256),
    ),
}

# Architectures mtpstudio does not replay: the plan takes the fitted estimate plus its safety
# margin, which must come out at or above the engine's buffer (not within 5 %).
UNMODELLED_MODELS: dict[str, ArchSpec | ModelCardSpec] = {
    # Phi-3 mini width: fused Q/K/V and gate/up projections
    "phi3 3072 v32k 6L": ArchSpec("phi3", 32064, 3072, 6, 32, 32, 96, ffn_length=8192),
    # Qwen1.5-MoE-A2.7B width: 60 experts, 4 used, and a gated shared expert
    "qwen2moe 2048 60x4 4L": ArchSpec(
        "qwen2moe",
        151936,
        2048,
        4,
        16,
        16,
        128,
        n_expert=60,
        n_expert_used=4,
        expert_ffn_length=1408,
        shared_expert_ffn_length=5632,
        qkv_bias=True,
    ),
}
UNMODELLED_TABLE: dict[str, tuple[LoadConfig, ...]] = {
    "phi3 3072 v32k 6L": (
        _c("8k f16", 8192),
        _q("32k q8_0", 32768, "q8_0"),
        _c("4k ub128", 4096, ubatch=128),
        _c("8k fa off", 8192, fa="off"),
        _q("16k q4_0 ub2048", 16384, "q4_0", ubatch=2048),
    ),
    "qwen2moe 2048 60x4 4L": (
        _c("8k f16", 8192),
        _c("4k ub128", 4096, ubatch=128),
        _q("16k q4_0 ub2048", 16384, "q4_0", ubatch=2048),
    ),
}

# CI (2 cores): one small model of each kind of graph, four loads in all.
CI_SUBSET: dict[str, tuple[LoadConfig, ...]] = {
    "llama 1024 v32k 8L": (_c("32k f16", 32768), _c("16k fa off", 16384, fa="off")),
    "qwen3 1024 v152k 28L": (_q("32k q8_0 ub1024", 32768, "q8_0", ubatch=1024),),
    "gemma3 1152 v262k 26L": (_c("4k ub128", 4096, ubatch=128),),
}


def write_model(name: str, out: Path) -> Path:
    """The zero-weight GGUF of table model ``name`` at ``out``."""
    return write_zero_arch({**MODELS, **UNMODELLED_MODELS}[name], out)
