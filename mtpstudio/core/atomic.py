"""Atomic file writes: readers see the old file or the new one, never a partial one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mtpstudio.core.errors import MtpStudioError


class WriteError(MtpStudioError):
    """A file could not be written."""


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries: a rename is durable only once its folder is synced."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path``: temp file in the same folder, fsync, rename, fsync the folder."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_dir(folder)
    except OSError as exc:
        raise WriteError(
            f"cannot write {path}: {exc.strerror or exc}",
            hint="Choose a folder you can write to.",
        ) from None


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write UTF-8 ``text`` atomically (see ``write_bytes_atomic``)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode)
