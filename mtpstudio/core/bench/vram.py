"""Peak VRAM use while a benchmark runs, sampled through NVML (the detection's NvmlSource)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mtpstudio.core.bench.results import VramPeak
from mtpstudio.core.detect.nvidia import NvmlSource, device_memory, load_pynvml


class VramSampler:
    """A context manager that samples every NVIDIA device's used VRAM every ``interval_s``.

    Without NVML (no driver, no GPU, no pynvml) it samples nothing and ``peaks()`` is empty.
    Threading: one background thread; ``peaks()`` after the ``with`` block has ended.
    """

    def __init__(
        self,
        source: NvmlSource | None = None,
        *,
        interval_s: float = 0.25,
        loader: Callable[[], NvmlSource] | None = load_pynvml,
    ) -> None:
        self._source = source
        self._loader = loader
        self._interval = interval_s
        self._handles: list[tuple[str, Any]] = []
        self._peak: dict[str, tuple[int, int]] = {}
        self._count: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._active = False

    @classmethod
    def disabled(cls) -> VramSampler:
        return cls(None, loader=None)

    def __enter__(self) -> VramSampler:
        self._active = self._open()
        if self._active:
            self.sample()
            self._thread = threading.Thread(target=self._loop, name="vram-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._active:
            self.sample()
            try:
                assert self._source is not None
                self._source.nvmlShutdown()
            except Exception:  # a failing shutdown must not hide the results
                pass
        self._active = False

    def _open(self) -> bool:
        if self._source is None:
            if self._loader is None:
                return False
            try:
                self._source = self._loader()
            except Exception:  # no pynvml: nothing to sample
                return False
        try:
            self._source.nvmlInit()
            count = self._source.nvmlDeviceGetCount()
            self._handles = [
                (f"CUDA{i}", self._source.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
            ]
        except Exception:  # NVML errors mean "no GPU to watch"
            return False
        return bool(self._handles)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        """Take one sample of every device now (also called by the thread)."""
        if self._source is None:
            return
        for device, handle in self._handles:
            memory = device_memory(self._source, handle)
            if not memory.total_bytes:
                continue
            # Taken = total - free: it counts the driver's reserved part, which v2's used omits.
            if memory.free_bytes is not None:
                taken = memory.total_bytes - memory.free_bytes
            elif memory.used_bytes is not None:
                taken = memory.used_bytes
            else:
                continue
            with self._lock:
                used, _ = self._peak.get(device, (0, memory.total_bytes))
                if taken >= used:
                    self._peak[device] = (taken, memory.total_bytes)
                self._count[device] = self._count.get(device, 0) + 1

    def peaks(self) -> list[VramPeak]:
        with self._lock:
            return [
                VramPeak(device, used, total, self._count.get(device, 0))
                for device, (used, total) in sorted(self._peak.items())
            ]
