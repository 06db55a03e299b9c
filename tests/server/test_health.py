"""The health wait: 503 while loading (upstream), silence (ik), exit, timeout; a real socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

from mtpstudio.core.server.health import (
    HealthAnswer,
    HealthState,
    probe_health,
    wait_healthy,
)


class Proc:
    def __init__(self, exit_after: int | None = None) -> None:
        self.polls = 0
        self.exit_after = exit_after

    def poll(self) -> int | None:
        self.polls += 1
        if self.exit_after is not None and self.polls > self.exit_after:
            return 1
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def answers(*items: HealthAnswer) -> Iterator[HealthAnswer]:
    yield from items
    while True:
        yield items[-1]


def run(proc: Proc, seq: Iterator[HealthAnswer], timeout: float = 10.0, owns: bool = True):  # type: ignore[no-untyped-def]
    clock = Clock()
    return wait_healthy(proc, "127.0.0.1", 1, timeout, probe=lambda h, p: next(seq),
                        owns_port=lambda: owns, clock=clock, sleep=clock.sleep)  # fmt: skip


LOADING = HealthAnswer(503, '{"error":{"code":503,"message":"Loading model"}}')
SILENT = HealthAnswer(None, "no answer (still loading)")
OK = HealthAnswer(200, '{"status":"ok"}')


def test_upstream_503_then_ok() -> None:
    result = run(Proc(), answers(LOADING, LOADING, OK))
    assert result.state is HealthState.HEALTHY and result.probes == 3


def test_ik_silence_then_ok() -> None:
    result = run(Proc(), answers(SILENT, SILENT, SILENT, OK))
    assert result.state is HealthState.HEALTHY and result.probes == 4


def test_exit_while_loading() -> None:
    result = run(Proc(exit_after=3), answers(SILENT))
    assert result.state is HealthState.EXITED and result.last == SILENT


def test_timeout_is_bounded() -> None:
    result = run(Proc(), answers(LOADING), timeout=2.0)
    assert result.state is HealthState.TIMEOUT
    assert 2.0 < result.seconds < 2.2


def test_a_stranger_answering_200_does_not_count() -> None:
    result = run(Proc(), answers(OK), timeout=1.0, owns=False)
    assert result.state is HealthState.TIMEOUT


def test_real_socket_that_accepts_but_never_answers() -> None:
    """Like ik while loading: TCP connects, no HTTP answer; the probe gives up quickly."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(5)
        port = server.getsockname()[1]
        answer = probe_health("127.0.0.1", port, timeout=0.2)
    assert answer.status is None and answer.detail == "no answer (still loading)"


def test_real_socket_refused_and_a_real_http_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert probe_health("127.0.0.1", port).detail == "connection refused"

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def answer_once() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                body = b'{"error":{"code":503,"message":"Loading model"}}'
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip

        t = threading.Thread(target=answer_once)
        t.start()
        answer = probe_health("127.0.0.1", port, timeout=2.0)
        t.join(5)
    assert answer.status == 503 and answer.loading and "Loading model" in answer.detail
