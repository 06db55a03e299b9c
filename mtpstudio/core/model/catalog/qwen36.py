"""The Qwen3.6 demo cards: 35B-A3B (MoE) and 27B (dense), both hybrid with one MTP layer."""

from __future__ import annotations

from mtpstudio.core.model.catalog.spec import IQ4_XS_RECIPE, ModelCardSpec

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
    recipe=IQ4_XS_RECIPE,
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
    recipe=IQ4_XS_RECIPE,
    # mradermacher's Qwen3.6-27B i1-IQ4_XS "swelled to over 15.1GB" once attn_qkv went to Q5_K
    # (cHunter789/Qwen3.6-27B-i1-IQ4_XS-GGUF model card); made before llama.cpp converted MTP
    # layers, so trunk only.
    published_size_bytes=15_100_000_000,
    published_covers_mtp=False,
    published_source="mradermacher Qwen3.6-27B i1-IQ4_XS, over 15.1 GB (no MTP layer)",
)

QWEN36_CARDS: tuple[ModelCardSpec, ...] = (QWEN36_35B_A3B_IQ4_XS, QWEN36_27B_IQ4_XS)
