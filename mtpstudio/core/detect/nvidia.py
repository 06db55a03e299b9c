"""NVIDIA GPUs and their VRAM users through NVML (nvidia-ml-py's ``pynvml``, behind NvmlSource)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mtpstudio.core.detect.models import GpuInfo, GpuMemory, GpuProcess, GpuVendor, PcieLink
from mtpstudio.core.detect.processes import categorize, read_process

# nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24 (ABI-fixed).
NVML_MEMORY_V2 = 0x02000028
NVML_CLOCK_SM = 1

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13

_NVML_REASONS = {
    1: "NVML is not initialised",
    3: "not supported",
    4: "no permission",
    9: "NVIDIA driver not loaded",
    10: "the driver timed out",
    12: "NVML library not found",
    13: "the driver's NVML lacks this function",
    15: "the GPU is lost (fell off the bus)",
    17: "the operating system blocked the request",
    18: "NVIDIA driver/library version mismatch (reboot after a driver update)",
    999: "unknown NVML error",
}

T = TypeVar("T")


class NvmlSource(Protocol):
    """The NVML calls detection makes, spelled as pynvml spells them.

    The real source wraps the ``pynvml`` module; tests pass a fake that answers the same calls
    from recorded values and raises pynvml's own ``NVMLError_*`` classes.
    """

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetDisplayActive(self, handle: Any) -> int: ...
    def nvmlDeviceGetDisplayMode(self, handle: Any) -> int: ...
    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[Any]: ...


class PynvmlSource:
    """NvmlSource over the real ``pynvml`` module (import it with ``load_pynvml``)."""

    def __init__(self, module: Any) -> None:
        self._m = module

    def nvmlInit(self) -> None:
        self._m.nvmlInit()

    def nvmlShutdown(self) -> None:
        self._m.nvmlShutdown()

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self._call("nvmlSystemGetDriverVersion")  # type: ignore[no-any-return]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self._call("nvmlSystemGetCudaDriverVersion"))

    def nvmlDeviceGetCount(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        return self._call("nvmlDeviceGetName", handle)  # type: ignore[no-any-return]

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        return self._call("nvmlDeviceGetUUID", handle)  # type: ignore[no-any-return]

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self._call("nvmlDeviceGetPciInfo", handle)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        if version is None:
            return self._call("nvmlDeviceGetMemoryInfo", handle)
        return self._call("nvmlDeviceGetMemoryInfo", handle, version=version)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", handle)
        return int(major), int(minor)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetCurrPcieLinkGeneration", handle))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetMaxPcieLinkGeneration", handle))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetCurrPcieLinkWidth", handle))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetMaxPcieLinkWidth", handle))

    def nvmlDeviceGetDisplayActive(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetDisplayActive", handle))

    def nvmlDeviceGetDisplayMode(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetDisplayMode", handle))

    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetNumGpuCores", handle))

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int:
        return int(self._call("nvmlDeviceGetMaxClockInfo", handle, clock_type))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return list(self._call("nvmlDeviceGetComputeRunningProcesses", handle))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return list(self._call("nvmlDeviceGetComputeRunningProcesses_v2", handle))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        return list(self._call("nvmlDeviceGetGraphicsRunningProcesses", handle))

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return list(self._call("nvmlDeviceGetGraphicsRunningProcesses_v2", handle))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self._m, name, None)
        if fn is None:  # an older nvidia-ml-py without this binding
            raise AttributeError(f"pynvml has no {name}")
        return fn(*args, **kwargs)


def load_pynvml() -> PynvmlSource:
    """The real NVML source; raises ImportError when nvidia-ml-py is not installed."""
    import pynvml

    return PynvmlSource(pynvml)


def nvml_error_code(exc: BaseException) -> int | None:
    """The NVML_ERROR_* code of a pynvml error (any object with an int ``value``), else None."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def describe_nvml_error(exc: BaseException) -> str:
    """A plain phrase for an NVML failure, e.g. 'the NVIDIA driver is not loaded'."""
    code = nvml_error_code(exc)
    if code is not None and code in _NVML_REASONS:
        return _NVML_REASONS[code]
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may itself call into a missing library
        text = ""
    name = type(exc).__name__
    return f"{name}: {text}" if text and code is None else (text or name)


