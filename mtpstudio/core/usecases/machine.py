"""This machine, detected: the GPUs, the engines and their builds, the processes holding VRAM,
the desktop session; with the sources a test or a recorded fixture may stand in for.

`mtpstudio detect`/`apply` and the Hardware page enter the detection room here (the workbench
takes its machine facts from the same detection).
"""

from __future__ import annotations

from mtpstudio.core.detect.gather import DetectionSources, detect_all, detect_for
from mtpstudio.core.detect.models import DetectionReport, EngineInfo, GpuInfo, GpuProcess
from mtpstudio.core.detect.processes import ProcessCategory

__all__ = [
    "DetectionReport",
    "DetectionSources",
    "EngineInfo",
    "GpuInfo",
    "GpuProcess",
    "ProcessCategory",
    "detect_all",
    "detect_for",
]
