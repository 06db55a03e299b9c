"""The speed model: decode and prefill tokens per second from the bytes each step reads where they
live, the devices' rates and MTP's acceptance (issue 37)."""
