"""The catalogue files shipped in ``mtpstudio.resources``: read, checked for their schema."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from mtpstudio.core.errors import CatalogError


def catalogue_document(resource: str, schema: int, what: str) -> dict[str, Any]:
    """The JSON of ``resource`` (``catalog/gpus.json``), refused unless it is schema ``schema``.

    Raises:
        CatalogError: the file is missing, not JSON, or of another schema (``what`` names it:
            ``the GPU catalogue``).
    """
    try:
        text = resources.files("mtpstudio.resources").joinpath(resource).read_text("utf-8")
        document = json.loads(text)
    except (OSError, ValueError) as exc:
        raise CatalogError(
            f"cannot read {what} ({resource}): {exc}",
            hint="Reinstall mtpstudio; its data files are missing or damaged.",
        ) from None
    if not isinstance(document, dict) or document.get("schema") != schema:
        raise CatalogError(f"{what} is not schema {schema}")
    return document
