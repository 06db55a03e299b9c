"""Hugging Face repositories: remote GGUF headers, the per-file plan table, verified downloads."""
