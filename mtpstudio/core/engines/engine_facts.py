"""How an engine lays out memory: the facts the budget needs (engines.md §5-§6), one per profile."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.plan.choices import EngineFlavour


@dataclass(frozen=True)
class EngineMemoryFacts:
    """Engine-specific memory rules.

    Attributes:
        flavour: the engine.
        kv_pad_flash: context padding with flash attention on.
        kv_pad_plain: context padding with flash attention off.
        per_slot_streams: a non-unified KV cache keeps one stream per slot (upstream); ik keeps
            one KV shared by all slots.
        recurrent_in_kv_buffer: the recurrent state is allocated inside the KV buffer (ik).
        recurrent_rollback_copies: MTP keeps ``draft max`` extra state rows per slot (upstream).
        mtp_architectures: architectures whose MTP layers this engine can run.
        mtp_uses_draft_cache_types: the MTP context has its own K/V types (upstream) instead of
            the main ones (ik).
        fit_changes_ctx: the engine's fit may lower an automatic context (upstream).
        fit_ctx_floor: the smallest context upstream's fit goes down to (``--fit-ctx``).
        rollback_architectures: architectures whose recurrent state gets rollback rows
            (``llm_arch_supports_rs_rollback``); for others ``n_rs_seq`` is clamped to 0.
        reserves_all_logits: the compute reservation keeps logits for the whole ubatch (ik),
            which selects ik's compute-buffer estimate.
        fit_counts_mtp_block: the engine's fit counts a loaded MTP block among the layers it
            fills from the back (upstream: ``hp_ngl += n_layer_nextn``), so its experts move first.
        fit_splits_layers: the engine's fit brings part of the first RAM layer back to the GPU
            (upstream: up, then gate experts; else the router and shared expert go too).
        fit_moves_layers_of_moe: when even every expert in RAM is not enough, the engine's fit
            moves whole layers (their attention and shared weights) to the CPU as well (upstream:
            dense-only layers back to front); ik's fit moves only expert tensors of a MoE model
            and stops with ``Unable to auto-fit model``.
        mtp_layers_in_main_kv: with MTP on, the main context's KV cache holds the nextn layers
            too, beside the MTP context's own (ik since speculative stages).
        recurrent_step_checkpoints: with MTP on, the recurrent layers keep per-step rollback
            checkpoints for each drafted step (ik since speculative stages).
        sliding_window_cache: sliding-window layers (gemma3) get a cache of the window plus a
            ubatch instead of the whole context (upstream's ``llama_kv_cache_iswa``).
        cuda_measured: the GPU kit measured this engine's CUDA build (buffers, fit, what the
            process grows by after the load: upstream b11434 on sm_90); elsewhere the same
            figures are estimates.
        draft_sampler_top_k: the MTP draft samples its top-k on the backend, inside its graph
            (upstream: ``--spec-draft-backend-sampling`` on by default, top-k 10; the draft
            context is reserved again with the sampler's nodes); 0: sampled on the host.
    """

    flavour: EngineFlavour
    kv_pad_flash: int
    kv_pad_plain: int
    per_slot_streams: bool
    recurrent_in_kv_buffer: bool
    recurrent_rollback_copies: bool
    mtp_architectures: frozenset[str]
    mtp_uses_draft_cache_types: bool
    fit_changes_ctx: bool
    fit_ctx_floor: int
    rollback_architectures: frozenset[str] = frozenset()
    reserves_all_logits: bool = False
    fit_counts_mtp_block: bool = False
    fit_splits_layers: bool = False
    fit_moves_layers_of_moe: bool = False
    mtp_layers_in_main_kv: bool = False
    recurrent_step_checkpoints: bool = False
    sliding_window_cache: bool = False
    draft_sampler_top_k: int = 0
    cuda_measured: bool = False
    moe_cache: bool = False
    """``--moe-cache-mib N`` keeps a GPU cache of the experts of layers whose experts all stay
    in RAM (upstream b11549, ``src/llama-moe-cache.cpp``)."""
    maps_in_ranges: bool = False
    """A memory-mapped load maps each run of CPU tensors on its own, not one span per file: an
    unloaded MTP block between the trunk and the output layer is not mapped (upstream after
    b11434, which loads the MTP block only when MTP is on)."""
