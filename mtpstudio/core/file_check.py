"""Path arguments are stat'ed and sniffed before they are read: a model given as a plan is named."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from mtpstudio.core.errors import PlanError
from mtpstudio.core.units import GIB, MIB

GGUF_MAGIC = b"GGUF"
PLAN_MAX_BYTES = 1 * MIB
"""A plan is a few KB of JSON; a bigger file is refused before it is read."""


def _size_text(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.1f} GiB" if n_bytes >= GIB else f"{n_bytes / MIB:.1f} MiB"


def read_plan_bytes(path: Path) -> bytes:
    """The bytes of plan file ``path``, after checking what the path is.

    A folder, a device or FIFO, a GGUF model and anything over ``PLAN_MAX_BYTES`` are refused
    without reading more than the first four bytes.

    Raises:
        PlanError: one sentence naming the path, what it is and what to run instead.
    """
    try:
        st = os.stat(path)  # before open(): opening a FIFO would block
    except FileNotFoundError:
        raise PlanError(f"plan file {path} does not exist") from None
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PlanError(f"plan file {path} is a folder, not a plan file")
    if not stat.S_ISREG(st.st_mode):
        raise PlanError(f"plan file {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(GGUF_MAGIC))
            if head == GGUF_MAGIC:
                quoted = shlex.quote(str(path))
                raise PlanError(
                    f"{path} is a GGUF model ({_size_text(st.st_size)}), not a plan file",
                    hint=f"Give it as the model: `--model {quoted}` (add `--save plan.json` to "
                    "make a plan for it); in the window: Model page → Open GGUF….",
                )
            if st.st_size > PLAN_MAX_BYTES:
                raise PlanError(
                    f"{path} is {_size_text(st.st_size)}, too big to be a plan file (a plan is "
                    "a few KB of JSON)",
                    hint="Check the path: `mtpstudio plan … --save FILE` writes plan files.",
                )
            return head + f.read(PLAN_MAX_BYTES)
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror or exc}") from None
