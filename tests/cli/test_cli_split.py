"""`mtpstudio plan` over several devices, as a user runs it: `--gpu` and `--rpc` repeat, an
RPC endpoint is probed for real before the plan uses it, and an unreachable or lying one is one
sentence that changes nothing."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cli import run_cli

from devkit.rpc_servers import free_port, rpc_servers


def test_two_catalogue_gpus_give_two_bars_and_the_layer_split() -> None:
    shown = run_cli("plan", "--demo", "--gpu", "rtx-4070-super", "--gpu", "rtx-3060-12gb", "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    devices = data["devices"]
    assert [d["id"] for d in devices] == ["CUDA0", "CUDA1"]
    assert all(d["segments"]["weights"] > 0 and d["segments"]["kv_cache"] > 0 for d in devices)
    assert devices[1]["segments"]["desktop"] == 0  # the display is on the first card
    split = data["split"]
    assert split["devices"][1]["output_layer"]
    assert set(split["devices"][0]["blocks"]).isdisjoint(split["devices"][1]["blocks"])
    argv = data["argv"]
    assert argv[argv.index("-sm") + 1] == "layer" and "-ts" not in argv  # the fit decides
    text = run_cli("plan", "--demo", "--gpu", "rtx-4070-super", "--gpu", "rtx-3060-12gb")
    assert "Split over 2 devices" in text.stdout and "CUDA1" in text.stdout


def test_an_unreachable_rpc_endpoint_is_one_sentence_and_nothing_is_saved(tmp_path: Path) -> None:
    port = free_port()
    saved = tmp_path / "plan.json"
    shown = run_cli("plan", "--demo", "--rpc", f"127.0.0.1:{port}", "--save", str(saved))
    assert shown.returncode == 2
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"mtpstudio: the RPC endpoint 127.0.0.1:{port} cannot be reached")
    assert not saved.exists()


@pytest.fixture
def lying_endpoint() -> Iterator[int]:
    """A loopback server that answers HELLO as an rpc-server, then claims 1,000 devices."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(33)
                    conn.sendall((28).to_bytes(8, "little") + bytes([7, 0, 0, 0]) + bytes(24))
                    conn.recv(9)
                    conn.sendall((4).to_bytes(8, "little") + (1000).to_bytes(4, "little"))
                    conn.recv(64)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    yield int(listener.getsockname()[1])
    listener.close()


def test_a_lying_rpc_endpoint_is_one_sentence_and_changes_nothing(
    lying_endpoint: int, tmp_path: Path
) -> None:
    saved = tmp_path / "plan.json"
    saved.write_text("{}")  # an earlier plan stays as it was
    shown = run_cli("plan", "--demo", "--rpc", f"127.0.0.1:{lying_endpoint}", "--save", str(saved))
    assert shown.returncode == 2
    (line,) = shown.stderr.strip().splitlines()
    assert "reported 1,000 devices" in line
    assert saved.read_text() == "{}"


def test_a_real_rpc_server_is_probed_and_its_memory_planned(
    engine: Callable[..., Path], tmp_path: Path
) -> None:
    """The pinned engine's rpc-server reporting 3,000 MiB; the plan records what it said, and
    the RPC build (its RPC backend found in its file) gets --rpc on its command line."""
    server = engine("upstream-rpc")
    saved = tmp_path / "plan.json"
    with rpc_servers(server.parent, [3000], tmp_path / "shim") as (port,):
        shown = run_cli(
            "plan", "--demo", "--gpu", "cpu", "--rpc", f"127.0.0.1:{port}",
            "--engine", str(server), "--save", str(saved), "--json",
        )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [d["id"] for d in data["devices"]] == ["RPC0"]
    assert data["devices"][0]["total_bytes"] == 3000 * 1024 * 1024
    argv = data["argv"]
    assert argv[argv.index("--rpc") + 1] == f"127.0.0.1:{port}" and "-ngl" not in argv
    assert not any("RPC backend" in w for w in data["warnings"])
    plan = json.loads(saved.read_text())
    assert plan["split"]["rpc"] == [
        {"host": "127.0.0.1", "port": port, "memory_mib": 3000, "free_mib": 3000,
         "backend": "CPU", "protocol": [7, 0, 0]}  # b11434's rpc-server
    ]  # fmt: skip


def test_an_rpc_size_given_by_hand_is_planned_without_reaching_the_machine() -> None:
    port = free_port()  # nobody listens: a size given is not probed
    shown = run_cli("plan", "--demo", "--gpu", "rtx-4070-super", "--rpc",
                    f"192.0.2.7:{port}=8192", "--json")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [d["id"] for d in data["devices"]] == ["RPC0", "CUDA0"]  # RPC servers come first
    assert data["devices"][0]["total_bytes"] == 8192 * 1024 * 1024
    assert any("cross the network" in w for w in data["warnings"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tensor-split", "1,2,3"], "the tensor split names 3 devices; the plan has 2"),
        (["--tensor-split", "1,x"], "is not a list of whole numbers"),
        (["--fit-margin", "512,256,128"], "fit margins name 3 devices; the plan has 2"),
        (["--rpc", "nohost"], "is not an RPC endpoint"),
    ],
)
def test_bad_split_options_are_one_sentence(args: list[str], expected: str) -> None:
    shown = run_cli("plan", "--demo", "--gpu", "rtx-4070-super", "--gpu", "rtx-3060-12gb", *args)
    assert shown.returncode == 2
    (line,) = shown.stderr.strip().splitlines()
    assert expected in line


def test_detect_probes_an_rpc_server_and_says_what_it_reports(
    engine: Callable[..., Path], tmp_path: Path
) -> None:
    with rpc_servers(engine("upstream-rpc").parent, [2048], tmp_path) as (port,):
        shown = run_cli("detect", "--rpc", f"127.0.0.1:{port}")
        as_json = run_cli("detect", "--rpc", f"127.0.0.1:{port}", "--json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == (
        f"127.0.0.1:{port}: rpc-server 7.0.0, 1 device: CPU, 2,048 MiB (2,048 free)"
    )
    assert json.loads(as_json.stdout)[0]["memory_mib"] == 2048
    gone = run_cli("detect", "--rpc", f"127.0.0.1:{port}")  # stopped now
    assert gone.returncode == 2 and "cannot be reached" in gone.stderr
