"""Start a llama-server only as far as its load log: wait for 'model loaded', then stop it
(a caller may look at the loaded server first: ``while_loaded``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_READY = ("main: model loaded", "server is listening", "llama_server: listening")
_DROPPED_ENV = ("LLAMA_", "GGML_")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate, wait, kill, reap: the server never outlives the probe."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def load_log(
    binary: Path,
    model: Path,
    args: Sequence[str],
    log_path: Path,
    *,
    timeout: float = 300.0,
    while_loaded: Callable[[int, str], None] | None = None,
    env_extra: Sequence[tuple[str, str]] = (),
) -> tuple[str, bool]:
    """Run ``binary -m model`` on a loopback port with ``args``; return (log text, loaded).

    ``loaded`` is False when the server exited or timed out before its model was loaded; the
    log then says why. ``while_loaded(pid, base_url)`` runs once the model is loaded, before
    the server is stopped (to read its memory, send it a request). ``env_extra`` is set for
    the server after the caller's ``LLAMA_*``/``GGML_*`` variables are dropped (an engine switch
    a load asks for on purpose, such as ``GGML_CUDA_DISABLE_GRAPHS=1``).
    """
    port = _free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    argv += [str(a) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV)}
    env.update(dict(env_extra))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    loaded = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=log_path.parent,
        )
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                text = log_path.read_text(errors="replace")
                if any(marker in text for marker in _READY):
                    loaded = True
                    break
                time.sleep(0.25)
            if loaded and while_loaded is not None:
                while_loaded(proc.pid, f"http://127.0.0.1:{port}")
        finally:
            _stop(proc)
    return log_path.read_text(errors="replace"), loaded
