"""The cancel flag long work checks (detection, downloads, benchmarks): one type for both
faces, which the GUI's task manager extends with its own signals."""

from __future__ import annotations

from mtpstudio.core.cancel import CancelToken

__all__ = ["CancelToken"]