def normalize_bus_id(bus_id: str | bytes | None) -> str | None:
    """NVML's '00000000:01:00.0' as sysfs spells it: '0000:01:00.0' (lower case)."""
    if bus_id is None:
        return None
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    text = text.strip().lower()
    m = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", text)
    if m is None:
        return text or None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def format_cuda_version(value: int) -> str:
    """12040 -> '12.4'."""
    return f"{value // 1000}.{(value % 1000) // 10}"


@dataclass
class NvidiaDetection:
    """What NVML answered: GPUs in CUDA order (ids CUDA0...), their processes, and problems.

    ``unavailable`` is the reason NVML could not be used at all (None when it could).
    """

    gpus: list[GpuInfo] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unavailable: str | None = None


@dataclass
class _Device:
    index: int
    info: GpuInfo
    perf: int | None
    procs: list[GpuProcess]


def detect_nvidia(
    source: NvmlSource | None,
    proc_root: Path = Path("/proc"),
    environ: Mapping[str, str] | None = None,
    loader: Callable[[], NvmlSource] = load_pynvml,
) -> NvidiaDetection:
    """Ask NVML about every NVIDIA GPU; never raises.

    ``source`` None means the real pynvml (through ``loader``). Device ids follow CUDA's order:
    PCI bus order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, else CUDA's default "fastest first",
    approximated by CUDA cores x max SM clock (ties and unknowns in PCI bus order).
    """
    env = environ or {}
    result = NvidiaDetection()
    if source is None:
        try:
            source = loader()
        except ImportError:
            result.unavailable = "nvidia-ml-py (pynvml) is not installed"
            return result
        except Exception as exc:
            result.unavailable = f"pynvml could not be loaded: {exc}"
            return result
    try:
        source.nvmlInit()
    except Exception as exc:
        result.unavailable = describe_nvml_error(exc)
        return result
    try:
        _detect_devices(source, proc_root, env, result)
    finally:
        try:
            source.nvmlShutdown()
        except Exception as exc:
            result.problems.append(f"NVML shutdown failed: {describe_nvml_error(exc)}")
    return result


def _detect_devices(
    source: NvmlSource, proc_root: Path, env: Mapping[str, str], result: NvidiaDetection
) -> None:
    problems = result.problems
    driver = _opt(lambda: _text(source.nvmlSystemGetDriverVersion()))
    cuda = _opt(lambda: format_cuda_version(source.nvmlSystemGetCudaDriverVersion()))
    try:
        count = source.nvmlDeviceGetCount()
    except Exception as exc:
        result.unavailable = f"NVML could not count GPUs: {describe_nvml_error(exc)}"
        return
    devices: list[_Device] = []
    for index in range(count):
        try:
            handle = source.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            problems.append(f"NVIDIA GPU {index}: NVML gave no handle ({describe_nvml_error(exc)})")
            continue
        devices.append(_read_device(source, index, handle, driver, cuda, proc_root, problems))
    if env.get("CUDA_DEVICE_ORDER", "").upper() == "PCI_BUS_ID" or any(
        d.perf is None for d in devices
    ):
        devices.sort(key=lambda d: (d.info.pci_bus_id or "", d.index))
    else:
        devices.sort(key=lambda d: (-(d.perf or 0), d.info.pci_bus_id or "", d.index))
    for cuda_index, dev in enumerate(devices):
        gpu_id = f"CUDA{cuda_index}"
        result.gpus.append(dev.info.model_copy(update={"id": gpu_id}))
        result.processes.extend(p.model_copy(update={"gpu_id": gpu_id}) for p in dev.procs)


