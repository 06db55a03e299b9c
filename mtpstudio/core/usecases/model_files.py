"""A plan's model files and the catalogue: headers read before planning, demo and GPU cards.

Light on purpose (no planner): a face reads the files first, so a bad one is refused in one
sentence before the planner loads.
"""

from __future__ import annotations

from mtpstudio.core.catalog.gpus import (
    DEFAULT_GPU_CARD,
    VENDOR_TITLES,
    GpuCard,
    catalogue_gpu_id,
    gpu_card,
    gpu_cards,
    gpu_cards_by_vendor,
    similar_gpu_ids,
)
from mtpstudio.core.catalog.model_choice import load_model_info
from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_cards
from mtpstudio.core.model.defaults import ctx_for_model
from mtpstudio.core.model.file_state import file_state_text
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan

__all__ = [
    "DEFAULT_GPU_CARD",
    "DEFAULT_MODEL_CARD",
    "VENDOR_TITLES",
    "GpuCard",
    "ModelInfo",
    "catalogue_gpu_id",
    "ctx_for_model",
    "file_state_text",
    "gpu_card",
    "gpu_cards",
    "gpu_cards_by_vendor",
    "load_model_info",
    "model_cards",
    "read_model_info",
    "read_plan_models",
    "similar_gpu_ids",
]


def read_plan_models(
    plan: Plan, *, default_ctx: bool = False
) -> tuple[Plan, ModelInfo, ModelInfo | None]:
    """The plan's model header (its file or demo card) and its draft model's header.

    ``default_ctx``: the plan's context is the default, not a choice, so it is kept within the
    model's native context (``model.defaults.ctx_for_model``).

    Raises:
        MtpStudioError: a file cannot be read (one sentence, with what to do).
    """
    info = load_model_info(plan.model)
    if default_ctx:
        plan = plan_with(plan, {"runtime.ctx": ctx_for_model(plan.runtime.ctx, info)})
    draft = read_model_info(plan.draft.path) if plan.draft.path is not None else None
    return plan, info, draft
