"""Upstream llama.cpp after b11549 as data: the model mapped in ranges, MTP weights on demand.

Recorded from the ``llama-cpp-py-sync`` 0.11739 libraries (llama.cpp 0ce8cd1,
tests/fixtures/engines/upstream-11739/): ``llama_model_params`` gained ``load_mtp`` (the MTP
block loads only when MTP is on), and a memory-mapped load maps each run of CPU tensors instead
of one span from the first to the last, so with MTP off the MTP block between the trunk and the
output layer is not mapped: the Qwen3.6-35B-A3B IQ4_XS maps 429.87 MiB less (its MTP block).
Builds are of this era from the build number after b11549 their ``--version`` names (the change
lies between b11550 and b11739: the b11549 tree in the ``xllamacpp`` sdist still maps one span,
its ``llama-model-loader.cpp`` is b11434's). Everything else is the b11549 profile's
(``upstream_moe_cache``): a build of this era has ``--moe-cache-mib`` too.
"""

from __future__ import annotations

import dataclasses

from mtpstudio.core.engines.profiles import upstream_moe_cache

FIRST_BUILD = 11550
"""The first build number of this era (b11549 still maps one span per file)."""

PROFILE = dataclasses.replace(
    upstream_moe_cache.PROFILE,
    era="llama.cpp after b11549 (llama-cpp-py-sync 0.11739): the model mapped in ranges, the "
    "MTP block loaded only with MTP on",
    memory=dataclasses.replace(upstream_moe_cache.PROFILE.memory, maps_in_ranges=True),
    min_build=FIRST_BUILD,
    era_flag=None,  # told by its build number (the recorded libraries have no parser)
)
