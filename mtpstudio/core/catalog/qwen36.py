"""The Qwen3.6 demo cards: 35B-A3B (MoE) and 27B (dense), both hybrid with one MTP layer, at
every standard quant (``spec.QUANT_MIXES``), each typed as the pinned llama-quantize types it."""

from __future__ import annotations

from mtpstudio.core.catalog.spec import (
    IQ4_XS_MIX,
    QUANT_MIXES,
    ModelCardSpec,
    PublishedFile,
)

# Sources for the architecture: the Qwen3.6 model cards ("Hidden Layout: 10 x (3 x (Gated
# DeltaNet -> MoE) -> 1 x (Gated Attention -> MoE))" etc.) as quoted in public write-ups,
# reference/engines.md section 7 for the GGUF keys and shapes, and llama.cpp's converter
# (conversion/qwen.py: partial rotary 0.25 -> rope.dimension_count 64, mrope sections
# [11, 11, 10, 0], MTP appended as block n_layer with nextn.* tensors).

QWEN36_35B_A3B_IQ4_XS = ModelCardSpec(
    card_id="qwen3.6-35b-a3b-iq4_xs",
    title="Qwen3.6-35B-A3B IQ4_XS (demo card)",
    architecture="qwen35moe",
    name="Qwen3.6 35B A3B",
    basename="Qwen3.6",
    size_label="35B-A3B",
    license="apache-2.0",
    n_vocab=248_320,
    context_length=262_144,
    n_embd=2048,
    n_layer=40,
    n_nextn_layer=1,
    n_head=16,
    n_head_kv=2,
    head_dim=256,
    full_attention_interval=4,
    rope_dim=64,
    rope_sections=(11, 11, 10, 0),
    rope_freq_base=10_000_000.0,
    rms_eps=1e-6,
    ssm_conv_kernel=4,
    ssm_state_size=128,
    ssm_group_count=16,
    ssm_time_step_rank=32,
    n_expert=256,
    n_expert_used=8,
    expert_ffn_length=512,
    shared_expert_ffn_length=512,
    recipe=IQ4_XS_MIX,
    # design.md: "the 18.6 GB IQ4_XS quant". The recipe reproduces it (within 1%) only without
    # the MTP block, so the published file is taken to be a trunk-only conversion, as most
    # public GGUFs of this model are; the card adds the MTP layer (about 0.45 GB) on top.
    published_size_bytes=18_600_000_000,
    published_covers_mtp=False,
    published_source="design.md section 1: the 18.6 GB IQ4_XS quant (no MTP layer)",
)

QWEN36_27B_IQ4_XS = ModelCardSpec(
    card_id="qwen3.6-27b-iq4_xs",
    title="Qwen3.6-27B IQ4_XS (demo card)",
    architecture="qwen35",
    name="Qwen3.6 27B",
    basename="Qwen3.6",
    size_label="27B",
    license="apache-2.0",
    n_vocab=248_320,
    context_length=262_144,
    n_embd=5120,
    n_layer=64,
    n_nextn_layer=1,
    n_head=24,
    n_head_kv=4,
    head_dim=256,
    full_attention_interval=4,
    rope_dim=64,
    rope_sections=(11, 11, 10, 0),
    rope_freq_base=10_000_000.0,
    rms_eps=1e-6,
    ssm_conv_kernel=4,
    ssm_state_size=128,
    ssm_group_count=16,
    ssm_time_step_rank=48,
    ffn_length=17_408,
    recipe=IQ4_XS_MIX,
    # mradermacher's Qwen3.6-27B i1-IQ4_XS "swelled to over 15.1GB" once attn_qkv went to Q5_K
    # (cHunter789/Qwen3.6-27B-i1-IQ4_XS-GGUF model card); made before llama.cpp converted MTP
    # layers, so trunk only.
    published_size_bytes=15_100_000_000,
    published_covers_mtp=False,
    published_source="mradermacher Qwen3.6-27B i1-IQ4_XS, over 15.1 GB (no MTP layer)",
)

# Published files of the other quants, where one of a plain llama-quantize recipe (no per-tensor
# overrides) is known with its exact size; the sizes are quoted by third parties from Hugging
# Face's file listings (the note lists each source).
PUBLISHED: dict[str, PublishedFile] = {
    "qwen3.6-35b-a3b-q4_k_m": PublishedFile(
        21_166_757_728,
        covers_mtp=False,
        source="lmstudio-community/Qwen3.6-35B-A3B-GGUF, Qwen3.6-35B-A3B-Q4_K_M.gguf (llama.cpp "
        "b8814, no imatrix, no MTP layer; sha256 4ac6a06b…, size from Hugging Face's paths-info "
        "as quoted in public manifests)",
    ),
    "qwen3.6-35b-a3b-q8_0": PublishedFile(
        36_903_140_320,
        covers_mtp=False,
        source="unsloth/Qwen3.6-35B-A3B-GGUF revision a483e9e6, Qwen3.6-35B-A3B-Q8_0.gguf "
        "(no MTP layer; sha256 d1a39580…)",
    ),
    "qwen3.6-27b-q8_0": PublishedFile(
        29_047_084_160,
        covers_mtp=True,
        source="unsloth/Qwen3.6-27B-MTP-GGUF, Qwen3.6-27B-Q8_0.gguf (866 tensors: 360 F32 and "
        "506 Q8_0, the MTP layer's among them; sha256 9408dcb3…)",
    ),
}

QWEN36_MODELS: tuple[ModelCardSpec, ...] = (QWEN36_35B_A3B_IQ4_XS, QWEN36_27B_IQ4_XS)
"""The models, each at its default quant (IQ4_XS)."""


def _family(base: ModelCardSpec) -> tuple[ModelCardSpec, ...]:
    """``base`` at every quant mix, ``base`` itself first."""
    others = tuple(
        base.with_quant(quant, PUBLISHED.get(f"{base.model_id}-{QUANT_MIXES[quant].slug}"))
        for quant in QUANT_MIXES
        if quant != base.recipe.name
    )
    return (base, *others)


QWEN36_CARDS: tuple[ModelCardSpec, ...] = tuple(
    card for base in QWEN36_MODELS for card in _family(base)
)
