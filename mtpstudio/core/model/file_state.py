"""Whether a GGUF holds all of its tensor data: whole, header only (for planning) or incomplete."""

from __future__ import annotations

from enum import StrEnum

from mtpstudio.core.errors import GgufError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.units import GIB


class FileState(StrEnum):
    """How much of its tensor data a GGUF file holds."""

    WHOLE = "whole"
    HEADER_ONLY = "header-only"
    INCOMPLETE = "incomplete"


def file_state(info: ModelInfo) -> FileState:
    """Whole, header only (the file stops where the tensor data starts: what mtpstudio writes
    for planning, the demo cards' headers) or incomplete (the data runs past the end of the
    file: an unfinished download)."""
    if not info.full_file_size or info.file_size >= info.full_file_size:
        return FileState.WHOLE
    if info.file_size <= info.data_start:
        return FileState.HEADER_ONLY
    return FileState.INCOMPLETE


def file_state_text(info: ModelInfo) -> str | None:
    """A phrase for a file that is not whole ('incomplete: 9.20 of 17.91 GiB …'), else None."""
    state = file_state(info)
    if state is FileState.INCOMPLETE:
        return (
            f"incomplete: {info.file_size / GIB:.2f} of {info.full_file_size / GIB:.2f} GiB "
            "(its tensor data runs past the end of the file: an unfinished download?)"
        )
    if state is FileState.HEADER_ONLY:
        return (
            f"header only: the GGUF header without its {info.full_file_size / GIB:.2f} GiB of "
            "tensor data, a file made for planning (the engine cannot load it)"
        )
    return None


def require_whole_model(info: ModelInfo, path: object, role: str = "model") -> None:
    """Raise unless ``info``'s file holds all of its tensor data (before a launch or a unit).

    Raises:
        GgufError: one sentence saying what the file is and what to do.
    """
    state = file_state(info)
    if state is FileState.INCOMPLETE:
        raise GgufError(
            f"the {role} file {path} is incomplete ({info.file_size / GIB:.2f} of "
            f"{info.full_file_size / GIB:.2f} GiB), so the engine cannot load it",
            hint="Finish the download (or download it again), then try again.",
        )
    if state is FileState.HEADER_ONLY:
        raise GgufError(
            f"the {role} file {path} is only a GGUF header made for planning (no tensor data), "
            "so the engine cannot load it",
            hint="Open the whole model file instead (Model page, or `--model FILE`).",
        )
