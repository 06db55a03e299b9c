"""Test and benchmark helpers that ship with the package (Qt-free)."""
