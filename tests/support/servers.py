"""Start, health-wait and always reap real ``llama-server`` processes for tests.

A server is started in its own session, with a clean environment (no ``LLAMA_*``/``GGML_*``
variables, which upstream applies before argv), on a free loopback port, with stdout and stderr
merged into a log file that outlives the process. It dies with the Python thread that started
it (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so even ``kill -9`` of pytest leaves no orphan, and
every live server is stopped at interpreter exit. Stopping is terminate, wait, kill, reap.

Usable outside pytest (the orphan test runs it from a plain subprocess)::

    server = start_server(engine_binary("upstream"), model, ["-lv", "4"], log_dir=tmp)
    try:
        server.completion("Hello", n_predict=8)
    finally:
        server.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psutil

from mtpstudio.core.server.process import ProcessSpec, ServerProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_engines.py"
ENGINE_NAMES = ("upstream", "upstream-b11549", "ik", "upstream-rpc")
LOOPBACK = "127.0.0.1"

# Both engines print this when the port is taken (upstream SRV_ERR, ik fprintf to stderr).
_BIND_FAILURE = re.compile(r"couldn't bind")
_ENV_PREFIXES_DROPPED = ("LLAMA_", "GGML_")


class EngineMissingError(RuntimeError):
    """The engine build is not in the cache."""


class ServerStartError(RuntimeError):
    """llama-server exited or did not become healthy; the message carries the log tail."""

    def __init__(self, message: str, log_text: str = "", returncode: int | None = None) -> None:
        super().__init__(message)
        self.log_text = log_text
        self.returncode = returncode


# --------------------------------------------------------------------------------------------
# engine binaries


def _load_build_script() -> ModuleType:
    """scripts/build_engines.py as a module (its cache_root() and ENGINES are the truth)."""
    name = "_mtpstudio_build_engines"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BUILD_SCRIPT)
    if spec is None or spec.loader is None:
        raise EngineMissingError(f"cannot import {BUILD_SCRIPT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def engine_bin_dir(name: str) -> Path:
    """The cache folder holding ``name``'s binaries (honours ``MTPSTUDIO_ENGINE_CACHE``)."""
    if name not in ENGINE_NAMES:
        raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINE_NAMES)}")
    build = _load_build_script()
    return Path(build.cache_root()) / build.ENGINES[name].key / "bin"


def engine_binary(name: str, program: str = "llama-server") -> Path:
    """Path of ``program`` built for engine ``name``; raises EngineMissingError when absent."""
    path = engine_bin_dir(name) / program
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise EngineMissingError(
            f"{name} {program} not found at {path}. Build it with "
            f"`python3 scripts/build_engines.py {name}` (set MTPSTUDIO_ENGINE_CACHE to use "
            "another cache folder)."
        )
    return path


# --------------------------------------------------------------------------------------------
# process plumbing


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without LLAMA_*/GGML_* variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIXES_DROPPED)}
    env.update(extra or {})
    return env


def free_port(host: str = LOOPBACK) -> int:
    """A port that was free a moment ago (callers must still handle losing the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def has_flag(args: Sequence[str], *names: str) -> bool:
    """Whether any of ``names`` occurs in ``args`` (as ``-x`` or ``--xx=value``)."""
    return any(a in names or a.split("=", 1)[0] in names for a in args)


class _LiveServers:
    """Servers started by this interpreter, stopped at exit as a last resort."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[int, LlamaServer] = {}
        atexit.register(self.stop_all)

    def add(self, server: LlamaServer) -> None:
        with self._lock:
            self._servers[id(server)] = server

    def discard(self, server: LlamaServer) -> None:
        with self._lock:
            self._servers.pop(id(server), None)

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop(timeout=3.0)


LIVE_SERVERS = _LiveServers()


# --------------------------------------------------------------------------------------------
# the server object


