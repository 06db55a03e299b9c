"""Tests for the embedded catalogue: GPU cards and the demo GGUF model cards."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mtpstudio.core.catalog.gpus import (
    DEFAULT_GPU_CARD,
    MIB,
    closest_context_figure,
    cuda_context_figures,
    cuda_context_for,
    gpu_card,
    gpu_cards,
)
from mtpstudio.core.catalog.header import synthetic_vocab
from mtpstudio.core.catalog.models import (
    CARD_FORMAT_VERSION,
    DEFAULT_MODEL_CARD,
    model_card,
    model_card_info,
    model_card_path,
    model_cards,
)
from mtpstudio.core.catalog.qwen36 import QWEN36_27B_IQ4_XS, QWEN36_35B_A3B_IQ4_XS
from mtpstudio.core.catalog.spec import card_tensors
from mtpstudio.core.errors import CatalogError
from mtpstudio.core.model.gguf import read_gguf
from mtpstudio.core.model.info import ModelInfo

GIB = 1024 * MIB
REQUIRED_GPUS = {
    "rtx-3060-12gb": 12,
    "rtx-4060-ti-16gb": 16,
    "rtx-4070-super": 12,
    "rtx-4080": 16,
    "rtx-4090": 24,
    "rtx-5090": 32,
    "rx-7800-xt": 16,
}


# --- GPU cards -------------------------------------------------------------------------------


def test_required_gpus_are_in_the_catalogue_with_their_size() -> None:
    for card_id, gb in REQUIRED_GPUS.items():
        assert gpu_card(card_id).nominal_vram_gb == gb


def test_every_gpu_id_resolves_and_ids_are_unique_slugs() -> None:
    cards = gpu_cards()
    ids = [card.id for card in cards]
    assert len(set(ids)) == len(ids)
    for card in cards:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", card.id)
        assert gpu_card(card.id) == card


def test_vram_is_the_reported_total_just_under_the_nominal_size() -> None:
    for card in gpu_cards():
        nominal = card.nominal_vram_gb * GIB
        assert 0.99 * nominal <= card.vram_bytes <= nominal, card.id
        assert card.vram_bytes % MIB == 0
        if m := re.search(r"-(\d+)gb$", card.id):
            assert int(m[1]) == card.nominal_vram_gb, card.id
        assert f"{card.nominal_vram_gb} GB" in card.label


def test_bandwidth_is_bus_width_times_data_rate() -> None:
    for card in gpu_cards():
        expected = card.bus_width_bits / 8 * card.data_rate_gbps
        assert card.bandwidth_gb_s == pytest.approx(expected, rel=0.005), card.id


def test_desktop_and_driver_usage_are_sane() -> None:
    for card in gpu_cards():
        assert 0 < card.llvmpipe_desktop_vram_bytes < card.desktop_vram_bytes, card.id
        assert card.desktop_vram_bytes <= 2 * GIB
        if card.driver_overhead_bytes is not None:
            assert 0 < card.driver_overhead_bytes < GIB
        if card.vendor == "nvidia":
            # design.md: KDE Wayland holds about 1 GB on NVIDIA, llvmpipe about 130 MB
            assert card.desktop_vram_bytes == GIB
            assert card.llvmpipe_desktop_vram_bytes == 130 * MIB
            assert card.compute_capability is not None
            assert re.fullmatch(r"\d+\.\d", card.compute_capability)
            assert card.driver_overhead_bytes is not None, card.id
        elif card.vendor == "amd":
            assert card.gfx_target is not None and card.gfx_target.startswith("gfx")
        else:
            assert card.gfx_target is None and card.compute_capability is None


# The cards people run, by family (issue 45): each must be in the catalogue.
PEOPLES_CARDS = [
    *(f"rtx-{n}" for n in ("2060", "2060-super", "2070", "2070-super", "2080", "2080-super")),
    *("rtx-2080-ti", "rtx-3060-ti", "rtx-3070", "rtx-3070-ti", "rtx-3080-10gb", "rtx-3080-12gb"),
    *("rtx-3080-ti", "rtx-3090-ti", "rtx-4060", "rtx-4070-ti", "rtx-4070-ti-super", "rtx-5070"),
    *(f"rtx-{n}-laptop" for n in ("2060", "2070", "2080", "3060", "3070", "3080-ti", "4050")),
    *(f"rtx-{n}-laptop" for n in ("4060", "4070", "4080", "4090", "5060", "5070", "5080", "5090")),
    *("rtx-a4000", "rtx-a5000", "rtx-a6000", "rtx-4000-ada", "rtx-pro-4000-blackwell"),
    *("rtx-pro-3000-blackwell-laptop", "rtx-pro-4000-blackwell-laptop"),
    *("arc-a770-16gb", "arc-b580", "arc-pro-b70"),
    *("rx-6800-xt", "rx-6900-xt", "rx-7900-xt", "rx-7900-xtx", "rx-7900-gre", "rx-9070"),
    "rx-9070-xt",
]


@pytest.mark.parametrize("card_id", PEOPLES_CARDS)
def test_the_cards_people_run_are_in_the_catalogue_with_their_sources(card_id: str) -> None:
    card = gpu_card(card_id)
    assert "https://" in card.source, card.source
    assert card.vram_source, card.id
    assert card.backends and set(card.backends) <= {"cuda", "vulkan", "rocm", "sycl"}
    assert ("cuda" in card.backends) == (card.vendor == "nvidia")
    assert card.laptop == ("laptop" in card_id)
    if card.laptop:
        assert card.power_w is not None and 0 < card.power_w[0] < card.power_w[1] <= 200
        assert f"{card.power_w[0]}-{card.power_w[1]} W" in card.label
    else:
        assert card.power_w is None


def test_every_card_cites_its_figures() -> None:
    for card in gpu_cards():
        assert "https://" in card.source, card.id
        assert card.vram_source, card.id


def test_the_list_is_grouped_by_vendor_desktop_cards_first() -> None:
    from mtpstudio.core.catalog.gpus import gpu_cards_by_vendor

    groups = gpu_cards_by_vendor()
    assert list(groups) == ["nvidia", "amd", "intel"]
    assert sum(len(g) for g in groups.values()) == len(gpu_cards())
    for vendor, cards in groups.items():
        assert all(c.vendor == vendor for c in cards)
        laptops = [c.laptop for c in cards]
        assert laptops == sorted(laptops)  # no desktop card after a laptop one


def test_a_shared_name_finds_the_card_by_its_memory() -> None:
    from mtpstudio.core.catalog.gpus import gpu_card_named

    eight, twelve = gpu_card("rtx-3060-8gb"), gpu_card("rtx-3060-12gb")
    assert eight.name == twelve.name
    assert gpu_card_named(eight.name, eight.vram_bytes) == eight
    assert gpu_card_named(f"{twelve.name} (catalogue)", twelve.vram_bytes) == twelve
    assert gpu_card_named("NVIDIA GeForce RTX 9999") is None


def test_default_gpu_is_the_12_gb_rtx_4070_super() -> None:
    card = gpu_card(DEFAULT_GPU_CARD)
    assert card.name == "NVIDIA GeForce RTX 4070 SUPER"
    assert card.vram_mib == 12282


def test_an_unknown_gpu_suggests_the_nearest_ids() -> None:
    with pytest.raises(CatalogError) as caught:
        gpu_card("rtx-4070-supr")
    message = str(caught.value)
    assert message.startswith("unknown GPU 'rtx-4070-supr'; did you mean rtx-4070-super"), message
    assert caught.value.hint and "--gpu list" in caught.value.hint
    with pytest.raises(CatalogError) as far:
        gpu_card("quantum-accelerator")
    assert str(far.value) == "unknown GPU 'quantum-accelerator'"


# --- model cards -----------------------------------------------------------------------------


@pytest.fixture
def qwen_info() -> ModelInfo:
    return model_card_info(DEFAULT_MODEL_CARD)


def test_default_model_card_is_qwen36_35b_a3b() -> None:
    assert DEFAULT_MODEL_CARD == "qwen3.6-35b-a3b-iq4_xs"
    assert model_cards()[0].card_id == DEFAULT_MODEL_CARD
    assert model_card(DEFAULT_MODEL_CARD) is QWEN36_35B_A3B_IQ4_XS


def test_unknown_model_card_names_the_models_or_the_nearest_cards() -> None:
    with pytest.raises(CatalogError, match=r"^unknown model card 'nope'; the cards are a model "
                       r"\(qwen3\.6-35b-a3b, qwen3\.6-27b\) at a quant"):  # fmt: skip
        model_card("nope")
    with pytest.raises(CatalogError, match=r"did you mean qwen3\.6-27b-q4_k_m"):
        model_card("qwen3.6-27b-q4km")
    with pytest.raises(CatalogError):
        model_card_path("nope")


def test_qwen36_card_reads_back_with_the_architecture_facts(qwen_info: ModelInfo) -> None:
    info = qwen_info
    assert info.architecture == "qwen35moe"
    assert (info.block_count, info.n_layer, info.n_nextn_layer) == (41, 40, 1)
    assert info.attention_layers == tuple(range(3, 40, 4))
    assert len(info.recurrent_layers) == 30
    assert info.full_attention_interval == 4
    assert info.n_embd == 2048
    assert (info.n_head, info.n_head_kv, info.key_length, info.value_length) == (16, 2, 256, 256)
    assert (
        info.ssm_inner_size,
        info.ssm_state_size,
        info.ssm_group_count,
        info.ssm_time_step_rank,
        info.ssm_conv_kernel,
    ) == (4096, 128, 16, 32, 4)
    assert (info.n_expert, info.n_expert_used) == (256, 8)
    assert (info.expert_ffn_length, info.shared_expert_ffn_length) == (512, 512)
    assert info.vocab_size == 248_320
    assert info.context_length == 262_144
    assert info.file_type == "IQ4_XS"
    assert info.has_mtp and info.is_moe


def test_qwen36_tensor_table_has_the_hybrid_layout(qwen_info: ModelInfo) -> None:
    by_name = {t.name: t for t in qwen_info.tensors}
    assert by_name["token_embd.weight"].shape == (2048, 248_320)  # ggml ne order
    assert by_name["blk.0.attn_qkv.weight"].shape == (2048, 8192)  # q, k (16x128) + v (32x128)
    assert by_name["blk.0.ssm_conv1d.weight"].shape == (4, 8192)
    assert by_name["blk.3.attn_q.weight"].shape == (2048, 16 * 256 * 2)  # query + gate
    assert by_name["blk.3.attn_k.weight"].shape == (2048, 2 * 256)
    assert by_name["blk.39.ffn_down_exps.weight"].shape == (512, 2048, 256)
    assert by_name["blk.40.nextn.eh_proj.weight"].shape == (4096, 2048)
    assert "blk.3.attn_qkv.weight" not in by_name
    assert "blk.40.attn_qkv.weight" not in by_name  # the MTP block is full attention
    assert "blk.40.ffn_gate_exps.weight" in by_name  # ... with the full MoE
    layers = {t.layer for t in qwen_info.tensors if t.layer is not None}
    assert layers == set(range(41))


def test_qwen36_card_matches_its_spec_exactly(qwen_info: ModelInfo) -> None:
    expected = card_tensors(QWEN36_35B_A3B_IQ4_XS)
    got = [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in qwen_info.tensors]
    assert got == [(t.name, t.ne, int(t.ggml_type), t.n_bytes) for t in expected]


def test_qwen36_quant_recipe_is_iq4_xs_as_llama_quantize_assigns_it(qwen_info: ModelInfo) -> None:
    types = {t.name: t.type_name for t in qwen_info.tensors}
    assert types["output.weight"] == "Q6_K"
    assert types["token_embd.weight"] == "IQ4_XS"
    assert types["blk.0.attn_qkv.weight"] == "Q5_K"
    assert types["blk.3.attn_v.weight"] == "Q5_K"
    assert types["blk.3.attn_q.weight"] == "IQ4_XS"
    assert types["blk.0.ssm_out.weight"] == "IQ4_XS"
    assert types["blk.0.ffn_down_exps.weight"] == "IQ4_XS"
    assert types["blk.0.ffn_gate_inp.weight"] == "F32"
    assert types["blk.0.ssm_conv1d.weight"] == "F32"
    assert types["blk.0.ssm_a"] == "F32"
    assert types["blk.40.nextn.enorm.weight"] == "F32"
    assert set(qwen_info.quant_mix) == {"IQ4_XS", "Q5_K", "Q6_K", "F32"}


def test_qwen36_size_matches_the_published_quant(qwen_info: ModelInfo) -> None:
    spec = QWEN36_35B_A3B_IQ4_XS
    trunk = sum(t.n_bytes for t in qwen_info.tensors if t.layer is None or t.layer < spec.n_layer)
    mtp = qwen_info.tensor_bytes - trunk
    # The published 18.6 GB IQ4_XS file (design.md) holds no MTP layer: compare the trunk.
    assert not spec.published_covers_mtp
    assert trunk == pytest.approx(spec.published_size_bytes, rel=0.02)
    assert 0.40e9 < mtp < 0.50e9  # one MoE attention block + eh_proj at IQ4_XS
    # IQ4_XS itself is 4.25 bpw; the Q6_K output and Q5_K attn_v/attn_qkv lift the average.
    assert 4.25 < qwen_info.bits_per_weight < 4.40
    assert qwen_info.n_params == pytest.approx(35.5e9, rel=0.01)


def test_qwen36_27b_card() -> None:
    info = model_card_info(QWEN36_27B_IQ4_XS.card_id)
    assert info.architecture == "qwen35"
    assert (info.block_count, info.n_layer, info.n_nextn_layer) == (65, 64, 1)
    assert info.attention_layers == tuple(range(3, 64, 4))
    assert (info.n_embd, info.ffn_length, info.n_expert) == (5120, 17_408, 0)
    assert (info.n_head, info.n_head_kv, info.key_length) == (24, 4, 256)
    assert (info.ssm_inner_size, info.ssm_time_step_rank, info.ssm_group_count) == (6144, 48, 16)
    trunk = sum(t.n_bytes for t in info.tensors if t.layer is None or t.layer < 64)
    assert trunk == pytest.approx(QWEN36_27B_IQ4_XS.published_size_bytes, rel=0.02)
    assert {"blk.64.nextn.eh_proj.weight", "blk.64.ffn_up.weight"} <= {t.name for t in info.tensors}


def test_card_is_a_header_only_gguf_in_the_user_cache() -> None:
    path = model_card_path(DEFAULT_MODEL_CARD)
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "mtpstudio" / "catalog"
    assert path == cache / f"{DEFAULT_MODEL_CARD}-v{CARD_FORMAT_VERSION}.gguf"
    header = read_gguf(path)
    assert not header.has_tensor_data
    assert header.data_offset == path.stat().st_size  # ends where tensor data would start
    assert path.stat().st_size < 16 * MIB
    assert header.metadata["mtpstudio.demo_card"] == DEFAULT_MODEL_CARD
    assert header.metadata["tokenizer.ggml.model"] == "gpt2"
    assert header.metadata["tokenizer.ggml.pre"] == "qwen35"
    assert header.metadata["tokenizer.ggml.eos_token_id"] == 248_046
    assert header.metadata["qwen35moe.rope.dimension_count"] == 64


def test_card_generation_is_idempotent() -> None:
    first = model_card_path(DEFAULT_MODEL_CARD)
    before = first.stat()
    second = model_card_path(DEFAULT_MODEL_CARD)
    after = second.stat()
    assert second == first
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_size,
    )
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]


def test_unwritable_cache_is_a_catalog_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.raises(CatalogError, match="cannot write the demo card"):
        model_card_path(DEFAULT_MODEL_CARD)


def test_synthetic_vocab_is_a_valid_bpe_vocabulary() -> None:
    tokens, types, merges = synthetic_vocab(248_320)
    assert len(tokens) == len(types) == 248_320
    assert len(set(tokens)) == len(tokens)
    assert tokens[248_044:248_047] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tokens[248_068:248_070] == ["<think>", "</think>"]
    assert tokens[-1] == "[PAD248319]"
    assert len(merges) == 248_044 - 256
    vocab = set(tokens[:248_044])
    for merge in merges[::997]:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab


def test_every_quant_of_both_models_is_a_card_with_its_size() -> None:
    from mtpstudio.core.catalog.models import card_weight_bytes, model_cards_by_model
    from mtpstudio.core.catalog.spec import QUANT_MIXES

    groups = model_cards_by_model()
    assert list(groups) == ["qwen3.6-35b-a3b", "qwen3.6-27b"]
    for model, cards in groups.items():
        assert cards[0].recipe.name == "IQ4_XS"  # the default quant first
        assert {c.recipe.name for c in cards} == set(QUANT_MIXES)
        assert all(c.card_id == f"{model}-{c.recipe.name.lower()}" for c in cards)
    sizes = {q: card_weight_bytes(f"qwen3.6-35b-a3b-{q.lower()}") for q in QUANT_MIXES}
    # more bits, a larger file: the k-quant ladder and the IQ ladder each grow
    ladder = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"]
    assert [sizes[q] for q in ladder] == sorted(sizes[q] for q in ladder)
    iq = ["IQ1_S", "IQ2_XXS", "IQ2_XS", "IQ2_M", "IQ3_XXS", "IQ3_M", "IQ4_XS", "IQ4_NL"]
    assert [sizes[q] for q in iq] == sorted(sizes[q] for q in iq)
    assert 34e9 < sizes["Q8_0"] < 39e9 and 18e9 < sizes["IQ4_XS"] < 20e9


def test_a_card_is_within_half_a_percent_of_its_published_file() -> None:
    from mtpstudio.core.catalog.qwen36 import PUBLISHED

    assert PUBLISHED  # the cards with a published plain-recipe file
    for card_id, published in PUBLISHED.items():
        spec = model_card(card_id)
        tensors = card_tensors(spec)
        counted = [t for t in tensors if published.covers_mtp or (t.layer or 0) < spec.n_layer]
        size = sum(t.n_bytes for t in counted)
        print(f"{card_id}: card {size:,} B, published {published.size_bytes:,} B "
              f"({size / published.size_bytes - 1:+.2%}; {published.source})")  # fmt: skip
        assert size == pytest.approx(published.size_bytes, rel=0.005), card_id


def test_every_nvidia_card_has_a_cuda_context_figure_with_its_source() -> None:
    """A card's own published figure, else that of the published card closest in memory."""
    figures = cuda_context_figures()
    assert {f.name for f in figures} >= {"NVIDIA GeForce RTX 4060 Ti", "NVIDIA GeForce RTX 3090"}
    for figure in figures:  # a published issue, or the GPU kit's own committed measurement
        cited = re.search(r"github\.com/\S+/(issues|pull)/\d+", figure.source)
        kit = re.search(r"GPU kit \(tests/fixtures/cuda_truth/[^)]+\)", figure.source)
        assert cited or kit, figure.name
        if kit:
            assert (Path(__file__).parents[2] / kit[0][9:-1]).is_dir(), figure.name
    for card in gpu_cards():
        if card.vendor != "nvidia":
            continue
        assert card.driver_overhead_bytes is not None and card.driver_overhead_source, card.id
        own = [f for f in figures if f.name == card.name]
        expected = own[0] if own else closest_context_figure(card.vram_bytes)
        assert card.driver_overhead_bytes == expected.context_mib * MIB, card.id
        assert expected.source.split(" (")[0] in card.driver_overhead_source, card.id
    four_sixty = gpu_card("rtx-4060-ti-16gb")
    assert four_sixty.driver_overhead_bytes == 107 * MIB  # llama.cpp #23604
    assert "published for this card" in four_sixty.driver_overhead_source


