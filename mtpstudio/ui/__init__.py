"""PySide6 user interface; the only place that imports Qt."""
