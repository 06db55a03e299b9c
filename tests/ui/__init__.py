"""GUI tests (pytest-qt, offscreen)."""
