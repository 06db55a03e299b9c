"""Jinja templates, shipped as package data (mtpstudio.templates)."""
