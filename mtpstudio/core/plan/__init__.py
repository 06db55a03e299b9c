"""The Plan: its schema, its settings and choices, and how it is read and written."""
