"""Download a remote model: resumable, checked against the Hub's checksum, renamed only when whole.

Each file is written as ``NAME.part`` (with ``NAME.part.json`` saying which remote file and
checksum it belongs to) and renamed to ``NAME`` only after its size and checksum match: the
SHA-256 the Hub publishes for LFS files (``X-Linked-Etag``), the git blob id for small files.
An interrupted or cancelled download keeps its ``.part``; the next run resumes it with an
HTTP range from the part's size. Free space is checked before the first byte. Every file in the
folder is opened without following links and must be a regular file the user owns (a planted
``.part`` link is refused, never appended to); the folder must be the user's own.

Threading: ``download_model`` runs on one (worker) thread; ``progress`` is called on that
thread; ``cancel`` may be set from any thread.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, Protocol

from mtpstudio.core.cancel import CancelToken
from mtpstudio.core.errors import HubError
from mtpstudio.core.hub.client import HubClient, RemoteFile, Repo, StreamBroken
from mtpstudio.core.hub.listing import RemoteModel, size_text
from mtpstudio.core.units import MIB

__all__ = [
    "FREE_SPACE_MARGIN",
    "PART_SUFFIX",
    "DownloadProgress",
    "DownloadResult",
    "download_model",
]

PART_SUFFIX: Final = ".part"
FREE_SPACE_MARGIN: Final = 256 * MIB
"""Left free on the disk besides the download itself."""

_REPORT_EVERY_S: Final = 0.1
_HASH_CHUNK: Final = 4 * MIB


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class DownloadProgress:
    """Where a download stands: ``phase`` is ``checking`` (hashing what an earlier run kept)
    or ``downloading``; ``done`` of ``total`` bytes of the whole model are held."""

    phase: str
    file: str
    done: int
    total: int
    fetched: int
    elapsed_s: float

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    @property
    def rate(self) -> float:
        """Bytes per second fetched in this run."""
        return self.fetched / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class DownloadResult:
    """The model's verified files (first part first), and what this run did."""

    paths: tuple[Path, ...]
    kept_bytes: int
    fetched_bytes: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Expected:
    """The remote file's identity: size and checksum (``sha256`` or ``git-sha1``)."""

    path: str
    size: int
    kind: str
    digest: str
    commit: str | None

    def hasher(self) -> _Hasher:
        if self.kind == "sha256":
            return hashlib.sha256()
        h = hashlib.sha1(usedforsecurity=False)
        h.update(b"blob %d\0" % self.size)
        return h

    def sidecar(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, self.kind: self.digest}


@dataclass
class _Counters:
    """Bytes of the model held and fetched so far, and when progress was last reported."""

    done: int
    fetched: int = 0
    reported_at: float = 0.0


_Report = Callable[[str, str], None]


