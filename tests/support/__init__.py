"""Test bench support: tiny random-weight GGUF models and real llama-server processes."""
