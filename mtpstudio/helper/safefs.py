"""File steps that never follow a symbolic link: directory fds, O_NOFOLLOW, atomic replace.

Every path below the root is walked one component at a time with ``O_NOFOLLOW|O_DIRECTORY``
relative to the previous directory's fd, so a symlink anywhere on the way is refused, and a
directory swapped for a symlink after the walk cannot redirect a write (the fd still names
the original directory). Files are replaced with a temp file in the same directory, fsync,
``rename`` and an fsync of the directory.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from mtpstudio.helper.constants import TEMP_MARK
from mtpstudio.helper.faults import Faults

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Refused(Exception):
    """The helper will not do this; the message is one line saying why."""


def components(rel: str) -> list[str]:
    """The parts of a root-relative path; ``..``, ``.`` and empty parts are refused."""
    parts = rel.strip("/").split("/") if rel.strip("/") else []
    for part in parts:
        if part in {"", ".", ".."}:
            raise Refused(f"the path {rel!r} contains '{part}'")
    return parts


def open_root(path: str) -> int:
    """An fd for the root (``/`` or ``--root DIR``); the root itself may be reached by links."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused(f"the root {path} is not a usable directory ({exc.strerror})") from None


def _refuse_entry(parent_fd: int, name: str, shown: str) -> None:
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{shown} is a symbolic link")
    raise Refused(f"{shown} is not a directory")


def walk(root_fd: int, rel: str, *, create: bool = False, mode: int = 0o755) -> int | None:
    """An fd for directory ``rel`` below the root; None when missing (and ``create`` is off).

    Raises:
        Refused: a component is a symlink or not a directory.
    """
    parts = components(rel)
    fd = os.dup(root_fd)
    shown = ""
    try:
        for part in parts:
            shown += "/" + part
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    os.fsync(fd)
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.fchmod(nfd, mode)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    _refuse_entry(fd, part, shown)
                raise
            os.close(fd)
            fd = nfd
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


@contextmanager
def opened_dir(root_fd: int, rel: str, *, create: bool = False) -> Iterator[int | None]:
    """``walk`` as a context manager that closes the fd."""
    fd = walk(root_fd, rel, create=create)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def entry_stat(dir_fd: int, name: str) -> os.stat_result | None:
    """lstat of ``name`` in the directory, None when absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def check_regular_or_absent(dir_fd: int, name: str, shown: str) -> os.stat_result | None:
    """Refuse a symlink or any non-regular file where a file is to be written."""
    st = entry_stat(dir_fd, name)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{shown} is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{shown} is not a regular file")
    return st


def read_regular(dir_fd: int, name: str, shown: str, limit: int) -> bytes | None:
    """The bytes of a regular file (None when absent); links and devices are refused."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{shown} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{shown} is not a regular file")
        if st.st_size > limit:
            raise Refused(f"{shown} is larger than {limit} bytes")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def stage_file(
    dir_fd: int, name: str, data: bytes, mode: int, faults: Faults, owner: tuple[int, int] | None
) -> str:
    """Write ``data`` into a new temp file next to ``name`` (fsynced); returns the temp's name.

    This is the step that needs free space; ``commit_staged`` then only renames.
    """
    tmp = f".{name}.{secrets.token_hex(4)}{TEMP_MARK}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=dir_fd)  # fmt: skip
    try:
        try:
            faults.point("temp-created")
            half = len(data) // 2
            _write_all(fd, data[:half])
            faults.point("temp-half-written")
            _write_all(fd, data[half:])
            faults.point("temp-written")
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
            os.fsync(fd)
            faults.point("temp-synced")
        finally:
            os.close(fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return tmp


def commit_staged(dir_fd: int, tmp: str, name: str, shown: str, faults: Faults) -> None:
    """Rename a staged temp file over ``name`` and fsync the directory.

    The target is checked again just before the rename; a symlink swapped in meanwhile is
    refused, and ``rename`` replaces a directory entry without ever following it.
    """
    try:
        check_regular_or_absent(dir_fd, name, shown)
        faults.point("before-rename")
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    faults.point("renamed")
    os.fsync(dir_fd)
    faults.point("dir-synced")


def write_atomic(
    dir_fd: int,
    name: str,
    data: bytes,
    mode: int,
    shown: str,
    faults: Faults,
    owner: tuple[int, int] | None = None,
) -> None:
    """Replace ``name`` with ``data``: temp file, fsync, rename, fsync the directory."""
    tmp = stage_file(dir_fd, name, data, mode, faults, owner)
    commit_staged(dir_fd, tmp, name, shown, faults)


def unlink_file(dir_fd: int, name: str, shown: str, faults: Faults) -> None:
    """Remove a regular file (a link or a directory is refused), then fsync the directory."""
    if check_regular_or_absent(dir_fd, name, shown) is None:
        return
    faults.point("before-unlink")
    os.unlink(name, dir_fd=dir_fd)
    faults.point("unlinked")
    os.fsync(dir_fd)
    faults.point("dir-synced")


def sweep_temp_files(dir_fd: int) -> None:
    """Remove the helper's own temp files left by an interrupted run (regular files only)."""
    for entry in os.listdir(dir_fd):
        if entry.startswith(".") and entry.endswith(TEMP_MARK):
            st = entry_stat(dir_fd, entry)
            if st is not None and stat.S_ISREG(st.st_mode):
                os.unlink(entry, dir_fd=dir_fd)


def remove_empty_dir(root_fd: int, rel: str) -> None:
    """rmdir ``rel`` if it is an empty directory (nothing else is touched)."""
    parts = components(rel)
    if not parts:
        return
    with opened_dir(root_fd, "/".join(parts[:-1])) as parent:
        if parent is None:
            return
        st = entry_stat(parent, parts[-1])
        if st is None or not stat.S_ISDIR(st.st_mode):
            return
        try:
            os.rmdir(parts[-1], dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
            return
        os.fsync(parent)
