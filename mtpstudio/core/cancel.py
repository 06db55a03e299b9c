"""A thread-safe cancel flag that long work polls between its steps."""

from __future__ import annotations

import threading


class CancelToken:
    """Set from any thread; the work stops before its next step.

    Subclasses say which exception stops their kind of work (``cancelled_error``).
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise ``cancelled_error()`` when the token has been set."""
        if self.cancelled:
            raise self.cancelled_error()

    def cancelled_error(self) -> Exception:
        return RuntimeError("cancelled")
