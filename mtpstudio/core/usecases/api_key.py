"""The server's API key: stored in a file of its own (mode 0600), never in the plan or argv,
and read back for `mtpstudio bench --url`."""

from __future__ import annotations

from mtpstudio.core.engines.apikey import default_key_path, read_api_key, store_api_key

__all__ = ["default_key_path", "read_api_key", "store_api_key"]
