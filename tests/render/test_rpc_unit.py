"""The other machine's side of an RPC plan: the exported rpc-server unit passes the real
``systemd-analyze verify`` and scores below the hardening target, and the llama-server unit of
a plan that must reach a remote rpc-server does not forbid it every address."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.rendering import unit_text
from support.systemd_checks import TARGET, exposure, tool

from mtpstudio.core.plan.schema import RpcServer
from mtpstudio.core.service.rpc_unit import render_rpc_server_unit

SERVER = RpcServer(host="192.168.1.20", port=50052, memory_mib=12288)


def test_the_rpc_server_unit_is_valid_and_hardened(tmp_path: Path) -> None:
    binary = tmp_path / "ggml-rpc-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    unit = render_rpc_server_unit(SERVER, binary)
    assert unit.name == "mtpstudio-rpc-server-50052.service"
    path = tmp_path / unit.name
    path.write_text(unit.text)
    verified = subprocess.run(
        [tool("systemd-analyze"), "verify", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    assert f"ExecStart={binary} -H 192.168.1.20 -p 50052" in unit.text
    assert "no authentication" in unit.text
    score, report = exposure(path)
    assert score <= TARGET, report


def test_a_unit_that_must_reach_a_remote_rpc_server_keeps_its_addresses_open(
    tmp_path: Path,
) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    local = unit_text(binary, device="rtx-4070-super")
    remote = unit_text(
        binary,
        device="rtx-4070-super",
        split={"rpc": [{"host": "192.168.1.20", "port": 50052, "memory_mib": 12288}]},
    )
    assert "IPAddressDeny=any" in local
    assert "IPAddressDeny=any" not in remote
    assert "--rpc 192.168.1.20:50052" in remote
    assert "must reach the rpc-server at 192.168.1.20:50052" in remote.replace("\n#   ", " ")
