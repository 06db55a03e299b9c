"""An rpc-server is probed before a plan uses it: a real one on loopback (the pinned engine's
``ggml-rpc-server``, reporting a chosen memory size) answers with its memory; an unreachable,
silent or lying endpoint is one sentence, in bounded time, and nothing is recorded."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devkit.rpc_servers import free_port, rpc_servers
from mtpstudio.core.detect.rpc import RpcProbeError, parse_endpoint, plan_entry, probe_rpc
from mtpstudio.core.units import MIB

TIMEOUT = 1.5


@pytest.mark.parametrize(
    ("name", "protocol"), [("upstream-rpc", (7, 0, 0)), ("upstream-b11549", (8, 0, 0))]
)
def test_a_real_rpc_server_reports_the_memory_it_has(
    engine: Callable[..., Path], tmp_path: Path, name: str, protocol: tuple[int, int, int]
) -> None:
    """Each era's own ggml-rpc-server: b11434 speaks protocol 7.0.0, b11549 8.0.0, and the
    probe reads both (the plan records which)."""
    bin_dir = engine(name).parent
    with rpc_servers(bin_dir, [3000], tmp_path) as (port,):
        report = probe_rpc("127.0.0.1", port)
    assert report.version == protocol
    (device,) = report.devices
    assert device.total_bytes == device.free_bytes == 3000 * MIB
    assert device.backend == "CPU"  # a CPU device aligns its buffers to 32 bytes
    assert plan_entry(report) == {
        "host": "127.0.0.1",
        "port": port,
        "memory_mib": 3000,
        "free_mib": 3000,
        "backend": "CPU",
        "protocol": list(protocol),
    }


def test_an_endpoint_nobody_listens_on_is_one_sentence() -> None:
    port = free_port()
    with pytest.raises(RpcProbeError) as caught:
        probe_rpc("127.0.0.1", port, TIMEOUT)
    said = str(caught.value)
    assert said == f"the RPC endpoint 127.0.0.1:{port} cannot be reached (connection refused)"
    assert "rpc-server" in (caught.value.hint or "")


@pytest.mark.parametrize("text", ["host", "host:", ":50052", "a b:1", "host:70000", "-x:1"])
def test_a_malformed_endpoint_is_refused_before_any_connection(text: str) -> None:
    with pytest.raises(RpcProbeError):
        parse_endpoint(text)


def _hello(version: tuple[int, int, int] = (7, 0, 0)) -> bytes:
    return struct.pack("<Q", 28) + bytes([*version, 0]) + bytes(24)


def _read_request(conn: socket.socket) -> None:
    head = b""
    while len(head) < 9:
        chunk = conn.recv(9 - len(head))
        if not chunk:
            return
        head += chunk
    (size,) = struct.unpack("<Q", head[1:])
    while size:
        size -= len(conn.recv(min(size, 4096)))


def _answers(*replies: bytes) -> Callable[[socket.socket], None]:
    """A server that reads each request and sends the next reply."""

    def serve(conn: socket.socket) -> None:
        for reply in replies:
            _read_request(conn)
            conn.sendall(reply)
        time.sleep(TIMEOUT * 2)

    return serve


def _silent(conn: socket.socket) -> None:
    time.sleep(TIMEOUT * 2)


def _closes(conn: socket.socket) -> None:
    conn.close()


def _trickles(conn: socket.socket) -> None:
    _read_request(conn)
    end = time.monotonic() + TIMEOUT * 2
    while time.monotonic() < end:
        try:
            conn.sendall(b"\x1c")  # one byte of the size at a time, never a whole answer
        except OSError:
            return
        time.sleep(0.5)


COUNT_1 = struct.pack("<QI", 4, 1)
LIARS: dict[str, tuple[Callable[[socket.socket], None], str]] = {
    "silent": (_silent, "did not answer within the time allowed"),
    "closes at once": (_closes, "closed the connection"),
    "trickles": (_trickles, "did not answer within the time allowed"),
    "speaks HTTP": (
        _answers(b"HTTP/1.1 400 Bad Request\r\n\r\n"),
        "bytes where an rpc-server answers 28 (not an rpc-server",
    ),
    "an old protocol": (_answers(_hello((6, 1, 0))), "speaks RPC protocol 6.1.0"),
    "a future protocol": (_answers(_hello((9, 0, 0))), "mtpstudio knows 7.x and 8.x"),
    "no device": (_answers(_hello(), struct.pack("<QI", 4, 0)), "reported 0 devices"),
    "a million devices": (
        _answers(_hello(), struct.pack("<QI", 4, 1_000_000)),
        "reported 1,000,000 devices",
    ),
    "more free than it has": (
        _answers(_hello(), COUNT_1, struct.pack("<QQQ", 16, 8 << 30, 4 << 30)),
        "reported more free memory than it has on device 0 (8,192 of 4,096 MiB)",
    ),
    "an impossible size": (
        _answers(_hello(), COUNT_1, struct.pack("<QQQ", 16, 1 << 62, 1 << 62)),
        "which no device has",
    ),
    "a short memory answer": (
        _answers(_hello(), COUNT_1, struct.pack("<QQ", 8, 1 << 30)),
        "answered with 8 bytes where an rpc-server answers 16",
    ),
    "an odd alignment": (
        _answers(
            _hello(), COUNT_1, struct.pack("<QQQ", 16, 1 << 30, 1 << 30), struct.pack("<QQ", 8, 3)
        ),
        "reported a buffer alignment of 3 bytes",
    ),
}


@pytest.fixture
def liar() -> Iterator[Callable[[Callable[[socket.socket], None]], int]]:
    """A loopback server that behaves as told with every connection; yields a starter."""
    listeners: list[socket.socket] = []

    def start(behave: Callable[[socket.socket], None]) -> int:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listeners.append(listener)

        def loop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn, contextlib.suppress(OSError):
                    behave(conn)

        threading.Thread(target=loop, daemon=True).start()
        return int(listener.getsockname()[1])

    yield start
    for listener in listeners:
        listener.close()


@pytest.mark.parametrize("kind", list(LIARS))
def test_a_silent_or_lying_endpoint_is_one_sentence_in_bounded_time(
    kind: str, liar: Callable[[Callable[[socket.socket], None]], int]
) -> None:
    behave, words = LIARS[kind]
    port = liar(behave)
    started = time.monotonic()
    with pytest.raises(RpcProbeError) as caught:
        probe_rpc("127.0.0.1", port, TIMEOUT)
    said = str(caught.value)
    assert words in said
    assert said.startswith(f"the RPC endpoint 127.0.0.1:{port} ") and "\n" not in said
    assert time.monotonic() - started < TIMEOUT + 1.0


def test_detection_counts_rpc_only_for_a_build_with_the_rpc_backend(
    engine: Callable[..., Path],
) -> None:
    """``--rpc`` is never probed with ``--version`` (upstream connects while parsing it); the
    RPC build's file holds the backend, a build without it does not (the test bench's ik is
    built without RPC, and its parser takes ``--rpc`` anyway)."""
    from mtpstudio.core.detect.engines import probe_engine_file
    from mtpstudio.core.engines.build import Backend
    from mtpstudio.core.runner import SubprocessRunner

    rpc = probe_engine_file(engine("upstream-rpc"), SubprocessRunner(), use_cache=False)
    plain = probe_engine_file(engine("ik"), SubprocessRunner(), use_cache=False)
    assert Backend.RPC in rpc.backends and "--rpc" in rpc.accepted_flags
    assert Backend.RPC not in plain.backends and "--rpc" not in plain.accepted_flags
