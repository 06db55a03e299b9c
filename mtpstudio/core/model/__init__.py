"""Models: the GGUF header reader, ModelInfo, model sources and the catalogue."""
