"""Plan settings that follow the model: a default context never past the native one."""

from __future__ import annotations

from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import MIN_CTX


def ctx_for_model(ctx: int, info: ModelInfo) -> int:
    """``ctx``, but at most the model's native context (a 32,768 default on a model trained
    for 4,096 becomes 4,096: beyond it the model was never trained and the engine warns)."""
    native = info.context_length
    if native >= MIN_CTX and ctx > native:
        return native
    return ctx