class _Folder:
    """A download folder as an open directory: every name in it is opened without following a
    link, and must be a regular file (or folder) this user owns.

    Raises HubError for anything else (a planted link, a FIFO, another user's file).
    """

    def __init__(self, fd: int, shown: Path) -> None:
        self.fd = fd
        self.shown = shown

    @classmethod
    def at(cls, path: Path) -> _Folder:
        """The folder ``path`` (created when missing; a link to it is the user's own choice),
        which must be a folder this user owns."""
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise HubError(
                f"cannot use {path} as the download folder: {exc.strerror or exc}",
                hint="Choose a folder you can write to.",
            ) from None
        folder = cls(fd, path)
        folder._owned(os.fstat(fd), path, "folder")
        return folder

    def sub(self, rel: str) -> _Folder:
        """The sub-folder ``rel`` (``a/b``), created when missing, never through a link."""
        fd, shown = os.dup(self.fd), self.shown
        try:
            for part in [p for p in rel.split("/") if p]:
                if part in (".", ".."):
                    raise HubError(f"{rel!r} is not a folder below {self.shown}")
                with suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                shown = shown / part
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise self._refusal(exc, shown) from None
                os.close(fd)
                fd = nxt
                self._owned(os.fstat(fd), shown, "folder")
        except BaseException:
            os.close(fd)
            raise
        return _Folder(fd, shown)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> _Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- files ------------------------------------------------------------------------------

    def stat(self, name: str) -> os.stat_result | None:
        """The file ``name`` (None when absent); refused unless a regular file this user owns."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        self._owned(st, self.shown / name, "file")
        return st

    def open_file(self, name: str, flags: int) -> int:
        """An fd for ``name`` (O_NOFOLLOW: a link is refused), a regular file this user owns."""
        try:
            fd = os.open(name, flags | _FILE_FLAGS, 0o644, dir_fd=self.fd)
        except OSError as exc:
            raise self._refusal(exc, self.shown / name) from None
        try:
            self._owned(os.fstat(fd), self.shown / name, "file")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_small(self, name: str, limit: int) -> bytes | None:
        if self.stat(name) is None:
            return None
        fd = self.open_file(name, os.O_RDONLY)
        try:
            return os.read(fd, limit + 1)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o644,
                     dir_fd=self.fd)  # fmt: skip
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        os.fsync(self.fd)

    def unlink(self, name: str) -> None:
        """Remove ``name`` if present (a link is removed itself, never what it names)."""
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        os.fsync(self.fd)

    # -- checks -----------------------------------------------------------------------------

    def _owned(self, st: os.stat_result, shown: Path, kind: str) -> None:
        if stat.S_ISLNK(st.st_mode):
            raise HubError(
                f"{shown} is a symbolic link; mtpstudio does not download through links",
                hint="Remove the link (or choose another folder) and run it again.",
            )
        is_kind = stat.S_ISDIR(st.st_mode) if kind == "folder" else stat.S_ISREG(st.st_mode)
        if not is_kind:
            raise HubError(
                f"{shown} is not a {'folder' if kind == 'folder' else 'regular file'}",
                hint="Move it away, or choose another folder.",
            )
        if st.st_uid != os.geteuid():
            raise HubError(
                f"{shown} belongs to another user (uid {st.st_uid}), so mtpstudio does not "
                "download into it",
                hint="Choose a folder of your own (the default is "
                "~/.local/share/mtpstudio/models).",
            )

    @staticmethod
    def _refusal(exc: OSError, shown: Path) -> HubError:
        if exc.errno == errno.ELOOP:
            return HubError(
                f"{shown} is a symbolic link; mtpstudio does not download through links",
                hint="Remove the link (or choose another folder) and run it again.",
            )
        return HubError(
            f"cannot open {shown}: {exc.strerror or exc}",
            hint="Check the folder (permissions, free space) and run it again.",
        )


_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_SIDECAR_LIMIT: Final = 64 * 1024


@dataclass
class _Job:
    part: RemoteFile
    expected: _Expected
    folder: _Folder
    name: str
    kept: int

    @property
    def final(self) -> Path:
        return self.folder.shown / self.name

    @property
    def part_name(self) -> str:
        return self.name + PART_SUFFIX

    @property
    def sidecar_name(self) -> str:
        return self.name + PART_SUFFIX + ".json"


def part_path(final: Path) -> Path:
    return final.with_name(final.name + PART_SUFFIX)


def _expected(client: HubClient, repo: Repo, part: RemoteFile) -> _Expected:
    meta = client.metadata(repo, part.path)
    size = meta.size if meta.size is not None else part.size
    if size < 0:
        raise HubError(
            f"the Hub reports a size of {size} bytes for {part.path}, so it cannot be downloaded",
            hint="List the repository again; if it stays so, the Hub (or mirror) is broken.",
        )
    # the listing's LFS object id is the SHA-256 by definition; the ETag only when it is one
    sha = part.sha256 or meta.sha256
    if sha is not None:
        return _Expected(part.path, size, "sha256", sha, meta.commit)
    blob = meta.etag or part.blob_id
    if not blob:
        raise HubError(
            f"the Hub publishes no checksum for {part.path}, so a download could not be verified",
            hint="Download it with another tool and open the file on the Model page.",
        )
    return _Expected(part.path, size, "git-sha1", blob, meta.commit)


def _prepare(job: _Job, notes: list[str]) -> None:
    """Decide what an earlier run left: a whole file, a part to resume, or nothing."""
    folder = job.folder
    part = folder.stat(job.part_name)
    if part is None:
        folder.unlink(job.sidecar_name)
        return
    try:
        raw = folder.read_small(job.sidecar_name, _SIDECAR_LIMIT)
        recorded = json.loads(raw) if raw is not None and len(raw) <= _SIDECAR_LIMIT else None
    except (ValueError, RecursionError):
        recorded = None
    if recorded == job.expected.sidecar() and part.st_size <= job.expected.size:
        job.kept = part.st_size
        return
    folder.unlink(job.part_name)
    folder.unlink(job.sidecar_name)
    notes.append(
        f"{job.name}: the partial download belonged to another version of the file, so "
        "it starts again"
    )


def download_model(
    client: HubClient,
    repo: Repo,
    model: RemoteModel,
    folder: Path,
    *,
    cancel: CancelToken | None = None,
    progress: Callable[[DownloadProgress], None] | None = None,
    retries: int = 3,
) -> DownloadResult:
    """Fetch every file of ``model`` into ``folder`` (resuming ``.part`` files).

    Every file there (the model, ``.part``, ``.part.json``) is opened without following a
    link and must be a regular file this user owns; the folder must be this user's own.

    Args:
        client: The Hub.
        repo: The repository and revision the model was listed at.
        model: The model (every part of a split one).
        folder: Where the files go (created when missing).
        cancel: Stops the download between chunks (the ``.part`` files stay for a resume).
        progress: Called with the state now and then (at most every 0.1 s).
        retries: Resumes within this run after the connection breaks.

    Returns:
        The verified files.

    Raises:
        HubError: no space, the file changed, a checksum mismatch (the damaged part is
            deleted), a server that ignores ranges, a broken connection after ``retries``
            resumes (the part is kept), a link or another user's file in the way, or any Hub
            error.
    """
    with _Folder.at(folder) as top, contextlib.ExitStack() as stack:
        return _download(client, repo, model, top, stack, cancel, progress, retries)


def _download(
    client: HubClient,
    repo: Repo,
    model: RemoteModel,
    top: _Folder,
    stack: contextlib.ExitStack,
    cancel: CancelToken | None,
    progress: Callable[[DownloadProgress], None] | None,
    retries: int,
) -> DownloadResult:
    notes: list[str] = []
    jobs: list[_Job] = []
    pinned = repo
    for remote in model.parts:
        expected = _expected(client, pinned, remote)
        if expected.commit and pinned.revision != expected.commit:
            pinned = Repo(repo.repo_id, expected.commit)  # every part from the same commit
        rel_dir, _, name = model.local_name(remote).rpartition("/")
        where = stack.enter_context(top.sub(rel_dir)) if rel_dir else top
        job = _Job(remote, expected, where, name, 0)
        st = where.stat(name)
        if st is not None:
            if st.st_size != expected.size:
                raise _in_the_way(job.final, "its size")
            job.kept = expected.size
            jobs.append(job)
            continue
        _prepare(job, notes)
        jobs.append(job)
    total = sum(j.expected.size for j in jobs)
    kept = sum(j.kept for j in jobs)
    _check_space(top.shown, total - kept, model)

    started = time.monotonic()
    counts = _Counters(kept)

    def report(phase: str, name: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if progress is not None and (force or now - counts.reported_at >= _REPORT_EVERY_S):
            counts.reported_at = now
            elapsed = now - started
            progress(DownloadProgress(phase, name, counts.done, total, counts.fetched, elapsed))

    for job in jobs:
        if job.folder.stat(job.name) is not None:  # there already: taken only if it matches
            hasher = job.expected.hasher()
            tick = partial(report, "checking", job.name)
            _hash_into(hasher, job.folder, job.name, job.kept, cancel, tick)
            if hasher.hexdigest() != job.expected.digest:
                raise _in_the_way(job.final, f"its {job.expected.kind.upper()}")
            notes.append(f"{job.name} was already there and matches the Hub's checksum")
            continue
        _fetch(client, pinned, job, cancel, report, counts, retries)
        report("downloading", job.name, force=True)
    return DownloadResult(tuple(j.final for j in jobs), kept, counts.fetched, tuple(notes))


def _in_the_way(final: Path, what: str) -> HubError:
    return HubError(
        f"{final} already exists and is not the Hub's file ({what} differs)",
        hint="Move it away, or choose another folder.",
    )


def _hash_into(
    hasher: _Hasher,
    folder: _Folder,
    name: str,
    size: int,
    cancel: CancelToken | None,
    tick: Callable[[], None],
) -> int:
    """Feed the first ``size`` bytes of ``name`` to ``hasher``; returns the bytes read."""
    done = 0
    if size <= 0:
        return 0
    with os.fdopen(folder.open_file(name, os.O_RDONLY), "rb") as src:
        while chunk := src.read(min(_HASH_CHUNK, size - done)):
            if cancel is not None:
                cancel.raise_if_cancelled()
            hasher.update(chunk)
            done += len(chunk)
            tick()
    return done


def _check_space(folder: Path, needed: int, model: RemoteModel) -> None:
    free = shutil.disk_usage(folder).free
    if needed + FREE_SPACE_MARGIN > free:
        raise HubError(
            f"{model.name} needs {size_text(needed)} more in {folder}, but only "
            f"{size_text(free)} are free",
            hint="Free some space, or choose a folder on another disk.",
        )


def _fetch(
    client: HubClient,
    repo: Repo,
    job: _Job,
    cancel: CancelToken | None,
    report: _Report,
    counts: _Counters,
    retries: int,
) -> None:
    folder = job.folder
    folder.write_atomic(job.sidecar_name, json.dumps(job.expected.sidecar()).encode())
    os.close(folder.open_file(job.part_name, os.O_WRONLY | os.O_CREAT))  # a zero-byte file has one
    hasher = job.expected.hasher()
    tick = partial(report, "checking", job.name)
    held = _hash_into(hasher, folder, job.part_name, job.kept, cancel, tick)
    size = job.expected.size
    broken = 0
    while held < size:
        before = held
        try:
            held = _stream(client, repo, job, held, hasher, cancel, report, counts)
        except StreamBroken as exc:
            st = folder.stat(job.part_name)
            held = st.st_size if st is not None else 0
            cause: HubError | None = exc
        else:
            cause = None if held > before else HubError(f"the server sent nothing for {job.name}")
        if cause is not None:
            broken += 1
            if broken > retries:
                raise HubError(
                    f"{str(cause).rstrip('.')} ({size_text(held)} of {size_text(size)} kept in "
                    f"{job.part_name})",
                    hint="Run it again: the download resumes where it stopped.",
                ) from None
    _verify(job, hasher)


def _stream(
    client: HubClient,
    repo: Repo,
    job: _Job,
    held: int,
    hasher: _Hasher,
    cancel: CancelToken | None,
    report: _Report,
    counts: _Counters,
) -> int:
    """Append the file's bytes from ``held`` to the part; returns the bytes held after."""
    shown = job.folder.shown / job.part_name
    try:
        with (
            client.open_bytes(repo, job.part.path, held) as (chunks, total),
            os.fdopen(job.folder.open_file(job.part_name, os.O_WRONLY | os.O_APPEND), "ab") as out,
        ):
            if total != job.expected.size:
                raise HubError(
                    f"{job.part.path} is {total:,} bytes now, not {job.expected.size:,}: it "
                    "changed on the Hub while it was downloaded",
                    hint="List the repository again and start the download again.",
                )
            out.seek(0, os.SEEK_END)
            if out.tell() != held:
                raise HubError(f"{shown} changed size while it was written")
            try:
                for chunk in chunks:
                    if cancel is not None:
                        cancel.raise_if_cancelled()
                    out.write(chunk)
                    hasher.update(chunk)
                    held += len(chunk)
                    counts.done += len(chunk)
                    counts.fetched += len(chunk)
                    if held > job.expected.size:
                        break
                    report("downloading", job.name)
            finally:
                out.flush()
                os.fsync(out.fileno())
    except OSError as exc:
        raise HubError(
            f"cannot write {shown}: {exc.strerror or exc}",
            hint="Check the disk (free space, permissions) and run it again to resume.",
        ) from None
    return held


def _verify(job: _Job, hasher: _Hasher) -> None:
    folder = job.folder
    st = folder.stat(job.part_name)
    size = st.st_size if st is not None else -1
    expected = job.expected
    digest = hasher.hexdigest()
    if size != expected.size or digest != expected.digest:
        folder.unlink(job.part_name)
        folder.unlink(job.sidecar_name)
        what = "size" if size != expected.size else expected.kind.upper()
        raise HubError(
            f"{job.name} failed its check: its {what} does not match what the Hub "
            f"publishes ({digest[:12]}… instead of {expected.digest[:12]}…), so the damaged "
            "download was deleted",
            hint="Run it again; if it fails again, the server sends a damaged file.",
        )
    folder.rename(job.part_name, job.name)
    folder.unlink(job.sidecar_name)