@dataclass
class LlamaServer:
    """One llama-server process. Stop it with ``stop()`` (idempotent) or use it as a context.

    Spawning, dying with the starting thread, stopping and reaping are mtpstudio's own
    ``ServerProcess`` (core/server/process.py), so the tests run that code too.
    """

    engine: str
    binary: Path
    argv: list[str]
    host: str
    port: int
    log_path: Path
    process: ServerProcess
    started_at: float = field(default_factory=time.monotonic)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: the signal), None while it runs."""
        return self.process.poll()

    def alive(self) -> bool:
        return self.process.alive()

    def log_text(self) -> str:
        """Everything the process wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # ---- HTTP ---------------------------------------------------------------------------

    def get(self, path: str, timeout: float = 30.0, **kwargs: Any) -> httpx.Response:
        kwargs.setdefault("trust_env", False)  # loopback: never through an env proxy
        return httpx.get(self.base_url + path, timeout=timeout, **kwargs)

    def post(
        self, path: str, json: Any = None, timeout: float = 120.0, **kwargs: Any
    ) -> httpx.Response:
        kwargs.setdefault("trust_env", False)
        return httpx.post(self.base_url + path, json=json, timeout=timeout, **kwargs)

    def post_json(
        self, path: str, payload: Mapping[str, Any], timeout: float = 120.0
    ) -> dict[str, Any]:
        """POST ``payload`` and return the JSON body; on a non-200 answer raise with the body."""
        response = self.post(path, json=dict(payload), timeout=timeout)
        if response.status_code != 200:
            raise AssertionError(
                f"{self.engine} {path} answered HTTP {response.status_code}: {response.text[:2000]}"
                f"\n--- server log tail ---\n{self.log_tail(30)}"
            )
        body: dict[str, Any] = response.json()
        return body

    def completion(
        self, prompt: str, n_predict: int = 16, endpoint: str = "/completion", **fields: Any
    ) -> dict[str, Any]:
        """A greedy, non-streaming completion (``temperature`` 0 unless given)."""
        payload: dict[str, Any] = {"prompt": prompt, "temperature": 0.0, "cache_prompt": False}
        if endpoint.startswith("/v1/"):
            payload["max_tokens"] = n_predict
        else:
            payload["n_predict"] = n_predict
        payload.update(fields)
        return self.post_json(endpoint, payload)

    # ---- lifecycle ----------------------------------------------------------------------

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Poll GET /health until 200 from *this* process; raise ServerStartError otherwise.

        ik accepts TCP connections while loading but answers nothing, so each probe has a short
        timeout. A 200 only counts once this process owns a listening socket on the port (a
        stranger on a recycled port could otherwise answer).
        """
        deadline = time.monotonic() + timeout
        delay = 0.05
        last = "no answer yet"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise self._start_error(
                        f"exited with {_describe_exit(code)} before becoming healthy"
                    )
                try:
                    response = client.get(self.base_url + "/health")
                    last = f"HTTP {response.status_code}: {response.text[:200]}"
                    if response.status_code == 200 and self._owns_port():
                        return
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if time.monotonic() > deadline:
                    raise self._start_error(f"not healthy after {timeout:.0f} s (last: {last})")
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    def _owns_port(self) -> bool:
        try:
            conns = psutil.Process(self.pid).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return self.alive()
        return any(
            c.laddr and c.laddr.port == self.port and c.status == psutil.CONN_LISTEN for c in conns
        )

    def _start_error(self, what: str) -> ServerStartError:
        log = self.log_text()
        tail = "\n".join(log.splitlines()[-40:])
        return ServerStartError(
            f"{self.engine} llama-server {what}\nargv: {' '.join(self.argv)}\n"
            f"log: {self.log_path}\n--- log tail ---\n{tail}",
            log_text=log,
            returncode=self.returncode,
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, wait, SIGKILL if needed, reap. Returns the exit code."""
        try:
            return self.process.stop(grace=timeout).returncode
        finally:
            LIVE_SERVERS.discard(self)

    def kill(self) -> int | None:
        """SIGKILL the process group and reap, no grace period."""
        try:
            return self.process.kill().returncode
        finally:
            LIVE_SERVERS.discard(self)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"<LlamaServer {self.engine} pid={self.pid} {self.base_url} {state}>"


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    if code > 128:
        with contextlib.suppress(ValueError):
            return f"exit code {code} ({signal.Signals(code - 128).name}?)"
    return f"exit code {code}"


def _spawn(
    engine: str,
    binary: Path,
    argv: list[str],
    host: str,
    port: int,
    log_path: Path,
    env: Mapping[str, str],
) -> LlamaServer:
    # Own session, log file, dies with the starting thread (PR_SET_PDEATHSIG); ik writes
    # llama.log into its working folder, so that is the log's folder.
    spec = ProcessSpec(tuple(argv), env, log_path.parent, log_path, die_with_parent=True)
    server = LlamaServer(engine, binary, argv, host, port, log_path, ServerProcess.start(spec))
    LIVE_SERVERS.add(server)
    return server


