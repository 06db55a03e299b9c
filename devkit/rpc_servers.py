"""Real ``ggml-rpc-server`` processes on loopback, each reporting a chosen memory size.

ggml's CPU device sizes itself from ``sysconf(_SC_PHYS_PAGES)``; a small ``LD_PRELOAD``
library (compiled here with the system's C compiler) answers that call with the size asked
for, so an rpc-server's CPU device reports exactly that memory, free and total. That is how
the multi-device checks and the fit and split recorders (``tests/fixtures/fit/record_fit.py``,
``tests/fixtures/split/record_split.py``) stand in for a second GPU or a second machine.
Every server started is stopped by its own process id.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
long sysconf(int name) {
    static long (*real)(int);
    if (!real) real = (long (*)(int)) dlsym(RTLD_NEXT, "sysconf");
    const char *mib = getenv("MTPSTUDIO_DEVICE_MIB");
    if (name == _SC_PHYS_PAGES && mib) return atoll(mib) * 1048576LL / real(_SC_PAGE_SIZE);
    return real(name);
}
"""
SERVER = "ggml-rpc-server"


def build_shim(folder: Path) -> Path:
    """The size-reporting library, compiled into ``folder`` (reused when already there)."""
    shim = folder / "device_size.so"
    if shim.exists():
        return shim
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "device_size.c"
    source.write_text(SHIM)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(source), "-ldl"], check=True
    )
    return shim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{SERVER} did not listen on {port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the server's own process group (it leads one) and reap it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@contextmanager
def rpc_servers(bin_dir: Path, sizes_mib: Sequence[int], work: Path) -> Iterator[list[int]]:
    """Start one server per size on loopback; yields their ports, stops them after."""
    shim = build_shim(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "GGML_"))}
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for mib in sizes_mib:
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [str(bin_dir / SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
                    env={**env, "LD_PRELOAD": str(shim), "MTPSTUDIO_DEVICE_MIB": str(mib)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            ports.append(port)
        for port in ports:
            wait_listening(port)
        yield ports
    finally:
        for proc in procs:
            stop(proc)
