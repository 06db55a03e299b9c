"""Catalogue model cards: demo GGUF headers built on first use into the user cache."""

from __future__ import annotations

import difflib
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from mtpstudio.core.catalog.qwen36 import QWEN36_CARDS
from mtpstudio.core.catalog.spec import ModelCardSpec, card_tensors
from mtpstudio.core.errors import CatalogError
from mtpstudio.core.paths import cache_dir

if TYPE_CHECKING:
    from mtpstudio.core.model.info import ModelInfo

__all__ = [
    "CARD_FORMAT_VERSION",
    "DEFAULT_MODEL_CARD",
    "ModelCardSpec",
    "card_weight_bytes",
    "model_card",
    "model_card_info",
    "model_card_path",
    "model_cards",
    "model_cards_by_model",
]

DEFAULT_MODEL_CARD = "qwen3.6-35b-a3b-iq4_xs"
"""The model everybody asks about: Qwen3.6-35B-A3B at IQ4_XS, with its MTP layer."""

CARD_FORMAT_VERSION = 2
"""Part of each cached file's name; bump it whenever a spec or the writer changes."""


def model_cards() -> tuple[ModelCardSpec, ...]:
    """All catalogue model cards, the default first."""
    return QWEN36_CARDS


def model_card(card_id: str) -> ModelCardSpec:
    """The card spec with this id.

    Raises:
        CatalogError: the id is unknown; the message lists the known ids.
    """
    for spec in model_cards():
        if spec.card_id == card_id:
            return spec
    ids = [spec.card_id for spec in model_cards()]
    near = difflib.get_close_matches(card_id.lower(), ids, n=3, cutoff=0.8)
    models = ", ".join(model_cards_by_model())
    raise CatalogError(
        f"unknown model card '{card_id}'; "
        + (
            f"did you mean {' or '.join(near)}?"
            if near
            else f"the cards are a model ({models}) at a quant, e.g. {DEFAULT_MODEL_CARD}"
        ),
        hint="`mtpstudio plan --demo list` lists the demo cards by model; or open a GGUF file.",
    )


def model_cards_by_model() -> dict[str, tuple[ModelCardSpec, ...]]:
    """The cards grouped by model (``qwen3.6-35b-a3b``: its quants), in catalogue order."""
    groups: dict[str, list[ModelCardSpec]] = {}
    for spec in model_cards():
        groups.setdefault(spec.model_id, []).append(spec)
    return {model: tuple(cards) for model, cards in groups.items()}


@cache
def card_weight_bytes(card_id: str) -> int:
    """The bytes of a card's tensors (the file's size, less its header of a few MB), from its
    tensor table; no file is written."""
    return sum(t.n_bytes for t in card_tensors(model_card(card_id)))


def _cache_dir() -> Path:
    return cache_dir() / "catalog"


def model_card_path(card_id: str) -> Path:
    """The card's GGUF header in the user cache, written on first use and reused after.

    The file is written to a temporary name in the same folder and renamed into place, so
    a reader never sees a partial card, and two processes racing both end with a whole one.

    Raises:
        CatalogError: the id is unknown or the cache folder cannot be written.
    """
    return card_spec_path(model_card(card_id))


def card_spec_path(spec: ModelCardSpec) -> Path:
    """``model_card_path`` of any card spec (a catalogue card with another quant mix, say),
    cached under the spec's own ``card_id``.

    Raises:
        CatalogError: the cache folder cannot be written.
    """
    card_id = spec.card_id
    path = _cache_dir() / f"{spec.card_id}-v{CARD_FORMAT_VERSION}.gguf"
    if path.is_file():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            from mtpstudio.core.catalog.header import write_card_header  # numpy, gguf

            write_card_header(spec, tmp)
            tmp.chmod(0o644)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise CatalogError(
            f"cannot write the demo card {card_id} to {path.parent}: {exc.strerror or exc}",
            hint="Make the cache folder writable, or set XDG_CACHE_HOME to one that is.",
        ) from None
    return path


def model_card_info(card_id: str) -> ModelInfo:
    """The card's ModelInfo, read from its cached header by the project's GGUF reader."""
    from mtpstudio.core.model.gguf import read_model_info

    return read_model_info(model_card_path(card_id))
