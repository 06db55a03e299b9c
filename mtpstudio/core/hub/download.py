"""Download a remote model: resumable, checked against the Hub's checksum, renamed only when whole.

Each file is written as ``NAME.part`` (with ``NAME.part.json`` saying which remote file and
checksum it belongs to) and renamed to ``NAME`` only after its size and checksum match: the
SHA-256 the Hub publishes for LFS files (``X-Linked-Etag``), the git blob id for small files.
An interrupted or cancelled download keeps its ``.part``; the next run resumes it with an
HTTP range from the part's size. Free space is checked before the first byte.

Threading: ``download_model`` runs on one (worker) thread; ``progress`` is called on that
thread; ``cancel`` may be set from any thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, Protocol

from mtpstudio.core.atomic import fsync_dir, write_text_atomic
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


@dataclass
class _Job:
    part: RemoteFile
    expected: _Expected
    final: Path
    kept: int


def part_path(final: Path) -> Path:
    return final.with_name(final.name + PART_SUFFIX)


def _sidecar_path(final: Path) -> Path:
    return final.with_name(final.name + PART_SUFFIX + ".json")


def _expected(client: HubClient, repo: Repo, part: RemoteFile) -> _Expected:
    meta = client.metadata(repo, part.path)
    size = meta.size if meta.size is not None else part.size
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
    part, side = part_path(job.final), _sidecar_path(job.final)
    if not part.exists():
        side.unlink(missing_ok=True)
        return
    try:
        recorded = json.loads(side.read_text())
    except (OSError, ValueError):
        recorded = None
    size = part.stat().st_size
    if recorded == job.expected.sidecar() and size <= job.expected.size:
        job.kept = size
        return
    part.unlink()
    side.unlink(missing_ok=True)
    notes.append(
        f"{job.final.name}: the partial download belonged to another version of the file, so "
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
            resumes (the part is kept), or any Hub error.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HubError(
            f"cannot create {folder}: {exc.strerror or exc}",
            hint="Choose a folder you can write to.",
        ) from None
    notes: list[str] = []
    jobs: list[_Job] = []
    pinned = repo
    for remote in model.parts:
        expected = _expected(client, pinned, remote)
        if expected.commit and pinned.revision != expected.commit:
            pinned = Repo(repo.repo_id, expected.commit)  # every part from the same commit
        final = folder / remote.name
        if final.exists():
            if final.stat().st_size != expected.size:
                raise _in_the_way(final, "its size")
            jobs.append(_Job(remote, expected, final, expected.size))
            continue
        job = _Job(remote, expected, final, 0)
        _prepare(job, notes)
        jobs.append(job)
    total = sum(j.expected.size for j in jobs)
    kept = sum(j.kept for j in jobs)
    _check_space(folder, total - kept, model)

    started = time.monotonic()
    counts = _Counters(kept)

    def report(phase: str, name: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if progress is not None and (force or now - counts.reported_at >= _REPORT_EVERY_S):
            counts.reported_at = now
            elapsed = now - started
            progress(DownloadProgress(phase, name, counts.done, total, counts.fetched, elapsed))

    for job in jobs:
        name = job.final.name
        if job.final.exists():  # there already: taken only when its checksum matches
            hasher = job.expected.hasher()
            _hash_into(hasher, job.final, job.kept, cancel, partial(report, "checking", name))
            if hasher.hexdigest() != job.expected.digest:
                raise _in_the_way(job.final, f"its {job.expected.kind.upper()}")
            notes.append(f"{name} was already there and matches the Hub's checksum")
            continue
        _fetch(client, pinned, job, cancel, report, counts, retries)
        report("downloading", name, force=True)
    return DownloadResult(tuple(j.final for j in jobs), kept, counts.fetched, tuple(notes))


def _in_the_way(final: Path, what: str) -> HubError:
    return HubError(
        f"{final} already exists and is not the Hub's file ({what} differs)",
        hint="Move it away, or choose another folder.",
    )


def _hash_into(
    hasher: _Hasher,
    path: Path,
    size: int,
    cancel: CancelToken | None,
    tick: Callable[[], None],
) -> int:
    """Feed the first ``size`` bytes of ``path`` to ``hasher``; returns the bytes read."""
    done = 0
    if size <= 0:
        return 0
    with open(path, "rb") as src:
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
    name = job.final.name
    part, side = part_path(job.final), _sidecar_path(job.final)
    write_text_atomic(side, json.dumps(job.expected.sidecar()))
    hasher = job.expected.hasher()
    held = _hash_into(hasher, part, job.kept, cancel, partial(report, "checking", name))
    size = job.expected.size
    broken = 0
    while held < size:
        before = held
        try:
            held = _stream(client, repo, job, part, held, hasher, cancel, report, counts)
        except StreamBroken as exc:
            held = part.stat().st_size
            cause: HubError | None = exc
        else:
            cause = None if held > before else HubError(f"the server sent nothing for {name}")
        if cause is not None:
            broken += 1
            if broken > retries:
                raise HubError(
                    f"{str(cause).rstrip('.')} ({size_text(held)} of {size_text(size)} kept in "
                    f"{part.name})",
                    hint="Run it again: the download resumes where it stopped.",
                ) from None
    _verify(job, part, side, hasher)


def _stream(
    client: HubClient,
    repo: Repo,
    job: _Job,
    part: Path,
    held: int,
    hasher: _Hasher,
    cancel: CancelToken | None,
    report: _Report,
    counts: _Counters,
) -> int:
    """Append the file's bytes from ``held`` to the part; returns the bytes held after."""
    name = job.final.name
    try:
        with (
            client.open_bytes(repo, job.part.path, held) as (chunks, total),
            open(part, "ab") as out,
        ):
            if total != job.expected.size:
                raise HubError(
                    f"{job.part.path} is {total:,} bytes now, not {job.expected.size:,}: it "
                    "changed on the Hub while it was downloaded",
                    hint="List the repository again and start the download again.",
                )
            out.seek(0, os.SEEK_END)
            if out.tell() != held:
                raise HubError(f"{part} changed size while it was written")
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
                    report("downloading", name)
            finally:
                out.flush()
                os.fsync(out.fileno())
    except OSError as exc:
        raise HubError(
            f"cannot write {part}: {exc.strerror or exc}",
            hint="Check the disk (free space, permissions) and run it again to resume.",
        ) from None
    return held


def _verify(job: _Job, part: Path, side: Path, hasher: _Hasher) -> None:
    size = part.stat().st_size
    expected = job.expected
    digest = hasher.hexdigest()
    if size != expected.size or digest != expected.digest:
        part.unlink(missing_ok=True)
        side.unlink(missing_ok=True)
        what = "size" if size != expected.size else expected.kind.upper()
        raise HubError(
            f"{job.final.name} failed its check: its {what} does not match what the Hub "
            f"publishes ({digest[:12]}… instead of {expected.digest[:12]}…), so the damaged "
            "download was deleted",
            hint="Run it again; if it fails again, the server sends a damaged file.",
        )
    os.replace(part, job.final)
    fsync_dir(job.final.parent)
    side.unlink(missing_ok=True)
