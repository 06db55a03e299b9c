"""The demo model cards and the default one. Light (no heavy library), so `mtpstudio plan
--help` may list them; the GPU cards and model files are :mod:`usecases.model_files`."""

from __future__ import annotations

from mtpstudio.core.catalog.models import (
    DEFAULT_MODEL_CARD,
    card_weight_bytes,
    model_cards,
    model_cards_by_model,
)

__all__ = ["DEFAULT_MODEL_CARD", "card_weight_bytes", "model_cards", "model_cards_by_model"]
