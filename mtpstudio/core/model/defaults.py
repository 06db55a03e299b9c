"""Plan settings that follow the model: a default context never past the native one."""

from __future__ import annotations

from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.settings import within_native


def ctx_for_model(ctx: int, info: ModelInfo) -> int:
    """``ctx``, but at most the model's native context (a 32,768 default on a model trained
    for 4,096 becomes 4,096: beyond it the model was never trained and the engine warns)."""
    return within_native(ctx, info.context_length)
