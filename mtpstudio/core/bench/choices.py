"""The benchmark's named choices, without the benchmark: what ``mtpstudio bench`` offers.

The parser reads them from here, so registering ``bench`` imports no HTTP client and no Plan
model; ``bench.ab.PRESETS`` and ``bench.history.export_entry`` implement them (a test keeps the
names equal).
"""

from __future__ import annotations

PRESET_NAMES = ("graphs", "mtp")
"""The A/B presets on ``bench --plan``: CUDA graphs control, MTP on vs off."""

EXPORT_FORMATS = ("md", "csv", "json")
"""The formats ``bench show`` (and the GUI's Export) write a stored run in."""
