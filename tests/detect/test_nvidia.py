"""NVIDIA detection through NvmlSource, fed by the fake NVML with recorded answers."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest
from fixtures.detect.fake_nvml import FakeNvml, load_recording
from fixtures.detect.machines import MIB, Roots

from mtpstudio.core.detect.nvidia import (
    NVML_MEMORY_V2,
    PynvmlSource,
    describe_nvml_error,
    detect_nvidia,
    format_cuda_version,
    normalize_bus_id,
)
from mtpstudio.core.detect.processes import ProcessCategory

KDE = "rtx4070super-kde.json"


@pytest.fixture
def proc_root(machine_roots: Callable[[str], Roots]) -> Path:
    return machine_roots("desktop_amd_igpu_nvidia").proc_root


def test_rtx_4070_super_fields(proc_root: Path) -> None:
    nvml = FakeNvml(KDE)
    result = detect_nvidia(nvml, proc_root)
    assert result.unavailable is None
    assert result.problems == []
    (gpu,) = result.gpus
    assert gpu.id == "CUDA0"
    assert gpu.name == "NVIDIA GeForce RTX 4070 SUPER"
    assert gpu.uuid == "GPU-3f9c2b7e-6a41-8d0e-52c1-b7a9e04d6f18"
    assert gpu.pci_bus_id == "0000:01:00.0"
    assert gpu.driver_version == "580.82.09"
    assert gpu.cuda_driver_version == "13.0"
    assert gpu.compute_capability == "8.9"
    assert (gpu.pcie.current_gen, gpu.pcie.max_gen) == (4, 4)  # type: ignore[union-attr]
    assert (gpu.pcie.current_width, gpu.pcie.max_width) == (16, 16)  # type: ignore[union-attr]
    assert gpu.display_active is True and gpu.display_mode is True
    assert gpu.drives_display is True
    assert gpu.integrated is False
    mem = gpu.memory
    assert mem.source == "nvml v2"
    assert mem.total_bytes == 12282 * MIB
    assert mem.reserved_bytes == 396 * MIB
    assert mem.used_bytes is not None and mem.free_bytes is not None
    assert mem.used_bytes + mem.free_bytes + mem.reserved_bytes == mem.total_bytes
    # NVML is always shut down again
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"


def test_processes_named_and_categorised(proc_root: Path) -> None:
    result = detect_nvidia(FakeNvml(KDE), proc_root)
    by_name = {p.name: p for p in result.processes}
    assert set(by_name) == {"kwin_wayland", "Xwayland", "plasmashell", "firefox", "llama-server"}
    assert by_name["kwin_wayland"].category is ProcessCategory.COMPOSITOR
    assert by_name["Xwayland"].category is ProcessCategory.COMPOSITOR
    assert by_name["plasmashell"].category is ProcessCategory.DESKTOP_SHELL
    assert by_name["firefox"].category is ProcessCategory.BROWSER
    assert by_name["llama-server"].category is ProcessCategory.INFERENCE_ENGINE
    assert by_name["llama-server"].kinds == ["compute"]
    assert by_name["kwin_wayland"].kinds == ["graphics"]
    assert by_name["kwin_wayland"].used_bytes == 412 * MIB
    assert by_name["llama-server"].command is not None
    assert "--spec-type draft-mtp" in by_name["llama-server"].command
    assert {p.gpu_id for p in result.processes} == {"CUDA0"}
    assert result.processes[0].name == "llama-server"  # biggest first


def test_used_gpu_memory_none_is_kept_unknown(proc_root: Path) -> None:
    data = load_recording(KDE)
    data["devices"][0]["nvmlDeviceGetGraphicsRunningProcesses"][3]["usedGpuMemory"] = None
    result = detect_nvidia(FakeNvml(data), proc_root)
    firefox = next(p for p in result.processes if p.pid == 2761)
    assert firefox.used_bytes is None
    assert firefox.name == "firefox"


def test_missing_v2_memory_call_falls_back_to_v1(proc_root: Path) -> None:
    data = load_recording(KDE)
    del data["devices"][0]["nvmlDeviceGetMemoryInfo_v2"]
    nvml = FakeNvml(data)
    (gpu,) = detect_nvidia(nvml, proc_root).gpus
    assert gpu.memory.source == "nvml v1"
    assert gpu.memory.reserved_bytes is None
    v1 = data["devices"][0]["nvmlDeviceGetMemoryInfo"]
    assert gpu.memory.used_bytes == v1["used"]  # v1 'used' includes the reserved part
    assert "nvmlDeviceGetMemoryInfo_v2" in nvml.calls  # the v2 call was tried first


def test_v3_process_calls_missing_fall_back_to_v2(proc_root: Path) -> None:
    nvml = FakeNvml(
        KDE,
        errors={
            "nvmlDeviceGetComputeRunningProcesses": "NVMLError_FunctionNotFound",
            "nvmlDeviceGetGraphicsRunningProcesses": "NVMLError_FunctionNotFound",
        },
    )
    result = detect_nvidia(nvml, proc_root)
    assert len(result.processes) == 5
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in nvml.calls
    assert result.problems == []


def test_process_listing_failure_is_a_problem_not_a_crash(proc_root: Path) -> None:
    errors = {
        name: "NVMLError_NoPermission"
        for name in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetComputeRunningProcesses_v2",
        )
    }
    result = detect_nvidia(FakeNvml(KDE, errors=errors), proc_root)
    assert [p.kinds for p in result.processes] == [["graphics"]] * 4
    assert any(
        "cannot list compute processes" in p and "no permission" in p for p in result.problems
    )


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("NVMLError_LibraryNotFound", "NVML library not found"),
        ("NVMLError_DriverNotLoaded", "NVIDIA driver not loaded"),
        ("NVMLError_LibRmVersionMismatch", "version mismatch"),
    ],
)
def test_init_errors_make_nvml_unavailable(proc_root: Path, error: str, reason: str) -> None:
    nvml = FakeNvml(KDE, init_error=error)
    result = detect_nvidia(nvml, proc_root)
    assert result.gpus == [] and result.processes == []
    assert result.unavailable is not None and reason in result.unavailable
    assert nvml.calls == ["nvmlInit"]  # no shutdown after a failed init


def test_pynvml_not_installed(proc_root: Path) -> None:
    def loader() -> PynvmlSource:
        raise ImportError("No module named 'pynvml'")

    result = detect_nvidia(None, proc_root, loader=loader)
    assert result.unavailable == "nvidia-ml-py (pynvml) is not installed"


def test_real_pynvml_without_driver_reports_a_reason(proc_root: Path) -> None:
    """On a machine without the NVIDIA driver the real pynvml fails cleanly."""
    result = detect_nvidia(None, proc_root)
    if result.unavailable is None:  # a machine with a working driver: it must list its GPUs
        assert result.gpus
        return
    assert result.gpus == []
    assert result.unavailable  # e.g. "NVML library not found"


def test_optional_calls_not_supported_leave_fields_empty(proc_root: Path) -> None:
    data = load_recording(KDE)
    dev = data["devices"][0]
    for key in (
        "nvmlDeviceGetDisplayActive",
        "nvmlDeviceGetDisplayMode",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetUUID",
    ):
        dev[key] = {"error": "NVMLError_NotSupported"}
    (gpu,) = detect_nvidia(FakeNvml(data), proc_root).gpus
    assert gpu.display_active is None and gpu.uuid is None
    assert gpu.pcie is not None and gpu.pcie.current_gen is None and gpu.pcie.max_gen == 4


def _two_gpus() -> dict[str, object]:
    data = load_recording(KDE)
    slow = copy.deepcopy(data["devices"][0])
    slow["nvmlDeviceGetName"] = "NVIDIA GeForce RTX 3060"
    slow["nvmlDeviceGetPciInfo"]["busId"] = "00000000:01:00.0"
    slow["nvmlDeviceGetNumGpuCores"] = 3584
    slow["nvmlDeviceGetMaxClockInfo"] = 2100
    slow["nvmlDeviceGetComputeRunningProcesses"] = []
    slow["nvmlDeviceGetGraphicsRunningProcesses"] = []
    fast = data["devices"][0]
    fast["nvmlDeviceGetPciInfo"]["busId"] = "00000000:08:00.0"
    data["devices"] = [slow, fast]  # NVML enumerates by PCI bus
    return data


def test_cuda_order_fastest_first_by_default(proc_root: Path) -> None:
    result = detect_nvidia(FakeNvml(_two_gpus()), proc_root)
    assert [(g.id, g.name) for g in result.gpus] == [
        ("CUDA0", "NVIDIA GeForce RTX 4070 SUPER"),
        ("CUDA1", "NVIDIA GeForce RTX 3060"),
    ]
    assert {p.gpu_id for p in result.processes} == {"CUDA0"}


def test_cuda_order_pci_bus_id(proc_root: Path) -> None:
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    result = detect_nvidia(FakeNvml(_two_gpus()), proc_root, env)
    assert [g.name for g in result.gpus] == [
        "NVIDIA GeForce RTX 3060",
        "NVIDIA GeForce RTX 4070 SUPER",
    ]
    assert [g.pci_bus_id for g in result.gpus] == ["0000:01:00.0", "0000:08:00.0"]


def test_bus_id_and_version_formats() -> None:
    assert normalize_bus_id("00000000:01:00.0") == "0000:01:00.0"
    assert normalize_bus_id(b"00000000:0A:00.0") == "0000:0a:00.0"
    assert normalize_bus_id("0000:c5:00.0") == "0000:c5:00.0"
    assert format_cuda_version(12040) == "12.4"
    assert format_cuda_version(13000) == "13.0"
    assert pynvml.nvmlMemory_v2 == NVML_MEMORY_V2


def test_error_descriptions_use_pynvml_codes() -> None:
    assert describe_nvml_error(pynvml.NVMLError_LibraryNotFound()) == "NVML library not found"
    assert describe_nvml_error(pynvml.NVMLError_GpuIsLost()) == "the GPU is lost (fell off the bus)"
    assert "ValueError" in describe_nvml_error(ValueError("odd"))


def test_pynvml_source_wraps_every_protocol_call() -> None:
    names = [n for n in dir(FakeNvml) if n.startswith("nvml")]
    for name in names:
        assert hasattr(PynvmlSource, name), name
        assert hasattr(pynvml, name), f"pynvml lacks {name}"
