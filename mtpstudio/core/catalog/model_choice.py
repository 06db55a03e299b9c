"""Resolve the Plan's model choice (GGUF path or demo card) to ModelInfo."""

from __future__ import annotations

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.schema import ModelChoice


def load_model_info(choice: ModelChoice) -> ModelInfo:
    """Read the model's header: the GGUF file when a path is set, else the demo card."""
    if choice.path is not None:
        return read_model_info(choice.path)
    assert choice.card is not None  # the Plan guarantees one of the two
    return model_card_info(choice.card)