def test_a_detected_card_takes_its_catalogue_figure_or_the_closest_published_one() -> None:
    assert cuda_context_for("NVIDIA GeForce RTX 4070 SUPER", 12282 * MIB) == (
        gpu_card("rtx-4070-super").driver_overhead_bytes,
        gpu_card("rtx-4070-super").driver_overhead_source,
    )
    h100, source = cuda_context_for("NVIDIA H100 80GB HBM3", 81559 * MIB)
    assert h100 == 527 * MIB and "GPU kit" in source  # measured on the lent H100
    a100, source = cuda_context_for("NVIDIA A100 80GB PCIe", 81920 * MIB)
    assert a100 == 527 * MIB and "closest in memory: NVIDIA H100" in source


def test_a_detected_nvidia_card_counts_its_context_and_the_reserved_memory() -> None:
    """NVML v2 reports memory the driver reserves apart from ``used``; it is in the total and
    never free, so the driver segment holds it beside the CUDA context."""
    from mtpstudio.core.detect.models import GpuInfo, GpuMemory, GpuVendor
    from mtpstudio.core.memory.machine import driver_bytes

    memory = GpuMemory(
        total_bytes=12282 * MIB,
        used_bytes=1400 * MIB,
        free_bytes=10538 * MIB,
        reserved_bytes=344 * MIB,
        source="nvml v2",
    )
    card = GpuInfo(
        id="CUDA0",
        vendor=GpuVendor.NVIDIA,
        name="NVIDIA GeForce RTX 4070 SUPER",
        integrated=False,
        compute_capability="8.9",
        memory=memory,
    )
    context = gpu_card("rtx-4070-super").driver_overhead_bytes or 0
    assert driver_bytes(card) == context + 344 * MIB
    v1 = card.model_copy(update={"memory": memory.model_copy(update={"reserved_bytes": None})})
    assert driver_bytes(v1) == context  # NVML v1 counts it in used, i.e. in other processes


def test_the_kits_cards_are_catalogue_data_with_their_sources() -> None:
    from mtpstudio.core.catalog.gpus import datacenter_card, datacenter_cards
    from mtpstudio.core.memory.devices import TargetDevice
    from mtpstudio.core.speed.cards import card_rates

    assert {c.name for c in datacenter_cards()} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    h100 = datacenter_card("NVIDIA H100 80GB HBM3")
    assert h100 is not None and "datasheet" in h100.source
    assert h100.int32_ops == 16896 * 0.5 * 1980e6  # Hopper: 64 INT32 of 128 cores per SM
    rates = card_rates(TargetDevice("CUDA0", "NVIDIA H100 80GB HBM3", 80 * GIB, vendor="nvidia"))
    assert rates.bandwidth == 3350e9 and rates.int_ops == h100.int32_ops
    assert datacenter_card("NVIDIA GeForce RTX 4070 SUPER") is None  # a planning target
