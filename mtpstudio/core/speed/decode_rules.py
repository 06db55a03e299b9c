"""The engines' decoding facts as the speed estimate reads them (``engines.speed_facts``: each
engine profile carries its own), and the kernel path of a small batch."""

from __future__ import annotations

from mtpstudio.core.engines.speed_facts import IK_SPEED, UPSTREAM_SPEED, EngineSpeedFacts

DecodeRules = EngineSpeedFacts
UPSTREAM_RULES = UPSTREAM_SPEED
IK_RULES = IK_SPEED

MMVQ_MAX_BATCH = 8
"""Quantized products of up to 8 tokens run the mat-vec kernel, one column per token, its
dequantisation done again for each (``mmvq.cuh`` ``MMVQ_MAX_BATCH_SIZE``, both engines)."""

__all__ = ["IK_RULES", "MMVQ_MAX_BATCH", "UPSTREAM_RULES", "DecodeRules"]