def build_argv(
    binary: Path,
    model: Path | None,
    args: Iterable[str],
    host: str,
    port: int,
    threads: int | None,
    ctx_size: int | None,
    parallel: int | None,
) -> list[str]:
    """``binary -m M --host H --port P [-t T] [-c C] [-np N] *args``; args' own flags win."""
    extra = [str(a) for a in args]
    argv = [str(binary)]
    if model is not None:
        argv += ["-m", str(model)]
    argv += ["--host", host, "--port", str(port)]
    if threads is not None and not has_flag(extra, "-t", "--threads"):
        argv += ["-t", str(threads)]
    if ctx_size is not None and not has_flag(extra, "-c", "--ctx-size"):
        argv += ["-c", str(ctx_size)]
    if parallel is not None and not has_flag(extra, "-np", "--parallel"):
        argv += ["-np", str(parallel)]
    return argv + extra


def start_server(
    binary: str | Path,
    model: str | Path | None,
    args: Iterable[str] = (),
    *,
    log_dir: str | Path,
    engine: str | None = None,
    host: str = LOOPBACK,
    port: int | None = None,
    threads: int | None = 2,
    ctx_size: int | None = 512,
    parallel: int | None = 1,
    health_timeout: float = 120.0,
    attempts: int = 3,
    env: Mapping[str, str] | None = None,
    wait: bool = True,
) -> LlamaServer:
    """Start llama-server and (by default) wait until /health answers 200.

    Args:
        binary: the llama-server executable.
        model: ``-m`` value, or None to pass none (give it in ``args``).
        args: further flags, appended last; ``threads``/``ctx_size``/``parallel`` defaults are
            left out when ``args`` already sets ``-t``/``-c``/``-np``.
        log_dir: where ``<engine>-<port>[-attemptN].log`` is written (kept after the stop).
        engine: label for logs and errors (default: guessed from the binary path).
        port: first port to try (default: a free one); later attempts always take a free one.
        attempts: how many ports to try when the port is lost to a race ("couldn't bind").
        env: extra environment on top of the cleaned one.
        wait: False returns right after spawning (no health wait, no retry).

    Raises:
        ServerStartError: the process exited early or never became healthy (log tail included).
    """
    binary = Path(binary)
    label = engine or _guess_engine(binary)
    log_dir = Path(log_dir)
    full_env = clean_env(env)
    errors: list[str] = []
    for attempt in range(1, max(1, attempts) + 1):
        this_port = port if (port is not None and attempt == 1) else free_port(host)
        argv = build_argv(
            binary,
            None if model is None else Path(model),
            args,
            host,
            this_port,
            threads,
            ctx_size,
            parallel,
        )
        suffix = "" if attempt == 1 else f"-attempt{attempt}"
        log_path = _unique(log_dir / f"{label}-{this_port}{suffix}.log")
        server = _spawn(label, binary, argv, host, this_port, log_path, full_env)
        if not wait:
            return server
        try:
            server.wait_healthy(health_timeout)
            return server
        except ServerStartError as exc:
            server.kill()
            if _BIND_FAILURE.search(exc.log_text) and attempt < attempts:
                errors.append(f"port {this_port} taken")
                continue
            raise
        except BaseException:
            server.kill()
            raise
    raise ServerStartError("; ".join(errors))  # pragma: no cover - loop always returns/raises


def _unique(path: Path) -> Path:
    n = 1
    candidate = path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
    return candidate


def _guess_engine(binary: Path) -> str:
    """The build's name ('ik', 'upstream-b11549', 'upstream') from the build cache's folder
    names (the longest that matches), else the file name."""
    for part in reversed(binary.parts):
        for name in sorted(ENGINE_NAMES, key=len, reverse=True):
            if part.startswith(name + "-"):
                return name
    return binary.name


def pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (exited, or a zombie waiting for its reaper)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_http_request(conn: socket.socket) -> str:
    """Read a whole HTTP request (headers and body) from ``conn``, so that closing it never
    resets the connection under a client still sending; returns its method."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return ""
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return head.split(b" ", 1)[0].decode(errors="replace")
