"""The other machine's side of an RPC plan: ``rpc-server`` as a hardened system unit of its own.

Exported with the plan (never installed here: it belongs on the machine the endpoint names).
The unit runs llama.cpp's ``ggml-rpc-server`` bound to the endpoint's address and port, as an
unprivileged dynamic user, with the GPU device nodes open for a CUDA server and everything else
closed. rpc-server has no authentication of its own: anyone who reaches the port can run graphs
on the device and read its memory, so the unit says so and the README asks for a trusted
network (or a firewall rule that lets only the planning machine in).
"""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.plan.schema import RpcServer
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.helper.templating import render_template

RPC_SERVER_BINARY = Path("/usr/local/bin/ggml-rpc-server")
"""Where the unit expects the server on the other machine (llama.cpp's cmake installs it as
``ggml-rpc-server``; build it there with ``-DGGML_RPC=ON``)."""
UNIT_DIR = Path("/etc/systemd/system")


def rpc_unit_name(server: RpcServer) -> str:
    return f"mtpstudio-rpc-server-{server.port}.service"


def render_rpc_server_unit(
    server: RpcServer, binary: Path = RPC_SERVER_BINARY, *, threads: int | None = None
) -> RenderedFile:
    """The unit that runs ``rpc-server`` on the machine ``server`` names, at its address and
    port (``-H``, ``-p``); ``threads`` for a CPU device (``-t``)."""
    argv = [str(binary), "-H", server.host, "-p", str(server.port)]
    if threads is not None:
        argv += ["-t", str(threads)]
    name = rpc_unit_name(server)
    text = render_template(
        "units/rpc-server.service.j2", unit_name=name, endpoint=server.endpoint, argv=argv
    )
    return RenderedFile(
        name=name,
        text=text,
        mode=0o644,
        install_path=UNIT_DIR / name,
        explanation=(
            f"for the machine at {server.host}: a system unit that runs rpc-server on port "
            f"{server.port} (install it there, not here)"
        ),
        privileged=True,
        warnings=(
            f"rpc-server on {server.endpoint} has no authentication: keep that port on a "
            "trusted network.",
        ),
    )
