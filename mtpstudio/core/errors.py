"""The one exception hierarchy of mtpstudio's core; every message is one plain sentence."""

from __future__ import annotations


class MtpStudioError(Exception):
    """Base of every error the core raises on purpose.

    The message is one sentence that says what is wrong; ``hint`` says what to do next.
    GUI and CLI show ``str(error)`` and the hint, never a traceback.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class GgufError(MtpStudioError):
    """A file is not a GGUF file this reader can use (says what and at which byte offset)."""


class PlanError(MtpStudioError):
    """A Plan is invalid or cannot be loaded or saved."""


class CatalogError(MtpStudioError):
    """A catalogue id is unknown or a card cannot be built."""


class AdapterError(MtpStudioError):
    """A Plan option cannot be expressed for an engine build; the message names both."""


class RenderError(MtpStudioError):
    """A file cannot be rendered, e.g. a value that cannot be quoted safely for its format."""


class BenchError(MtpStudioError):
    """A benchmark cannot run or was interrupted (the message says which server and why)."""


class ServerError(MtpStudioError):
    """A server cannot be launched, found or stopped (port in use, bad model, crash, timeout)."""


class HubError(MtpStudioError):
    """A model repository cannot be listed, read or downloaded (says which file and why).

    ``whole_repo`` is True when the cause stops every file of the repository alike (not found,
    gated, rate limited, no network), False when only this file is affected.
    """

    def __init__(self, message: str, hint: str | None = None, *, whole_repo: bool = False) -> None:
        super().__init__(message, hint)
        self.whole_repo = whole_repo
