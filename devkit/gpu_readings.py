"""What the GPU says about its memory, for the GPU kit: NVML readings and ``nvidia-smi -q -x``.

The readings go through the product's own NVML detection (``core.detect.nvidia``), so a run
on a real card also exercises the code that has otherwise only read recorded answers.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from mtpstudio.core.detect.nvidia import detect_nvidia


def nvml_reading() -> dict[str, Any]:
    """Every NVIDIA GPU's memory and processes now (JSON-ready); ``unavailable`` says why not."""
    found = detect_nvidia(None)
    return {
        "unavailable": found.unavailable,
        "problems": list(found.problems),
        "gpus": [gpu.model_dump(mode="json") for gpu in found.gpus],
        "processes": [p.model_dump(mode="json") for p in found.processes],
    }


def process_used_bytes(reading: dict[str, Any], pid: int) -> int | None:
    """What process ``pid`` holds on the GPUs in ``reading`` (None: not listed or unknown)."""
    used = [p.get("used_bytes") for p in reading.get("processes", []) if p.get("pid") == pid]
    known = [u for u in used if isinstance(u, int)]
    return sum(known) if known else None


def nvidia_smi_xml(timeout: float = 60.0) -> tuple[str, str | None]:
    """(``nvidia-smi -q -x`` output, None) or ("", why it is missing)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return "", "nvidia-smi is not installed here"
    try:
        done = subprocess.run(
            [tool, "-q", "-x"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"nvidia-smi failed: {exc}"
    if done.returncode != 0:
        return done.stdout, f"nvidia-smi exited {done.returncode}: {done.stderr.strip()[:300]}"
    return done.stdout, None