def _read_device(
    source: NvmlSource,
    index: int,
    handle: Any,
    driver: str | None,
    cuda: str | None,
    proc_root: Path,
    problems: list[str],
) -> _Device:
    label = f"NVIDIA GPU {index}"
    try:
        name = _text(source.nvmlDeviceGetName(handle))
    except Exception as exc:
        name = label
        problems.append(f"{label}: no name from NVML ({describe_nvml_error(exc)})")
    bus = _opt(lambda: normalize_bus_id(source.nvmlDeviceGetPciInfo(handle).busId))
    cc = _opt(lambda: "{}.{}".format(*source.nvmlDeviceGetCudaComputeCapability(handle)))
    memory = _memory(source, handle, name, problems)
    pcie = PcieLink(
        current_gen=_opt(lambda: source.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        max_gen=_opt(lambda: source.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        current_width=_opt(lambda: source.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        max_width=_opt(lambda: source.nvmlDeviceGetMaxPcieLinkWidth(handle)),
    )
    active = _opt(lambda: bool(source.nvmlDeviceGetDisplayActive(handle)))
    mode = _opt(lambda: bool(source.nvmlDeviceGetDisplayMode(handle)))
    cores = _opt(lambda: source.nvmlDeviceGetNumGpuCores(handle))
    clock = _opt(lambda: source.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_SM))
    info = GpuInfo(
        id=f"nvml{index}",
        vendor=GpuVendor.NVIDIA,
        name=name,
        integrated=False,
        pci_bus_id=bus,
        pci_vendor_id="0x10de",
        uuid=_opt(lambda: _text(source.nvmlDeviceGetUUID(handle))),
        driver="nvidia",
        driver_version=driver,
        cuda_driver_version=cuda,
        compute_capability=cc,
        memory=memory,
        pcie=pcie,
        display_active=active,
        display_mode=mode,
        drives_display=bool(active),
    )
    procs = _processes(source, handle, info.id, name, proc_root, problems)
    perf = cores * clock if cores and clock else None
    return _Device(index=index, info=info, perf=perf, procs=procs)


def _memory(source: NvmlSource, handle: Any, name: str, problems: list[str]) -> GpuMemory:
    try:
        mem = source.nvmlDeviceGetMemoryInfo(handle, version=NVML_MEMORY_V2)
        return GpuMemory(
            total_bytes=int(mem.total),
            used_bytes=int(mem.used),
            free_bytes=int(mem.free),
            reserved_bytes=int(mem.reserved),
            source="nvml v2",
        )
    except Exception:
        pass  # drivers before R510 or bindings without the v2 call: v1 below
    try:
        mem = source.nvmlDeviceGetMemoryInfo(handle)
        return GpuMemory(
            total_bytes=int(mem.total),
            used_bytes=int(mem.used),
            free_bytes=int(mem.free),
            source="nvml v1",
        )
    except Exception as exc:
        problems.append(f"{name}: NVML gave no memory figures ({describe_nvml_error(exc)})")
        return GpuMemory()


def device_memory(source: NvmlSource, handle: Any) -> GpuMemory:
    """One device's memory figures now (NVML v2, else v1); empty GpuMemory when NVML has none."""
    return _memory(source, handle, "GPU", [])


def _process_list(
    source: NvmlSource, handle: Any, kind: str, problems: list[str], name: str
) -> list[Any]:
    if kind == "compute":
        calls = (
            source.nvmlDeviceGetComputeRunningProcesses,
            source.nvmlDeviceGetComputeRunningProcesses_v2,
        )
    else:
        calls = (
            source.nvmlDeviceGetGraphicsRunningProcesses,
            source.nvmlDeviceGetGraphicsRunningProcesses_v2,
        )
    error: BaseException | None = None
    for call in calls:  # v3 first, v2 for older drivers
        try:
            return list(call(handle))
        except Exception as exc:
            error = exc
    if error is not None and nvml_error_code(error) != NVML_ERROR_NOT_SUPPORTED:
        problems.append(f"{name}: cannot list {kind} processes ({describe_nvml_error(error)})")
    return []


def _processes(
    source: NvmlSource,
    handle: Any,
    gpu_id: str,
    name: str,
    proc_root: Path,
    problems: list[str],
) -> list[GpuProcess]:
    merged: dict[int, GpuProcess] = {}
    for kind in ("graphics", "compute"):
        for entry in _process_list(source, handle, kind, problems, name):
            pid = int(entry.pid)
            used = getattr(entry, "usedGpuMemory", None)
            used_bytes = int(used) if used is not None else None
            if pid in merged:
                old = merged[pid]
                both = [u for u in (old.used_bytes, used_bytes) if u is not None]
                merged[pid] = old.model_copy(
                    update={
                        "kinds": [*old.kinds, kind],
                        "used_bytes": max(both) if both else None,
                    }
                )
                continue
            ident = read_process(proc_root, pid)
            merged[pid] = GpuProcess(
                gpu_id=gpu_id,
                pid=pid,
                name=ident.name or ident.exe_name,
                command=ident.command,
                used_bytes=used_bytes,
                kinds=[kind],
                category=categorize(ident.name, ident.command, ident.exe_name),
            )
    return sorted(merged.values(), key=lambda p: (-(p.used_bytes or 0), p.pid))


def _opt(fn: Callable[[], T]) -> T | None:
    """The call's value, or None when NVML says no (not supported, no permission, ...)."""
    try:
        return fn()
    except Exception:
        return None
