"""The detection report (models re-exported here) and ``detect_all``, which runs every source."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from mtpstudio.core.detect.drm import (
    DrmCard,
    DrmClient,
    device_bytes,
    find_pci_ids,
    scan_cards,
    scan_fdinfo,
)
from mtpstudio.core.detect.engines import (
    DEFAULT_SYSTEM_DIRS,
    EngineDetection,
    detect_engines,
)
from mtpstudio.core.detect.host import SessionInfo, detect_host, detect_session
from mtpstudio.core.detect.models import (
    Connector,
    DetectionReport,
    DisplayInfo,
    EngineInfo,
    FlagProbeInfo,
    GpuInfo,
    GpuMemory,
    GpuProcess,
    GpuVendor,
    HostInfo,
    PcieLink,
)
from mtpstudio.core.detect.nvidia import NvidiaDetection, NvmlSource, detect_nvidia, load_pynvml
from mtpstudio.core.detect.processes import ProcessCategory, categorize, read_process
from mtpstudio.core.engines.probe import PROBE_TIMEOUT_S
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.runner import Runner, SubprocessRunner

__all__ = [
    "Connector",
    "DetectionReport",
    "DetectionSources",
    "DisplayInfo",
    "EngineInfo",
    "FlagProbeInfo",
    "GpuInfo",
    "GpuMemory",
    "GpuProcess",
    "GpuVendor",
    "HostInfo",
    "PcieLink",
    "ProcessCategory",
    "detect_all",
    "no_gpu_sentence",
]

T = TypeVar("T")

NVIDIA_TIMEOUT_S = 10.0
SYSFS_TIMEOUT_S = 5.0
HOST_TIMEOUT_S = 5.0
ENGINES_TIMEOUT_S = 300.0


@dataclass
class DetectionSources:
    """Everything detection reads, injectable for tests; ``system()`` is this machine.

    ``nvml`` None means the real pynvml; ``nvml_loader`` loads it (tests can make it raise).
    ``home``/``system_dirs``/``opt_root`` are the engine search places outside $PATH.
    """

    nvml: NvmlSource | None = None
    nvml_loader: Callable[[], NvmlSource] = load_pynvml
    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    etc_root: Path = Path("/etc")
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    runner: Runner = field(default_factory=SubprocessRunner)
    home: Path | None = None
    system_dirs: Sequence[Path] = DEFAULT_SYSTEM_DIRS
    opt_root: Path | None = Path("/opt")
    pci_ids: Path | None = None

    @classmethod
    def system(cls) -> DetectionSources:
        """The real machine: /sys, /proc, /etc, os.environ, pynvml, subprocesses."""
        return cls(pci_ids=find_pci_ids())


def detect_all(
    sources: DetectionSources | None = None,
    engine_paths: Sequence[Path] = (),
    engine_cache: Path | None = None,
    use_engine_cache: bool = True,
    refresh_engines: bool = False,
    probe_timeout: float = PROBE_TIMEOUT_S,
    include_engines: bool = True,
) -> DetectionReport:
    """Detect GPUs, VRAM users, display, host and engines; never raises for a failing source.

    Each source runs in its own daemon thread with a time limit, so a hung driver call or
    D-Bus tool costs at most that limit and shows up in ``problems``.
    """
    src = sources or DetectionSources.system()
    problems: list[str] = []

    def nvidia() -> NvidiaDetection:
        return detect_nvidia(src.nvml, src.proc_root, src.environ, src.nvml_loader)

    def cards() -> tuple[list[DrmCard], list[str]]:
        return scan_cards(src.sys_root, src.pci_ids)

    def host() -> HostInfo:
        return detect_host(src.proc_root, src.etc_root)

    def session() -> SessionInfo:
        return detect_session(src.environ, src.etc_root, src.runner)

    def engines() -> EngineDetection:
        if not include_engines:
            return EngineDetection()
        return detect_engines(
            src.environ,
            src.runner,
            extra_paths=engine_paths,
            cache_path=engine_cache,
            use_cache=use_engine_cache,
            refresh=refresh_engines,
            home=src.home,
            system_dirs=src.system_dirs,
            opt_root=src.opt_root,
            timeout=probe_timeout,
        )

    nv_job = _Job("NVIDIA (NVML)", nvidia, NVIDIA_TIMEOUT_S)
    cards_job = _Job("GPUs in sysfs", cards, SYSFS_TIMEOUT_S)
    host_job = _Job("host", host, HOST_TIMEOUT_S)
    session_job = _Job("desktop session", session, HOST_TIMEOUT_S)
    engines_job = _Job("engines", engines, ENGINES_TIMEOUT_S)
    nv = nv_job.result(problems) or NvidiaDetection(unavailable="NVML did not answer")
    drm_cards, drm_problems = cards_job.result(problems) or ([], [])
    host_info = host_job.result(problems) or HostInfo()
    sess = session_job.result(problems)
    eng = engines_job.result(problems) or EngineDetection()

    problems.extend(drm_problems)
    problems.extend(nv.problems)
    gpus, processes = _merge_gpus(nv, drm_cards, problems)
    processes.extend(_drm_processes(src, gpus, drm_cards, problems))
    if nv.unavailable is not None and any(g.vendor is GpuVendor.NVIDIA for g in gpus):
        problems.append(f"NVML unavailable ({nv.unavailable}): NVIDIA memory and processes unknown")
    display = _display(gpus, drm_cards, sess)
    if sess is not None and sess.problem:
        problems.append(sess.problem)
    problems.extend(eng.problems)
    report = DetectionReport(
        gpus=gpus,
        processes=processes,
        display=display,
        host=host_info,
        engines=eng.engines,
        problems=problems,
    )
    if not gpus:
        report.problems.insert(0, no_gpu_sentence(nv))
    return report


def no_gpu_sentence(nv: NvidiaDetection) -> str:
    """One line saying why there is no GPU, e.g. 'No GPU found: NVML library not found ...'."""
    nvml = nv.unavailable or "NVML reports no NVIDIA GPU"
    return (
        f"No GPU found: {nvml} and no AMD/Intel GPU in /sys/class/drm — planning works for a "
        "catalogue GPU or the CPU."
    )


# ------------------------------------------------------------------------------------------
# merging


def _merge_gpus(
    nv: NvidiaDetection, cards: Sequence[DrmCard], problems: list[str]
) -> tuple[list[GpuInfo], list[GpuProcess]]:
    by_bus = {c.pci_bus_id: c for c in cards if c.pci_bus_id}
    gpus: list[GpuInfo] = []
    used_cards: set[str] = set()
    for gpu in nv.gpus:
        card = by_bus.get(gpu.pci_bus_id) if gpu.pci_bus_id else None
        if card is not None:
            used_cards.add(card.card)
            gpu = gpu.model_copy(
                update={
                    "drm_card": card.card,
                    "render_node": card.render_node,
                    "pci_device_id": card.device_id,
                    "pci_class": card.pci_class,
                    "boot_vga": card.boot_vga,
                    "connectors": list(card.connectors),
                    "driver": card.driver or gpu.driver,
                    "drives_display": _drives_display(gpu, card),
                }
            )
        gpus.append(gpu)
    next_cuda = len(nv.gpus)
    rocm = 0
    for card in cards:
        if card.card in used_cards:
            continue
        if card.vendor is GpuVendor.OTHER:  # virtual/VM displays (bochs, virtio, QXL, ...)
            problems.append(
                f"ignored display device {card.card} ({card.vendor_id}:{card.device_id}, "
                f"driver {card.driver or 'none'}): not an NVIDIA, AMD or Intel GPU"
            )
            continue
        if card.vendor is GpuVendor.NVIDIA and card.driver == "nvidia" and nv.gpus:
            problems.append(f"{card.card} ({card.pci_bus_id}) is NVIDIA but NVML did not list it")
        if card.vendor is GpuVendor.NVIDIA and card.driver == "nvidia":
            gpu_id = f"CUDA{next_cuda}"  # NVML unavailable: PCI order is the best guess
            next_cuda += 1
        elif card.vendor is GpuVendor.AMD and not card.integrated:
            gpu_id = f"ROCm{rocm}"
            rocm += 1
        else:
            gpu_id = card.card
        gpus.append(_card_gpu(card, gpu_id))
    return gpus, list(nv.processes)


def _drives_display(gpu: GpuInfo, card: DrmCard) -> bool:
    if card.connectors:  # nvidia-drm modeset=1 exposes connectors: they are the truth
        return card.drives_display
    return bool(gpu.display_active)


def _card_gpu(card: DrmCard, gpu_id: str) -> GpuInfo:
    memory = GpuMemory()
    if card.vram_total is not None:
        used = card.vram_used
        free = card.vram_total - used if used is not None else None
        memory = GpuMemory(
            total_bytes=card.vram_total, used_bytes=used, free_bytes=free, source="sysfs"
        )
    return GpuInfo(
        id=gpu_id,
        vendor=card.vendor,
        name=card.name,
        integrated=card.integrated,
        pci_bus_id=card.pci_bus_id,
        pci_vendor_id=card.vendor_id,
        pci_device_id=card.device_id,
        pci_class=card.pci_class,
        drm_card=card.card,
        render_node=card.render_node,
        driver=card.driver,
        memory=memory,
        boot_vga=card.boot_vga,
        connectors=list(card.connectors),
        drives_display=card.drives_display,
    )


def _drm_processes(
    src: DetectionSources,
    gpus: Sequence[GpuInfo],
    cards: Sequence[DrmCard],
    problems: list[str],
) -> list[GpuProcess]:
    """Per-process memory from DRM fdinfo for GPUs NVML does not cover (AMD, Intel, nouveau)."""
    targets = {
        g.pci_bus_id: g
        for g in gpus
        if g.pci_bus_id and not (g.vendor is GpuVendor.NVIDIA and g.memory.source)
    }
    if not targets:
        return []
    clients, unreadable = scan_fdinfo(src.proc_root, src.sys_root)
    for pid in unreadable:  # comm and cmdline stay readable; only say it when it matters
        ident = read_process(src.proc_root, pid)
        category = categorize(ident.name, ident.command, ident.exe_name)
        if category in (ProcessCategory.COMPOSITOR, ProcessCategory.INFERENCE_ENGINE):
            problems.append(
                f"{ident.label} (pid {pid}, {category.value}) belongs to another user: its "
                "GPU memory on AMD/Intel GPUs is not visible without root"
            )
    per_gpu: dict[tuple[str, int], list[DrmClient]] = {}
    for client in clients:
        if client.pci_bus_id in targets:
            gpu = targets[client.pci_bus_id]
            per_gpu.setdefault((gpu.id, client.pid), []).append(client)
    out: list[GpuProcess] = []
    for (gpu_id, pid), group in per_gpu.items():
        gpu = next(g for g in gpus if g.id == gpu_id)
        regions: dict[str, int] = {}
        for client in group:
            for region, size in client.regions.items():
                regions[region] = regions.get(region, 0) + size
        ident = read_process(src.proc_root, pid)
        out.append(
            GpuProcess(
                gpu_id=gpu_id,
                pid=pid,
                name=ident.name or ident.exe_name,
                command=ident.command,
                used_bytes=device_bytes(regions, gpu.integrated),
                kinds=["drm"],
                category=categorize(ident.name, ident.command, ident.exe_name),
                regions=regions,
            )
        )
    out.sort(key=lambda p: (p.gpu_id, -(p.used_bytes or 0), p.pid))
    return out


def _display(
    gpus: Sequence[GpuInfo], cards: Sequence[DrmCard], sess: SessionInfo | None
) -> DisplayInfo:
    connected = [c for card in cards for c in card.connectors if c.status == "connected"]
    return DisplayInfo(
        session_type=sess.session_type if sess else None,
        desktop=sess.desktop if sess else None,
        display_manager=sess.display_manager if sess else None,
        kwin_compositing=sess.kwin_compositing if sess else None,
        kwin_renderer=sess.kwin_renderer if sess else None,
        display_gpu_ids=[g.id for g in gpus if g.drives_display],
        connectors=connected,
    )


# ------------------------------------------------------------------------------------------
# running sources with a time limit


class _Job(Generic[T]):
    """A function started at once in a daemon thread (a hung call never blocks exit)."""

    def __init__(self, name: str, fn: Callable[[], T], timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"detect {name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except Exception as exc:  # reported as a problem, never re-raised
            self._error = exc

    def result(self, problems: list[str]) -> T | None:
        """The value, or None with a problem added when it failed or ran out of time."""
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            problems.append(f"{self.name}: no answer within {self.timeout:g} s")
            return None
        if self._error is not None:
            err = self._error
            problems.append(f"{self.name}: failed ({type(err).__name__}: {err})")
            return None
        return self._value


def detect_for(plan: Plan) -> DetectionReport:
    """This machine's detection, also probing the engine binary the plan names (wherever it
    lives), so ``mtpstudio plan`` and the wizard plan with the same build."""
    extra = [Path(plan.engine.binary)] if plan.engine.binary is not None else []
    return detect_all(engine_paths=extra)
