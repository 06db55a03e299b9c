"""How each engine lays out memory: the facts the budget needs (engines.md §5-§6)."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.plan import EngineFlavour


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


UPSTREAM_FACTS = EngineMemoryFacts(
    flavour=EngineFlavour.UPSTREAM,
    kv_pad_flash=256,
    kv_pad_plain=256,
    per_slot_streams=True,
    recurrent_in_kv_buffer=False,
    recurrent_rollback_copies=True,
    mtp_architectures=frozenset({"qwen35moe", "qwen35", "qwen3next", "glm4moe", "deepseek2"}),
    mtp_uses_draft_cache_types=True,
    fit_changes_ctx=True,
    fit_ctx_floor=4096,
    rollback_architectures=frozenset({"qwen35", "qwen35moe", "nemotron_h", "nemotron_h_moe"}),
)

IK_FACTS = EngineMemoryFacts(
    flavour=EngineFlavour.IK,
    kv_pad_flash=256,
    kv_pad_plain=32,
    per_slot_streams=False,
    recurrent_in_kv_buffer=True,
    recurrent_rollback_copies=False,
    mtp_architectures=frozenset({"glm4moe"}),
    mtp_uses_draft_cache_types=False,
    fit_changes_ctx=False,
    fit_ctx_floor=0,
    reserves_all_logits=True,
)


def memory_facts(flavour: EngineFlavour) -> EngineMemoryFacts:
    """The memory rules of ``flavour``."""
    return UPSTREAM_FACTS if flavour is EngineFlavour.UPSTREAM else IK_FACTS
