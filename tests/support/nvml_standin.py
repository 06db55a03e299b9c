"""A stand-in for NVIDIA's NVML driver library (``libnvidia-ml.so.1``): C, built from a recording.

Why: the booted Debian tree of the journey tests (``tests/journey/``) has no GPU, yet the service
at boot must see one through the real stack: nvidia-ml-py's ``pynvml`` loads
``libnvidia-ml.so.1`` by name with ctypes, and mtpstudio's ``detect_nvidia`` reads it exactly as
it reads a real card. ``build_standin`` generates that library's C source from an NVML recording
(``tests/fixtures/detect/nvml/*.json``, the format ``fixtures/detect/fake_nvml.py`` reads) and
compiles it with gcc. The journey uses ``rtx4070super-kde.json``: an RTX 4070 SUPER under KDE
Plasma 6 Wayland, NVIDIA driver 580.82.09 (CUDA 13.0), so the library answers with that card's
name, UUID, PCI ids and bus id, compute capability 8.9, PCIe 4.0 x16, display active and mode,
7,168 cores, 3,105 MHz SM clock, and its total and reserved memory, all baked in as constants.

What it exports: every C symbol pynvml looks up for the calls detection makes.
``nvmlInitWithFlags`` (``pynvml.nvmlInit`` calls it with 0; ``nvmlInit_v2`` is exported too),
``nvmlShutdown``, ``nvmlErrorString``, ``nvmlSystemGetDriverVersion``,
``nvmlSystemGetCudaDriverVersion``, ``nvmlDeviceGetCount_v2``,
``nvmlDeviceGetHandleByIndex_v2``, ``nvmlDeviceGetName``, ``nvmlDeviceGetUUID``,
``nvmlDeviceGetPciInfo_v3``, ``nvmlDeviceGetMemoryInfo`` and ``nvmlDeviceGetMemoryInfo_v2``
(which checks the struct's version field as the driver does),
``nvmlDeviceGetCudaComputeCapability``, the four PCIe link calls,
``nvmlDeviceGetDisplayActive`` / ``DisplayMode``, ``nvmlDeviceGetNumGpuCores``,
``nvmlDeviceGetMaxClockInfo`` (the SM clock) and
``nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3`` and ``_v2`` with NVML's two-call
protocol (a count first, ``NVML_ERROR_INSUFFICIENT_SIZE`` while the array is too small). A call
the recording answers with ``{"error": "NVMLError_X"}`` returns that NVML error code; a call the
recording lacks returns ``NVML_ERROR_NOT_SUPPORTED``, as ``FakeNvml`` answers, except
``nvmlDeviceGetMemoryInfo_v2``: its symbol is left out when no GPU of the recording has it
(pynvml raises ``NVMLError_FunctionNotFound``), and a GPU without it among GPUs with it returns
``NVML_ERROR_FUNCTION_NOT_FOUND``. Every call but ``nvmlErrorString`` returns
``NVML_ERROR_UNINITIALIZED`` outside init/shutdown, as the driver does.

How stand-ins reserve memory: the recorded processes are not listed. Instead a folder (baked in
at build time, ``/run/nvml-standin`` unless told otherwise) holds one file per stand-in process,
named by its PID, holding one line ``graphics MIB`` or ``compute MIB`` (``register_standin``
writes one). The library lists, on the first GPU, the stand-ins whose PID is alive
(``kill(pid, 0)`` succeeds or fails with EPERM; /proc is not read, a sandboxed service may not
see it; a zombie still counts until it is reaped), each holding ``MIB`` MiB in the graphics or
compute list. Memory follows them: used = the recording's used memory less what its own
processes held (the driver's baseline) + the live stand-ins' MiB; free = total - reserved - used,
never below 0 (the v1 call, whose used includes reserved, is derived alike).
"""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_STANDIN_DIR = "/run/nvml-standin"
LIBRARY_NAME = "libnvidia-ml.so.1"
SOURCE_NAME = "nvml_standin.c"
KINDS = ("graphics", "compute")
MIB = 1024 * 1024

