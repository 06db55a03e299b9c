"""Upstream llama.cpp b11549 as data: the GPU cache of RAM experts, port 9931, RPC 8.0.0.

Read from the tree in the PyPI sdist ``xllamacpp`` 2026.10.11549 (``thirdparty/llama.cpp``, upstream
unpatched) and run in the test bench (scripts/build_engines.py ``upstream-b11549``). Against b11434
it keeps the MTP flags and ``--fit`` byte for byte (``common/fit.cpp`` identical) and adds:

* ``--moe-cache-mib N``: a GPU cache for the experts of layers whose experts all stay in RAM
  (``src/llama-moe-cache.cpp``); it needs a GPU backend, disables pipeline parallelism, and the
  fit counts it as context bytes;
* the server's default port 9931 (was 8080; mtpstudio always passes ``--port``);
* RPC protocol 8.0.0 (b11434 speaks 7.0.0; a client refuses another major or a higher minor).

A build belongs to this era when its parser accepts ``--moe-cache-mib`` (the probe asks it like
any flag); the model is still mapped in one span per file (``llama-model-loader.cpp`` is b11434's).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from mtpstudio.core.engines.flags import FlagSpelling, Option
from mtpstudio.core.engines.profiles import upstream

__all__ = ["MOE_CACHE_FLAG", "PROFILE", "SPELLINGS"]

MOE_CACHE_FLAG = "--moe-cache-mib"
"""``common/arg.cpp``: ``--moe-cache-mib N`` (env ``LLAMA_ARG_MOE_CACHE_MIB``), 0 = off."""

SPELLINGS = MappingProxyType(
    {**upstream.SPELLINGS, Option.MOE_CACHE_MIB: FlagSpelling((MOE_CACHE_FLAG,), "0")}
)

PROFILE = dataclasses.replace(
    upstream.PROFILE,
    era="llama.cpp b11549 (xllamacpp 2026.10.11549): the GPU cache of RAM experts "
    "(--moe-cache-mib), default port 9931, RPC protocol 8.0.0",
    spellings=SPELLINGS,
    documented_flags=upstream.DOCUMENTED_FLAGS | {MOE_CACHE_FLAG},
    memory=dataclasses.replace(upstream.MEMORY, moe_cache=True, cuda_measured=False),
    era_flag=MOE_CACHE_FLAG,
    default_port=9931,
    rpc_protocol=(8, 0, 0),
)
