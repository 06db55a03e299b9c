"""Test bench for the privileged helper: payloads, temp roots, tree snapshots, real runs.

The helper always runs as a real subprocess (``python -m mtpstudio.helper --root ROOT``), so
SIGKILL, exit codes and stderr are the program's own.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.desktop.session_files import (
    SessionSettings,
    SessionVariant,
    render_nvidia_profile,
    render_session_files,
)
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.render import UnitScope, render_service_files
from mtpstudio.helper.constants import TEMP_MARK
from support.argv import launch_spec

HELPER = [sys.executable, "-m", "mtpstudio.helper"]
SESSION = "plasmawayland-llvmpipe-mtpstudio.desktop"
WAYLAND_DIR = "/usr/local/share/wayland-sessions"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ARCH_PLASMA = FIXTURES / "desktop" / "arch-plasma6"
# Plasma 6's own session files as plasma-workspace 6.x installs them on Arch (the fixture);
# the helper takes a session's command from them.
PLASMA_SESSIONS = {
    "wayland-sessions": "/usr/share/wayland-sessions/plasma.desktop",
    "xsessions": "/usr/share/xsessions/plasmax11.desktop",
}


def helper_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PKEXEC_", "MTPSTUDIO_HELPER"))}
    env.update(extra or {})
    return env


def run_helper(
    root: Path | None,
    *args: str,
    payload: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    """One real helper run; ``root`` None runs it without ``--root``."""
    argv = [*HELPER, *(["--root", str(root)] if root is not None else []), *args]
    return subprocess.run(
        argv,
        input=payload if payload is not None else b"",
        capture_output=True,
        env=helper_env(env),
        timeout=timeout,
        check=False,
    )


IGPU_CARD = "/dev/dri/by-path/pci-0000:00:02.0-card"
SETTINGS = SessionSettings(igpu_card=IGPU_CARD, plasma_source=PLASMA_SESSIONS)
"""The settings ``desktop_facts`` gives for the Arch fixture (its Plasma's own commands)."""


def session_files(
    variant: SessionVariant = SessionVariant.WAYLAND_LLVMPIPE,
) -> dict[str, RenderedFile]:
    return render_session_files(variant, SETTINGS)


def session_params(
    session: SessionVariant = SessionVariant.WAYLAND_LLVMPIPE,
    /,
    *,
    vram: dict[str, object] | None = None,
    **override: object,
) -> dict[str, object]:
    """What mtpstudio hands the helper for ``install-session`` (``override`` changes keys)."""
    params = session_files(session)["desktop"].params
    assert params is not None
    data: dict[str, object] = dict(params)
    if vram is not None:
        data["desktop_vram"] = vram
    data.update(override)
    return data


def session_payload(
    session: SessionVariant = SessionVariant.WAYLAND_LLVMPIPE,
    /,
    *,
    vram: dict[str, object] | None = None,
    **override: object,
) -> bytes:
    return json.dumps(session_params(session, vram=vram, **override)).encode()


def install_plasma(root: Path) -> None:
    """Plasma's own session files below ``root`` (the Arch fixture's, owned by this user)."""
    for kind, path in PLASMA_SESSIONS.items():
        source = ARCH_PLASMA / "usr/share" / kind / path.rpartition("/")[2]
        if not source.is_file():  # the fixture has Plasma 6's X11 file as plasmax11.desktop
            source = ARCH_PLASMA / "usr/share/wayland-sessions/plasma.desktop"
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())


def unit_files(binary: str = "/opt/llama.cpp/bin/llama-server") -> dict[str, RenderedFile]:
    plan = plan_from_dict(
        {
            "model": {"path": "/home/alice/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"},
            "runtime": {"moe": "n_cpu_moe", "n_cpu_moe": 20},
        }
    )
    spec = launch_spec(plan, documented_build(plan.engine.flavour, Path(binary)))
    return render_service_files(plan, spec, scope=UnitScope.SYSTEM, user="alice")


def unit_params(
    binary: str = "/opt/llama.cpp/bin/llama-server", **override: object
) -> dict[str, object]:
    """What mtpstudio hands the helper for ``install-unit`` (``override`` changes keys)."""
    params = unit_files(binary)["unit"].params
    assert params is not None
    data: dict[str, object] = dict(params)
    data.update(override)
    return data


def unit_payload(binary: str = "/opt/llama.cpp/bin/llama-server", **override: object) -> bytes:
    return json.dumps(unit_params(binary, **override)).encode()


def nvidia_payload() -> tuple[str, bytes]:
    rendered = render_nvidia_profile()
    return rendered.name, json.dumps(rendered.params).encode()


def make_root(base: Path, *, plasma: bool = False) -> Path:
    """A system-like root: /var/lib exists (the helper does not invent /var/lib); with
    ``plasma``, Plasma's own session files too (a session takes its command from them)."""
    (base / "var" / "lib").mkdir(parents=True, exist_ok=True)
    if plasma:
        install_plasma(base)
    return base


@dataclass(frozen=True)
class Entry:
    kind: str
    data: bytes | None
    mode: int
    link: str | None = None
    stamp: tuple[int, int] | None = None  # (size, mtime_ns) of a file too big to keep


BIG_FILE = 16 * 1024 * 1024
"""Files above this size (sparse full-size models) are compared by size and mtime, not read."""


def snapshot(root: Path) -> dict[str, Entry]:
    """Every path below ``root`` with its type, content and mode (symlinks not followed); a
    file bigger than ``BIG_FILE`` by its size and modification time."""
    tree: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = Entry("link", None, 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                tree[rel] = Entry("dir", None, stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode) and st.st_size > BIG_FILE:
                stamp = (st.st_size, st.st_mtime_ns)
                tree[rel] = Entry("file", None, stat.S_IMODE(st.st_mode), stamp=stamp)
            elif stat.S_ISREG(st.st_mode):
                tree[rel] = Entry("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                tree[rel] = Entry("other", None, stat.S_IMODE(st.st_mode))
    return tree


def temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(f"*{TEMP_MARK}")]


def trace_points(root: Path, args: list[str], payload: bytes, trace: Path) -> list[str]:
    """The steps a run reaches, in order (the run really happens on ``root``)."""
    trace.unlink(missing_ok=True)
    result = run_helper(root, *args, payload=payload,
                        env={"MTPSTUDIO_HELPER_TRACE": str(trace)})  # fmt: skip
    assert result.returncode == 0, result.stderr
    return trace.read_text().split()