# NVML_ERROR_* as nvml.h numbers them; pynvml names each one's class NVMLError_<CapWords>.
_NVML_ERRORS = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}
ERROR_CODES = {
    "NVMLError_" + string.capwords(name, "_").replace("_", ""): code
    for name, code in _NVML_ERRORS.items()
}
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = ERROR_CODES["NVMLError_NotSupported"]

_U32 = 2**32 - 1
_U64 = 2**64 - 1
_I32 = (-(2**31), 2**31 - 1)
_PCI_BUS_ID_LEGACY_SIZE = 16  # NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, NUL included
_PCI_BUS_ID_SIZE = 32  # NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, NUL included

_PROCESS_KEYS = ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetComputeRunningProcesses")


class StandinBuildError(RuntimeError):
    """The stand-in could not be built: a recording it cannot express, or gcc failed."""


# -- helpers for the generated C ----------------------------------------------------------------


def c_string(text: str) -> str:
    """``text`` as a C string literal (UTF-8; quotes, backslashes and non-ASCII escaped)."""
    out = []
    for byte in text.encode("utf-8"):
        if byte == 0:
            raise StandinBuildError(f"a NUL byte cannot be in a C string: {text!r}")
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F and char != "?":  # "?" escaped: no trigraphs
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")  # three octal digits end the escape, whatever follows
    return '"' + "".join(out) + '"'


def _error_code(name: Any, where: str) -> int:
    if not isinstance(name, str) or name not in ERROR_CODES:
        raise StandinBuildError(f"{where}: unknown NVML error {name!r}")
    return ERROR_CODES[name]


def _answer(source: Mapping[str, Any], key: str, where: str) -> tuple[int, Any]:
    """(NVML return code, value): the recorded value, its error, or NOT_SUPPORTED when absent."""
    if key not in source:
        return NVML_ERROR_NOT_SUPPORTED, None
    value = source[key]
    if isinstance(value, dict) and set(value) == {"error"}:
        return _error_code(value["error"], f"{where} {key}"), None
    return NVML_SUCCESS, value


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StandinBuildError(f"{where}: {value!r} is not an integer in [{low}, {high}]")
    return value


def _text(value: Any, where: str, size: int | None = None) -> str:
    if not isinstance(value, str):
        raise StandinBuildError(f"{where}: {value!r} is not a string")
    if size is not None and len(value.encode("utf-8")) >= size:
        raise StandinBuildError(f"{where}: {value!r} does not fit NVML's {size}-byte buffer")
    return c_string(value)


def _recorded_process_bytes(device: Mapping[str, Any], where: str) -> int:
    """What the recording's own processes held: per PID the larger of its lists' figures."""
    held: dict[int, int] = {}
    for key in _PROCESS_KEYS:
        ret, value = _answer(device, key, where)
        if ret != NVML_SUCCESS:
            continue
        if not isinstance(value, list):
            raise StandinBuildError(f"{where} {key}: {value!r} is not a list of processes")
        for entry in value:
            if not isinstance(entry, dict) or "pid" not in entry:
                raise StandinBuildError(f"{where} {key}: {entry!r} is not a process")
            pid = _int(entry["pid"], f"{where} {key} pid", 0, _U32)
            used = entry.get("usedGpuMemory")
            used_bytes = 0 if used is None else _int(used, f"{where} {key} usedGpuMemory", 0, _U64)
            held[pid] = max(held.get(pid, 0), used_bytes)
    return sum(held.values())


