"""Checks before a server starts: binary, model (a readable GGUF) and a free port."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from mtpstudio.core.errors import GgufError, ServerError
from mtpstudio.core.model.file_state import require_whole_model
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.server import procfs
from mtpstudio.core.server.health import connect_host


def check_binary(path: Path) -> None:
    """The engine binary exists and may be executed."""
    if not path.exists():
        raise ServerError(
            f"the engine binary {path} does not exist",
            hint="Run `mtpstudio detect` to list the llama-server builds found, and put one "
            "in the plan (engine.binary).",
        )
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ServerError(
            f"the engine binary {path} is not an executable file",
            hint="Point the plan at the llama-server program itself (chmod +x if needed).",
        )


def check_model(path: Path, role: str = "model") -> ModelInfo:
    """The GGUF exists, can be read, has a valid header and all its tensor data; returns its
    facts.

    Raises:
        ServerError: one sentence naming the file and what is wrong with it.
    """
    if not path.exists():
        raise ServerError(
            f"the {role} file {path} does not exist",
            hint="Check the path in the plan (a moved or renamed download?).",
        )
    if path.is_dir():
        raise ServerError(f"the {role} path {path} is a folder, not a GGUF file")
    if not os.access(path, os.R_OK):
        raise ServerError(
            f"the {role} file {path} cannot be read (permission denied)",
            hint="Give your user read access to it (chmod a+r, or check its folder).",
        )
    try:
        info = read_model_info(path)
    except GgufError as exc:
        raise ServerError(
            f"the {role} file {path} is not a usable GGUF model: {exc}",
            hint=exc.hint or "Download the file again; it may be truncated or not a GGUF.",
        ) from None
    try:
        require_whole_model(info, path, role)
    except GgufError as exc:
        raise ServerError(str(exc), hint=exc.hint) from None
    return info


def port_owner(port: int) -> str | None:
    """'llama-server (pid 123)' for the process listening on ``port``, when it can be seen."""
    pid = procfs.port_owner(port)
    if pid is None:
        return None
    name = procfs.process_name(pid)
    return f"{name} (pid {pid})" if name else f"pid {pid}"


def check_port(host: str, port: int) -> None:
    """Nothing listens on ``host:port``: a test bind with SO_REUSEADDR (so sockets left in
    TIME_WAIT by a previous server do not count) must succeed.

    Raises:
        ServerError: the port is taken (naming the owner when visible) or the address is not
            one of this machine's.
    """
    addr = connect_host(host) if host in ("0.0.0.0", "::") else host
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    bind_host = "" if host in ("0.0.0.0", "::") else host
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind_host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                owner = port_owner(port)
                who = f" by {owner}" if owner else ""
                raise ServerError(
                    f"port {port} on {host} is already in use{who}",
                    hint="Stop that program (`mtpstudio server stop` if it is ours) or choose "
                    "another port in the plan (server.port / --port).",
                ) from None
            if exc.errno in (errno.EADDRNOTAVAIL, socket.EAI_NONAME):
                raise ServerError(
                    f"{host} is not an address of this machine, so the server cannot listen on it",
                    hint="Use 127.0.0.1 (this computer only) or 0.0.0.0 (all interfaces).",
                ) from None
            if exc.errno == errno.EACCES:
                raise ServerError(
                    f"port {port} needs root to listen on",
                    hint="Choose a port above 1023.",
                ) from None
            raise ServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        except socket.gaierror as exc:
            raise ServerError(f"the listen address {host!r} is not valid: {exc}") from None
