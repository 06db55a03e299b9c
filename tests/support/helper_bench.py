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

from mtpstudio.core.engines.registry import build_launch_spec, documented_build
from mtpstudio.core.plan import plan_from_dict
from mtpstudio.core.service.render import (
    RenderedFile,
    SessionVariant,
    UnitScope,
    render_nvidia_profile,
    render_service_files,
    render_session_files,
)
from mtpstudio.helper.constants import TEMP_MARK

HELPER = [sys.executable, "-m", "mtpstudio.helper"]
SESSION = "plasmawayland-llvmpipe-mtpstudio.desktop"
WAYLAND_DIR = "/usr/local/share/wayland-sessions"


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


def session_files(
    variant: SessionVariant = SessionVariant.WAYLAND_LLVMPIPE,
) -> dict[str, RenderedFile]:
    return render_session_files(variant)


def session_payload(
    variant: SessionVariant = SessionVariant.WAYLAND_LLVMPIPE,
    *,
    vram: dict[str, object] | None = None,
    **override: object,
) -> bytes:
    files = session_files(variant)
    data: dict[str, object] = {
        "sessions_dir": str(files["desktop"].install_path.parent),
        "desktop": files["desktop"].text,
        "wrapper_name": files["wrapper"].name,
        "wrapper": files["wrapper"].text,
    }
    if vram is not None:
        data["desktop_vram"] = vram
    data.update(override)
    return json.dumps(data).encode()


def unit_files(binary: str = "/opt/llama.cpp/bin/llama-server") -> dict[str, RenderedFile]:
    plan = plan_from_dict(
        {
            "model": {"path": "/home/alice/models/Qwen3.6-35B-A3B-IQ4_XS.gguf"},
            "runtime": {"moe": "n_cpu_moe", "n_cpu_moe": 20},
        }
    )
    spec = build_launch_spec(plan, documented_build(plan.engine.flavour, Path(binary)))
    return render_service_files(plan, spec, scope=UnitScope.SYSTEM, user="alice")


def unit_payload(binary: str = "/opt/llama.cpp/bin/llama-server", **override: object) -> bytes:
    files = unit_files(binary)
    data: dict[str, object] = {
        "unit": files["unit"].text,
        "env_name": files["env"].name,
        "env": files["env"].text,
    }
    data.update(override)
    return json.dumps(data).encode()


def nvidia_payload() -> tuple[str, bytes]:
    rendered = render_nvidia_profile()
    return rendered.name, rendered.text.encode()


def make_root(base: Path) -> Path:
    """A system-like root: /var/lib exists (the helper does not invent /var/lib)."""
    (base / "var" / "lib").mkdir(parents=True, exist_ok=True)
    return base


@dataclass(frozen=True)
class Entry:
    kind: str
    data: bytes | None
    mode: int
    link: str | None = None


def snapshot(root: Path) -> dict[str, Entry]:
    """Every path below ``root`` with its type, content and mode (symlinks not followed)."""
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
