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
from mtpstudio.core.quoting.systemd import systemd_command_line, systemd_text
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.helper.shape_common import comment_wrap
from mtpstudio.helper.unit_shape import gpu_device_lines, sandbox_lines

RPC_SERVER_BINARY = Path("/usr/local/bin/ggml-rpc-server")
"""Where the unit expects the server on the other machine (llama.cpp's cmake installs it as
``ggml-rpc-server``; build it there with ``-DGGML_RPC=ON``)."""
UNIT_DIR = Path("/etc/systemd/system")

_HARDENING = (
    """\
# Hardening: the server needs its port and, for a CUDA device, the GPU device nodes; the file
# system is read-only (a cache of received tensors, with -c, would go to the cache folder).
DynamicUser=yes
SupplementaryGroups=video render
"""
    + sandbox_lines(protect_home="yes")
    + """\
CacheDirectory=mtpstudio-rpc
Environment=CUDA_CACHE_PATH=%C/mtpstudio-rpc
UMask=0077
"""
    + gpu_device_lines(amd=False)
)


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
    description = systemd_text(f"llama.cpp rpc-server {server.endpoint} (mtpstudio)")
    what = (
        f"# {name}: llama.cpp's rpc-server on {server.endpoint}, one device of an mtpstudio "
        "plan split over several machines (written by mtpstudio; install it on that machine)."
    )
    warning = comment_wrap(
        "Warning: rpc-server has no authentication; anyone who reaches this port can use the "
        "device and read its memory. Run it on a trusted network only, or let only the "
        "machine that runs llama-server through the firewall.",
        "# ",
        "#   ",
    )
    text = (
        f"{what}\n"
        f"{warning}\n"
        "\n"
        "[Unit]\n"
        f"Description={description}\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "StartLimitIntervalSec=600\n"
        "StartLimitBurst=3\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"ExecStart={systemd_command_line(argv)}\n"
        "Restart=on-failure\n"
        "RestartSec=15s\n"
        "TimeoutStopSec=30s\n"
        "\n"
        f"{_HARDENING}"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
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