def _device_initializer(device: Mapping[str, Any], index: int) -> tuple[str, bool]:
    """The C initializer of one ``struct standin_gpu``, and whether it answers memory v2."""
    where = f"device {index}"
    if not isinstance(device, Mapping):
        raise StandinBuildError(f"{where}: {device!r} is not an object")
    fields: list[str] = []

    def put(name: str, value: object) -> None:
        fields.append(f"        .{name} = {value},")

    def simple(key: str, name: str, low: int, high: int) -> None:
        ret, value = _answer(device, key, where)
        put(f"{name}_ret", ret)
        if ret == NVML_SUCCESS:
            put(name, f"{_int(value, f'{where} {key}', low, high)}")

    for key, name, size in (
        ("nvmlDeviceGetName", "name", 96),  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
        ("nvmlDeviceGetUUID", "uuid", 96),  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
    ):
        ret, value = _answer(device, key, where)
        put(f"{name}_ret", ret)
        if ret == NVML_SUCCESS:
            put(name, _text(value, f"{where} {key}", size))

    ret, pci = _answer(device, "nvmlDeviceGetPciInfo", where)
    put("pci_ret", ret)
    if ret == NVML_SUCCESS:
        if not isinstance(pci, Mapping):
            raise StandinBuildError(f"{where} nvmlDeviceGetPciInfo: {pci!r} is not an object")
        try:
            put(
                "pci_bus_id_legacy",
                _text(pci["busIdLegacy"], f"{where} busIdLegacy", _PCI_BUS_ID_LEGACY_SIZE),
            )
            put("pci_bus_id", _text(pci["busId"], f"{where} busId", _PCI_BUS_ID_SIZE))
            for field, name in (
                ("domain", "pci_domain"),
                ("bus", "pci_bus"),
                ("device", "pci_device"),
                ("pciDeviceId", "pci_device_id"),
                ("pciSubSystemId", "pci_subsystem_id"),
            ):
                put(name, f"{_int(pci[field], f'{where} {field}', 0, _U32)}u")
        except KeyError as exc:
            raise StandinBuildError(f"{where} nvmlDeviceGetPciInfo lacks {exc}") from None

    held = _recorded_process_bytes(device, where)
    ret, mem = _answer(device, "nvmlDeviceGetMemoryInfo", where)
    put("memory_ret", ret)
    if ret == NVML_SUCCESS:
        total = _int(_field(mem, "total", where), f"{where} total", 0, _U64)
        used = _int(_field(mem, "used", where), f"{where} used", 0, _U64)
        put("memory_total", f"{total}ull")
        put("memory_baseline", f"{max(0, used - held)}ull")  # v1's used includes reserved
    has_v2 = "nvmlDeviceGetMemoryInfo_v2" in device
    ret, mem2 = _answer(device, "nvmlDeviceGetMemoryInfo_v2", where)
    put("memory_v2_ret", ret if has_v2 else ERROR_CODES["NVMLError_FunctionNotFound"])
    if ret == NVML_SUCCESS:
        total = _int(_field(mem2, "total", where), f"{where} v2 total", 0, _U64)
        reserved = _int(_field(mem2, "reserved", where), f"{where} v2 reserved", 0, _U64)
        used = _int(_field(mem2, "used", where), f"{where} v2 used", 0, _U64)
        put("memory_v2_total", f"{total}ull")
        put("memory_v2_reserved", f"{reserved}ull")
        put("memory_v2_baseline", f"{max(0, used - held)}ull")

    ret, cc = _answer(device, "nvmlDeviceGetCudaComputeCapability", where)
    put("cc_ret", ret)
    if ret == NVML_SUCCESS:
        if not isinstance(cc, list) or len(cc) != 2:
            raise StandinBuildError(f"{where} compute capability: {cc!r} is not [major, minor]")
        put("cc_major", _int(cc[0], f"{where} cc major", *_I32))
        put("cc_minor", _int(cc[1], f"{where} cc minor", *_I32))

    simple("nvmlDeviceGetCurrPcieLinkGeneration", "curr_gen", 0, _U32)
    simple("nvmlDeviceGetMaxPcieLinkGeneration", "max_gen", 0, _U32)
    simple("nvmlDeviceGetCurrPcieLinkWidth", "curr_width", 0, _U32)
    simple("nvmlDeviceGetMaxPcieLinkWidth", "max_width", 0, _U32)
    simple("nvmlDeviceGetDisplayActive", "display_active", *_I32)
    simple("nvmlDeviceGetDisplayMode", "display_mode", *_I32)
    simple("nvmlDeviceGetNumGpuCores", "cores", 0, _U32)
    simple("nvmlDeviceGetMaxClockInfo", "max_sm_clock", 0, _U32)
    for key, name in zip(_PROCESS_KEYS, ("graphics_ret", "compute_ret"), strict=True):
        put(name, _answer(device, key, where)[0])
    body = "\n".join(fields)
    return f"    {{ /* {where} */\n{body}\n    }},", has_v2


