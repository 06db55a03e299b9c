"""The stand-in NVML library (support/nvml_standin.py), read by the real pynvml and detection.

Each test compiles the library from the RTX 4070 SUPER recording into its tmp_path, then runs
``detect_nvidia(None)`` in a fresh interpreter whose ``LD_LIBRARY_PATH`` finds it, exactly as
mtpstudio reads a real card. gcc is required: without it the build fails the test.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.detect.fake_nvml import FakeNvml, load_recording
from support.nvml_standin import (
    LIBRARY_NAME,
    build_standin,
    register_standin,
    unregister_standin,
)

from mtpstudio.core.detect.nvidia import detect_nvidia
from mtpstudio.core.detect.processes import ProcessCategory

REPO = Path(__file__).resolve().parents[2]
KDE = "rtx4070super-kde.json"
MIB = 1024 * 1024
PROCESS_KEYS = ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetComputeRunningProcesses")

DETECT = """
import json, pynvml
from mtpstudio.core.detect.nvidia import detect_nvidia

result = detect_nvidia(None)
maps = open("/proc/self/maps").read().splitlines()
print(json.dumps({
    "gpus": [g.model_dump(mode="json") for g in result.gpus],
    "processes": [p.model_dump(mode="json") for p in result.processes],
    "problems": result.problems,
    "unavailable": result.unavailable,
    "libraries": sorted({line.split()[-1] for line in maps if "libnvidia-ml" in line}),
}))
"""


class Standin:
    """A built stand-in library and the folder it reads its stand-in processes from."""

    def __init__(self, library: Path, folder: Path) -> None:
        self.library = library
        self.folder = folder

    def run(self, script: str) -> Any:
        """Run ``script`` with the stand-in found by the loader; its last stdout line as JSON."""
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.library.parent)
        env["PYTHONPATH"] = str(REPO)
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def detect(self) -> dict[str, Any]:
        """``detect_nvidia(None)`` as mtpstudio runs it, through pynvml and the stand-in."""
        out: dict[str, Any] = self.run(DETECT)
        assert out["libraries"] == [str(self.library)], out["libraries"]  # ours, no other
        assert out["unavailable"] is None, out
        return out


def without_processes(recording: dict[str, Any]) -> dict[str, Any]:
    """The recording with its process lists emptied (the stand-ins replace them)."""
    stripped = copy.deepcopy(recording)
    for device in stripped["devices"]:
        for key in PROCESS_KEYS:
            if isinstance(device.get(key), list):
                device[key] = []
    return stripped


def baseline_bytes(device: dict[str, Any]) -> int:
    """The driver's own use: the recording's used memory less what its processes held."""
    held = sum(p["usedGpuMemory"] for key in PROCESS_KEYS for p in device[key])
    used = int(device["nvmlDeviceGetMemoryInfo_v2"]["used"])
    return used - int(held)


@pytest.fixture
def recording() -> dict[str, Any]:
    return load_recording(KDE)


@pytest.fixture
def standin(tmp_path: Path, recording: dict[str, Any]) -> Standin:
    folder = tmp_path / "standin"
    library = build_standin(recording, tmp_path / "lib", str(folder))
    assert library == tmp_path / "lib" / LIBRARY_NAME and library.is_file()
    return Standin(library, folder)


@pytest.fixture
def kwin(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process whose comm is ``kwin_wayland``: a copy of sleep, run from tmp_path."""
    sleep = shutil.which("sleep")
    assert sleep, "sleep is missing"
    program = tmp_path / "bin" / "kwin_wayland"
    program.parent.mkdir()
    shutil.copy2(Path(sleep).resolve(), program)
    program.chmod(0o755)
    proc = subprocess.Popen([str(program), "60"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def gpu_of(out: dict[str, Any]) -> dict[str, Any]:
    (gpu,) = out["gpus"]
    return gpu  # type: ignore[no-any-return]


def test_the_gpu_reads_as_the_recorded_card(standin: Standin, recording: dict[str, Any]) -> None:
    """Everything but the memory in use is the recording's, field for field as the fake reads."""
    out = standin.detect()
    fake = detect_nvidia(FakeNvml(without_processes(recording)), Path("/nonexistent-proc"))
    expected = [g.model_dump(mode="json") for g in fake.gpus]
    got = out["gpus"]
    for gpus in (expected, got):
        for gpu in gpus:
            gpu["memory"].pop("used_bytes")
            gpu["memory"].pop("free_bytes")
    assert got == expected
    assert out["problems"] == fake.problems == []
    gpu = gpu_of(out)
    assert gpu["name"] == "NVIDIA GeForce RTX 4070 SUPER"
    assert gpu["uuid"] == "GPU-3f9c2b7e-6a41-8d0e-52c1-b7a9e04d6f18"
    assert gpu["pci_bus_id"] == "0000:01:00.0"
    assert (gpu["driver_version"], gpu["cuda_driver_version"]) == ("580.82.09", "13.0")
    assert gpu["compute_capability"] == "8.9"
    assert gpu["pcie"] == {"current_gen": 4, "max_gen": 4, "current_width": 16, "max_width": 16}
    assert gpu["display_active"] is True and gpu["display_mode"] is True
    assert gpu["memory"] == {
        "total_bytes": 12282 * MIB,
        "reserved_bytes": 396 * MIB,
        "source": "nvml v2",
    }


def test_no_stand_ins_no_processes_and_only_the_baseline_used(
    standin: Standin, recording: dict[str, Any]
) -> None:
    device = recording["devices"][0]
    recorded = device["nvmlDeviceGetMemoryInfo_v2"]
    baseline = baseline_bytes(device)
    assert baseline == 280_031_232  # 10,922,029,056 used less the five processes' 10,641,997,824

    out = standin.detect()
    assert out["processes"] == []
    memory = gpu_of(out)["memory"]
    assert memory["used_bytes"] == baseline
    assert memory["free_bytes"] == recorded["total"] - recorded["reserved"] - baseline
    assert memory["free_bytes"] == 12_183_343_104


def test_a_live_stand_in_is_listed_and_holds_its_memory_until_it_is_gone(
    standin: Standin, kwin: subprocess.Popen[bytes]
) -> None:
    before = gpu_of(standin.detect())["memory"]
    register_standin(standin.folder, kwin.pid, "graphics", 1024)

    held = standin.detect()
    (proc,) = held["processes"]
    assert proc["pid"] == kwin.pid
    assert proc["name"] == "kwin_wayland"
    assert proc["used_bytes"] == 1024 * MIB
    assert proc["kinds"] == ["graphics"]
    assert proc["category"] == ProcessCategory.COMPOSITOR.value
    assert proc["gpu_id"] == "CUDA0"
    memory = gpu_of(held)["memory"]
    assert memory["free_bytes"] == before["free_bytes"] - 1024 * MIB
    assert memory["used_bytes"] == before["used_bytes"] + 1024 * MIB

    kwin.send_signal(signal.SIGKILL)
    kwin.wait(timeout=10)  # reaped: a zombie would still count as alive
    assert (standin.folder / str(kwin.pid)).is_file()  # still registered, but dead
    gone = standin.detect()
    assert gone["processes"] == []
    assert gpu_of(gone)["memory"] == before


def test_kinds_sizes_and_unregistering(standin: Standin, kwin: subprocess.Popen[bytes]) -> None:
    """A compute stand-in lands in the compute list; this test process holds it."""
    register_standin(standin.folder, os.getpid(), "compute", 9216)
    register_standin(standin.folder, kwin.pid, "graphics", 300)
    (standin.folder / "notes.txt").write_text("graphics 5000\n")  # not a PID: ignored
    (standin.folder / "1").write_text("bogus 5000\n")  # malformed: ignored
    out = standin.detect()
    listed = {p["pid"]: (p["kinds"], p["used_bytes"]) for p in out["processes"]}
    assert listed == {os.getpid(): (["compute"], 9216 * MIB), kwin.pid: (["graphics"], 300 * MIB)}
    assert [p["pid"] for p in out["processes"]] == [os.getpid(), kwin.pid]  # largest first
    base = 280_031_232
    assert gpu_of(out)["memory"]["used_bytes"] == base + (9216 + 300) * MIB

    unregister_standin(standin.folder, os.getpid())
    unregister_standin(standin.folder, os.getpid())  # twice is fine
    out = standin.detect()
    assert [p["pid"] for p in out["processes"]] == [kwin.pid]
    assert gpu_of(out)["memory"]["used_bytes"] == base + 300 * MIB


PROTOCOL = """
import ctypes, json, pynvml

lib = ctypes.CDLL("libnvidia-ml.so.1")
out = {"before_init": lib.nvmlDeviceGetCount_v2(ctypes.byref(ctypes.c_uint()))}
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
count = ctypes.c_uint(0)
out["count_call"] = lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), None)
out["count"] = count.value
out["graphics_count_call"] = lib.nvmlDeviceGetGraphicsRunningProcesses_v3(
    handle, ctypes.byref(count), None)
out["v2"] = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)]
memory = pynvml.c_nvmlMemory_v2_t()
memory.version = 1
out["wrong_version"] = lib.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.byref(memory))
v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
out["v1"] = [v1.total, v1.free, v1.used]
out["v2_memory"] = [v2.version, v2.total, v2.reserved, v2.free, v2.used]
name = ctypes.create_string_buffer(8)
out["short_buffer"] = lib.nvmlDeviceGetName(handle, name, ctypes.c_uint(8))
out["bad_handle"] = lib.nvmlDeviceGetNumGpuCores(None, ctypes.byref(ctypes.c_uint()))
out["bad_index"] = lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(pynvml.c_nvmlDevice_t()))
out["other_clock"] = lib.nvmlDeviceGetMaxClockInfo(handle, 0, ctypes.byref(ctypes.c_uint()))
out["error_string"] = pynvml.nvmlErrorString(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
pynvml.nvmlShutdown()
out["after_shutdown"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(ctypes.c_uint()))
print(json.dumps(out))
"""


def test_the_c_calls_follow_nvml(standin: Standin, recording: dict[str, Any]) -> None:
    """The protocol under pynvml: the count call, version check, buffer sizes, bad arguments."""
    register_standin(standin.folder, os.getpid(), "compute", 2048)
    out = standin.run(PROTOCOL)
    total, reserved, base = 12_878_610_432, 415_236_096, 280_031_232
    free = total - reserved - base - 2048 * MIB
    assert out == {
        "before_init": 1,  # NVML_ERROR_UNINITIALIZED
        "count_call": 7,  # NVML_ERROR_INSUFFICIENT_SIZE, the count filled in
        "count": 1,
        "graphics_count_call": 0,  # none: success with a count of 0
        "v2": [os.getpid()],
        "wrong_version": 25,  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        "v1": [total, free, total - free],  # v1's used includes reserved
        "v2_memory": [0x02000028, total, reserved, free, base + 2048 * MIB],
        "short_buffer": 7,
        "bad_handle": 2,  # NVML_ERROR_INVALID_ARGUMENT
        "bad_index": 2,
        "other_clock": 3,  # not recorded: NVML_ERROR_NOT_SUPPORTED
        "error_string": "Insufficient Size",
        "after_shutdown": 1,
    }
    assert recording["devices"][0]["nvmlDeviceGetMemoryInfo"]["total"] == total


def test_recorded_errors_and_missing_calls_read_as_the_fake_reads_them(
    tmp_path: Path, recording: dict[str, Any]
) -> None:
    """An error answer returns its NVML code, a missing call NOT_SUPPORTED, a missing memory v2
    no symbol at all (detection falls back to v1): detection reads both as it reads FakeNvml."""
    changed = without_processes(recording)
    device = changed["devices"][0]
    device["nvmlDeviceGetNumGpuCores"] = {"error": "NVMLError_NoPermission"}
    device["nvmlDeviceGetComputeRunningProcesses"] = {"error": "NVMLError_NoPermission"}
    device["nvmlDeviceGetUUID"] = {"error": "NVMLError_GpuIsLost"}
    del device["nvmlDeviceGetDisplayMode"]
    del device["nvmlDeviceGetMemoryInfo_v2"]
    device["nvmlDeviceGetName"] = 'NVIDIA "Quoted" \\ GPU é'
    library = build_standin(changed, tmp_path / "lib", str(tmp_path / "standin"))
    out = Standin(library, tmp_path / "standin").detect()
    fake = detect_nvidia(FakeNvml(changed), Path("/nonexistent-proc"))
    assert out["gpus"] == [g.model_dump(mode="json") for g in fake.gpus]
    assert out["problems"] == fake.problems
    assert any("cannot list compute processes (no permission)" in p for p in out["problems"])
    gpu = gpu_of(out)
    assert gpu["name"] == 'NVIDIA "Quoted" \\ GPU é'
    assert gpu["uuid"] is None and gpu["display_mode"] is None
    assert gpu["memory"]["source"] == "nvml v1"
    v1 = device["nvmlDeviceGetMemoryInfo"]  # no processes recorded: all of used is baseline
    assert (gpu["memory"]["used_bytes"], gpu["memory"]["free_bytes"]) == (v1["used"], v1["free"])
