"""Embedded GPU and model cards: the demo default."""