def _field(struct: Any, name: str, where: str) -> Any:
    if not isinstance(struct, Mapping) or name not in struct:
        raise StandinBuildError(f"{where}: memory figures {struct!r} lack {name!r}")
    return struct[name]


def _system(recording: Mapping[str, Any], key: str) -> tuple[int, Any]:
    return _answer(recording, key, "system")


def generate_source(recording: Mapping[str, Any]) -> str:
    """The stand-in's C source, the recording's answers baked in."""
    devices = recording.get("devices")
    if not isinstance(devices, list):
        raise StandinBuildError("the recording has no 'devices' list")
    initializers = [_device_initializer(device, i) for i, device in enumerate(devices)]
    driver_ret, driver = _system(recording, "nvmlSystemGetDriverVersion")
    cuda_ret, cuda = _system(recording, "nvmlSystemGetCudaDriverVersion")
    about = str(recording.get("_about", "")).replace("*/", "* /")
    return _SOURCE.substitute(
        about=about,
        gpu_count=len(devices),
        gpu_slots=max(1, len(devices)),
        gpus="\n".join(text for text, _ in initializers) or "    {0},",
        has_memory_v2=int(any(v2 for _, v2 in initializers)),
        driver_ret=driver_ret,
        driver=_text(driver, "nvmlSystemGetDriverVersion", 80) if driver_ret == 0 else "NULL",
        cuda_ret=cuda_ret,
        cuda=_int(cuda, "nvmlSystemGetCudaDriverVersion", *_I32) if cuda_ret == 0 else 0,
    )


# -- public helpers ---------------------------------------------------------------------------


