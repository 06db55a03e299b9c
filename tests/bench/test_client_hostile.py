"""A server that answers badly on purpose (real HTTP on loopback): an endless line, escape
codes in its error body, a number of 5,000 digits. The client reads a bounded amount, shows
control characters as escapes, and ends in one BenchError."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from support.servers import read_http_request

from mtpstudio.core.bench.client import MAX_LINE_BYTES, BenchClient
from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.errors import BenchError
from mtpstudio.core.plan.choices import EngineFlavour

CHUNK = b"x" * (1 << 20)


@dataclass
class Hostile:
    """One-connection-at-a-time HTTP server; ``answer`` picks what it sends."""

    answer: str
    sent: int = 0
    sock: socket.socket = field(default_factory=socket.socket)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                read_http_request(conn)
                with contextlib.suppress(OSError):  # the client hung up: what it read counts
                    self._send(conn)
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_WR)  # the answer ends here, cleanly

    def _send(self, conn: socket.socket) -> None:
        if self.answer == "endless":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ")
            for _ in range(512):  # 512 MiB unless the client stops reading
                conn.sendall(CHUNK)
                self.sent += len(CHUNK)
        elif self.answer == "escapes":
            body = b'{"error":{"message":"\\u001b]0;owned\\u0007\\u001b[2Jgone"}}'
            conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        else:  # a 5,000-digit number in every streamed chunk
            line = b'data: {"content":"a","tokens":[' + b"9" * 5000 + b"]}\n\n"
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            conn.sendall(head + line * 3)


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[Hostile]:
    server = Hostile(request.param)
    server.sock.bind(("127.0.0.1", 0))
    server.sock.listen()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server
    server.sock.close()


def _client(server: Hostile) -> BenchClient:
    return BenchClient(BenchTarget(base_url=server.url, flavour=EngineFlavour.UPSTREAM), 30.0)


@pytest.mark.parametrize("hostile", ["endless"], indirect=True)
def test_an_endless_line_is_cut_off(hostile: Hostile) -> None:
    with _client(hostile) as client, pytest.raises(BenchError, match="longer than 16 MiB"):
        client.complete("code_python", "hi", 8)
    assert hostile.sent < 4 * MAX_LINE_BYTES  # it stopped reading (socket buffers aside)


@pytest.mark.parametrize("hostile", ["escapes"], indirect=True)
def test_an_error_body_shows_its_escape_codes(hostile: Hostile) -> None:
    with _client(hostile) as client, pytest.raises(BenchError) as caught:
        client.complete("code_python", "hi", 8)
    text = str(caught.value)
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;owned\\x07" in text


@pytest.mark.parametrize("hostile", ["digits"], indirect=True)
def test_numbers_python_cannot_read_end_in_one_error(hostile: Hostile) -> None:
    with _client(hostile) as client, pytest.raises(BenchError, match="without its timings"):
        client.complete("code_python", "hi", 8)
