"""A path given where a small file belongs is sniffed first: a GGUF model is named, not read."""

from __future__ import annotations

import errno
import os
import shlex
import stat
from pathlib import Path

from mtpstudio.core.errors import PlanError
from mtpstudio.core.units import GIB, MIB

GGUF_MAGIC = b"GGUF"


def _size_text(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.1f} GiB" if n_bytes >= GIB else f"{n_bytes / MIB:.1f} MiB"


def refuse_model_as(path: Path, what: str) -> None:
    """Raise when ``path`` is a GGUF model, reading its first four bytes only.

    Anything else (no such file, a folder, a FIFO, a file too big) is left to the reader that
    follows (``state_files.read_json``), which says so itself; opening is non-blocking, so a
    FIFO at the path never hangs here.

    Raises:
        PlanError: ``path`` is a GGUF model: one sentence with its size and what to run instead.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
            return
        raise PlanError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        head = os.read(fd, len(GGUF_MAGIC)) if stat.S_ISREG(st.st_mode) else b""
    except OSError:
        return  # the reader that follows says what is wrong
    finally:
        os.close(fd)
    if head == GGUF_MAGIC:
        quoted = shlex.quote(str(path))
        raise PlanError(
            f"{path} is a GGUF model ({_size_text(st.st_size)}), not a {what}",
            hint=f"Give it as the model: `--model {quoted}` (add `--save plan.json` to make a "
            "plan for it); in the window: Model page → Open GGUF….",
        )