def build_standin(
    recording: dict[str, Any] | Path,
    out_dir: Path,
    standin_dir: str = DEFAULT_STANDIN_DIR,
) -> Path:
    """Compile the stand-in for ``recording`` (a recording or its JSON file) to
    ``out_dir/libnvidia-ml.so.1`` and return that path; the C source is left next to it.

    ``standin_dir`` is the folder the library reads its stand-in processes from, fixed at build
    time. Raises StandinBuildError when gcc is missing or fails (its stderr in the message).
    """
    if isinstance(recording, Path):
        recording = json.loads(recording.read_text(encoding="utf-8"))
    if not isinstance(recording, dict):
        raise StandinBuildError(f"a recording is a JSON object, not {type(recording).__name__}")
    source = generate_source(recording)
    gcc = shutil.which("gcc")
    if gcc is None:
        raise StandinBuildError("gcc is missing: it builds the stand-in NVML library")
    out_dir.mkdir(parents=True, exist_ok=True)
    source_path = out_dir / SOURCE_NAME
    source_path.write_text(source, encoding="utf-8")
    library = out_dir / LIBRARY_NAME
    command = [
        gcc,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Werror",
        "-fvisibility=hidden",
        f"-Wl,-soname,{LIBRARY_NAME}",
        f"-DSTANDIN_DIR={c_string(standin_dir)}",
        "-o",
        str(library),
        str(source_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise StandinBuildError(
            f"gcc could not build the stand-in NVML (exit {done.returncode}, source "
            f"{source_path}):\n{done.stderr.strip()}"
        )
    return library


def register_standin(standin_dir: Path, pid: int, kind: str, mib: int) -> Path:
    """Declare process ``pid`` a stand-in holding ``mib`` MiB as a ``graphics`` or ``compute``
    user; the library lists it while the process lives. Returns the file written."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= 2**31 - 1:
        raise ValueError(f"not a PID: {pid!r}")
    if isinstance(mib, bool) or not isinstance(mib, int) or not 0 <= mib <= _U64 // MIB:
        raise ValueError(f"not a MiB count: {mib!r}")
    standin_dir.mkdir(parents=True, exist_ok=True)
    path = standin_dir / str(pid)
    partial = standin_dir / f".{pid}.partial"  # not all digits: the library skips it
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fchmod(fd, 0o644)  # a sandboxed reader of another account reads it too
        os.write(fd, f"{kind} {mib}\n".encode())
    finally:
        os.close(fd)
    os.replace(partial, path)
    return path


def unregister_standin(standin_dir: Path, pid: int) -> None:
    """Forget stand-in ``pid`` (it is no longer listed even while alive); absent is fine."""
    (standin_dir / str(pid)).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """``python nvml_standin.py RECORDING.json OUT_DIR [STANDIN_DIR]``: build, print the path."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(main.__doc__, file=sys.stderr)
        return 2
    standin_dir = args[2] if len(args) == 3 else DEFAULT_STANDIN_DIR
    print(build_standin(Path(args[0]), Path(args[1]), standin_dir))
    return 0


# -- the C source -----------------------------------------------------------------------------

_SOURCE = string.Template(
    r"""/* A stand-in for NVIDIA's NVML (libnvidia-ml.so.1), generated by
 * tests/support/nvml_standin.py from a recording: do not edit.
 * Recording: $about
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#ifndef STANDIN_DIR
#define STANDIN_DIR "/run/nvml-standin"
#endif

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef int nvmlEnableState_t;
typedef int nvmlClockType_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

#define NVML_CLOCK_SM 1
#define NVML_CLOCK_COUNT 4
#define NVML_MEMORY_V2 0x02000028u /* NVML_STRUCT_VERSION(Memory, 2) */
#define NVML_INSTANCE_NONE 0xFFFFFFFFu /* gpu/computeInstanceId off MIG */
#define STANDIN_MIB 1048576ull

struct nvmlDevice_st {
    unsigned int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* nvmlProcessInfo_v2_t has the same layout */

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == (NVML_MEMORY_V2 & 0xFFFFFFu), "nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");

/* -- the recording ------------------------------------------------------------------------- */

struct standin_gpu {
    nvmlReturn_t name_ret;
    const char *name;
    nvmlReturn_t uuid_ret;
    const char *uuid;
    nvmlReturn_t pci_ret;
    const char *pci_bus_id_legacy;
    const char *pci_bus_id;
    unsigned int pci_domain, pci_bus, pci_device, pci_device_id, pci_subsystem_id;
    nvmlReturn_t memory_ret;
    unsigned long long memory_total, memory_baseline;
    nvmlReturn_t memory_v2_ret;
    unsigned long long memory_v2_total, memory_v2_reserved, memory_v2_baseline;
    nvmlReturn_t cc_ret;
    int cc_major, cc_minor;
    nvmlReturn_t curr_gen_ret;
    unsigned int curr_gen;
    nvmlReturn_t max_gen_ret;
    unsigned int max_gen;
    nvmlReturn_t curr_width_ret;
    unsigned int curr_width;
    nvmlReturn_t max_width_ret;
    unsigned int max_width;
    nvmlReturn_t display_active_ret;
    nvmlEnableState_t display_active;
    nvmlReturn_t display_mode_ret;
    nvmlEnableState_t display_mode;
    nvmlReturn_t cores_ret;
    unsigned int cores;
    nvmlReturn_t max_sm_clock_ret;
    unsigned int max_sm_clock;
    nvmlReturn_t graphics_ret;
    nvmlReturn_t compute_ret;
};

#define STANDIN_GPU_COUNT $gpu_count
#define STANDIN_HAS_MEMORY_V2 $has_memory_v2

static const struct standin_gpu gpus[$gpu_slots] = {
$gpus
};

static const nvmlReturn_t driver_version_ret = $driver_ret;
static const char *const driver_version = $driver;
static const nvmlReturn_t cuda_driver_version_ret = $cuda_ret;
static const int cuda_driver_version = $cuda;

/* -- state and helpers --------------------------------------------------------------------- */

static struct nvmlDevice_st handles[$gpu_slots];
static int init_count;

static int standin_initialised(void)
{
    return __atomic_load_n(&init_count, __ATOMIC_SEQ_CST) > 0;
}

static nvmlReturn_t standin_gpu_of(nvmlDevice_t device, const struct standin_gpu **gpu,
                                   unsigned int *index)
{
    if (!standin_initialised())
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned int i = 0; i < (unsigned int)STANDIN_GPU_COUNT; i++) {
        if (device == &handles[i]) {
            *gpu = &gpus[i];
            *index = i;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t standin_copy(const char *text, char *buffer, unsigned int length)
{
    size_t size = strlen(text) + 1;
    if (buffer == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((size_t)length < size)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buffer, text, size);
    return NVML_SUCCESS;
}

static unsigned long long standin_add(unsigned long long a, unsigned long long b)
{
    return a > ~0ull - b ? ~0ull : a + b;
}

/* -- the stand-in processes ---------------------------------------------------------------- */

enum { KIND_GRAPHICS = 1, KIND_COMPUTE = 2 };

struct standin_proc {
    unsigned int pid;
    int kind;
    unsigned long long bytes;
};

static int standin_parse_pid(const char *name, unsigned int *pid)
{
    unsigned long value = 0;
    if (*name == '\0')
        return 0;
    for (const char *c = name; *c != '\0'; c++) {
        if (*c < '0' || *c > '9')
            return 0;
        value = value * 10 + (unsigned long)(*c - '0');
        if (value > (unsigned long)INT_MAX)
            return 0;
    }
    if (value == 0)
        return 0;
    *pid = (unsigned int)value;
    return 1;
}

static int standin_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* "graphics MIB" or "compute MIB" (one line) */
static int standin_read(const char *name, int *kind, unsigned long long *bytes)
{
    char path[PATH_MAX];
    char line[128];
    char *p, *end;
    unsigned long long mib;
    FILE *file;
    int got;

    if (snprintf(path, sizeof path, "%s/%s", STANDIN_DIR, name) >= (int)sizeof path)
        return 0;
    file = fopen(path, "re");
    if (file == NULL)
        return 0;
    got = fgets(line, sizeof line, file) != NULL;
    fclose(file);
    if (!got)
        return 0;
    p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "graphics", 8) == 0) {
        *kind = KIND_GRAPHICS;
        p += 8;
    } else if (strncmp(p, "compute", 7) == 0) {
        *kind = KIND_COMPUTE;
        p += 7;
    } else {
        return 0;
    }
    if (*p != ' ' && *p != '\t')
        return 0;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p < '0' || *p > '9')
        return 0;
    errno = 0;
    mib = strtoull(p, &end, 10);
    if (errno != 0 || mib > ~0ull / STANDIN_MIB)
        return 0;
    while (standin_blank(*end))
        end++;
    if (*end != '\0')
        return 0;
    *bytes = mib * STANDIN_MIB;
    return 1;
}

/* alive: signal 0 reaches it, or it exists but belongs to someone else (no /proc needed) */
static int standin_alive(unsigned int pid)
{
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static int standin_by_pid(const void *a, const void *b)
{
    unsigned int x = ((const struct standin_proc *)a)->pid;
    unsigned int y = ((const struct standin_proc *)b)->pid;
    return (x > y) - (x < y);
}

/* the live stand-ins of GPU ``index`` (all on the first GPU), by PID; free() the list */
static nvmlReturn_t standin_scan(unsigned int index, struct standin_proc **procs, size_t *count)
{
    struct standin_proc *list = NULL;
    size_t n = 0, cap = 0;
    struct dirent *entry;
    DIR *dir;

    *procs = NULL;
    *count = 0;
    if (index != 0)
        return NVML_SUCCESS;
    dir = opendir(STANDIN_DIR);
    if (dir == NULL)
        return NVML_SUCCESS; /* no folder: no stand-ins */
    while ((entry = readdir(dir)) != NULL) {
        struct standin_proc proc;
        if (!standin_parse_pid(entry->d_name, &proc.pid))
            continue;
        if (!standin_read(entry->d_name, &proc.kind, &proc.bytes))
            continue;
        if (!standin_alive(proc.pid))
            continue;
        if (n == cap) {
            size_t grown_cap = cap ? cap * 2 : 16;
            struct standin_proc *grown = realloc(list, grown_cap * sizeof *list);
            if (grown == NULL) {
                free(list);
                closedir(dir);
                return NVML_ERROR_MEMORY;
            }
            list = grown;
            cap = grown_cap;
        }
        list[n++] = proc;
    }
    closedir(dir);
    if (n > 1)
        qsort(list, n, sizeof *list, standin_by_pid);
    *procs = list;
    *count = n;
    return NVML_SUCCESS;
}

static nvmlReturn_t standin_live_bytes(unsigned int index, unsigned long long *bytes)
{
    struct standin_proc *procs;
    size_t count;
    nvmlReturn_t ret = standin_scan(index, &procs, &count);
    *bytes = 0;
    if (ret != NVML_SUCCESS)
        return ret;
    for (size_t i = 0; i < count; i++)
        *bytes = standin_add(*bytes, procs[i].bytes);
    free(procs);
    return NVML_SUCCESS;
}

static nvmlReturn_t standin_processes(nvmlDevice_t device, int kind, unsigned int *infoCount,
                                      nvmlProcessInfo_t *infos)
{
    const struct standin_gpu *gpu;
    struct standin_proc *procs;
    unsigned int index, n = 0;
    size_t count;
    nvmlReturn_t ret = standin_gpu_of(device, &gpu, &index);
    if (ret != NVML_SUCCESS)
        return ret;
    if (infoCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    ret = kind == KIND_GRAPHICS ? gpu->graphics_ret : gpu->compute_ret;
    if (ret != NVML_SUCCESS)
        return ret;
    ret = standin_scan(index, &procs, &count);
    if (ret != NVML_SUCCESS)
        return ret;
    for (size_t i = 0; i < count; i++)
        n += procs[i].kind == kind;
    if (*infoCount < n) {
        *infoCount = n;
        free(procs);
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && infos == NULL) {
        free(procs);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    n = 0;
    for (size_t i = 0; i < count; i++) {
        if (procs[i].kind != kind)
            continue;
        infos[n].pid = procs[i].pid;
        infos[n].usedGpuMemory = procs[i].bytes;
        infos[n].gpuInstanceId = NVML_INSTANCE_NONE;
        infos[n].computeInstanceId = NVML_INSTANCE_NONE;
        n++;
    }
    *infoCount = n;
    free(procs);
    return NVML_SUCCESS;
}

/* -- NVML ---------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    __atomic_add_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    int count = __atomic_load_n(&init_count, __ATOMIC_SEQ_CST);
    while (count > 0) {
        if (__atomic_compare_exchange_n(&init_count, &count, count - 1, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return NVML_SUCCESS;
    }
    return NVML_ERROR_UNINITIALIZED;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "vGPU ECC not supported";
    case 23: return "Insufficient Resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    case 30: return "Reset type not supported";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!standin_initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (driver_version_ret != NVML_SUCCESS)
        return driver_version_ret;
    return standin_copy(driver_version, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!standin_initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (cuda_driver_version_ret != NVML_SUCCESS)
        return cuda_driver_version_ret;
    *cudaDriverVersion = cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!standin_initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = STANDIN_GPU_COUNT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!standin_initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= (unsigned int)STANDIN_GPU_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    handles[index].index = index;
    *device = &handles[index];
    return NVML_SUCCESS;
}

#define STANDIN_PROLOGUE(out)                                                                  \
    const struct standin_gpu *gpu;                                                             \
    unsigned int index;                                                                        \
    nvmlReturn_t ret = standin_gpu_of(device, &gpu, &index);                                   \
    (void)index;                                                                               \
    if (ret != NVML_SUCCESS)                                                                   \
        return ret;                                                                            \
    if ((out) == NULL)                                                                         \
        return NVML_ERROR_INVALID_ARGUMENT

#define STANDIN_VALUE(function, type, field)                                                   \
    EXPORT nvmlReturn_t function(nvmlDevice_t device, type *out)                               \
    {                                                                                          \
        STANDIN_PROLOGUE(out);                                                                 \
        if (gpu->field##_ret != NVML_SUCCESS)                                                  \
            return gpu->field##_ret;                                                           \
        *out = gpu->field;                                                                     \
        return NVML_SUCCESS;                                                                   \
    }

STANDIN_VALUE(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int, curr_gen)
STANDIN_VALUE(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int, max_gen)
STANDIN_VALUE(nvmlDeviceGetCurrPcieLinkWidth, unsigned int, curr_width)
STANDIN_VALUE(nvmlDeviceGetMaxPcieLinkWidth, unsigned int, max_width)
STANDIN_VALUE(nvmlDeviceGetDisplayActive, nvmlEnableState_t, display_active)
STANDIN_VALUE(nvmlDeviceGetDisplayMode, nvmlEnableState_t, display_mode)
STANDIN_VALUE(nvmlDeviceGetNumGpuCores, unsigned int, cores)

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    STANDIN_PROLOGUE(name);
    if (gpu->name_ret != NVML_SUCCESS)
        return gpu->name_ret;
    return standin_copy(gpu->name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    STANDIN_PROLOGUE(uuid);
    if (gpu->uuid_ret != NVML_SUCCESS)
        return gpu->uuid_ret;
    return standin_copy(gpu->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    STANDIN_PROLOGUE(pci);
    if (gpu->pci_ret != NVML_SUCCESS)
        return gpu->pci_ret;
    memset(pci, 0, sizeof *pci);
    memcpy(pci->busIdLegacy, gpu->pci_bus_id_legacy, strlen(gpu->pci_bus_id_legacy) + 1);
    memcpy(pci->busId, gpu->pci_bus_id, strlen(gpu->pci_bus_id) + 1);
    pci->domain = gpu->pci_domain;
    pci->bus = gpu->pci_bus;
    pci->device = gpu->pci_device;
    pci->pciDeviceId = gpu->pci_device_id;
    pci->pciSubSystemId = gpu->pci_subsystem_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long live, used;
    STANDIN_PROLOGUE(memory);
    if (gpu->memory_ret != NVML_SUCCESS)
        return gpu->memory_ret;
    ret = standin_live_bytes(index, &live);
    if (ret != NVML_SUCCESS)
        return ret;
    used = standin_add(gpu->memory_baseline, live);
    memory->total = gpu->memory_total;
    memory->used = used;
    memory->free = gpu->memory_total > used ? gpu->memory_total - used : 0;
    return NVML_SUCCESS;
}

#if STANDIN_HAS_MEMORY_V2
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long live, used, held;
    STANDIN_PROLOGUE(memory);
    if (memory->version != NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (gpu->memory_v2_ret != NVML_SUCCESS)
        return gpu->memory_v2_ret;
    ret = standin_live_bytes(index, &live);
    if (ret != NVML_SUCCESS)
        return ret;
    used = standin_add(gpu->memory_v2_baseline, live);
    held = standin_add(gpu->memory_v2_reserved, used);
    memory->total = gpu->memory_v2_total;
    memory->reserved = gpu->memory_v2_reserved;
    memory->used = used;
    memory->free = gpu->memory_v2_total > held ? gpu->memory_v2_total - held : 0;
    return NVML_SUCCESS;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                       int *minor)
{
    STANDIN_PROLOGUE(major);
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu->cc_ret != NVML_SUCCESS)
        return gpu->cc_ret;
    *major = gpu->cc_major;
    *minor = gpu->cc_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                              unsigned int *clock)
{
    STANDIN_PROLOGUE(clock);
    if (type < 0 || type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type != NVML_CLOCK_SM)
        return NVML_ERROR_NOT_SUPPORTED; /* the recording has the SM clock only */
    if (gpu->max_sm_clock_ret != NVML_SUCCESS)
        return gpu->max_sm_clock_ret;
    *clock = gpu->max_sm_clock;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    return standin_processes(device, KIND_GRAPHICS, infoCount, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    return standin_processes(device, KIND_GRAPHICS, infoCount, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *infoCount,
                                                            nvmlProcessInfo_t *infos)
{
    return standin_processes(device, KIND_COMPUTE, infoCount, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *infoCount,
                                                            nvmlProcessInfo_t *infos)
{
    return standin_processes(device, KIND_COMPUTE, infoCount, infos);
}
"""
)


if __name__ == "__main__":
    raise SystemExit(main())
