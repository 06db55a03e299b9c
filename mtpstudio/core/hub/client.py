"""The Hub through huggingface_hub: a repository's files, their metadata and byte ranges.

Endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or the one ``hf auth login`` saved), the HTTP
session and the error types are huggingface_hub's own; mtpstudio adds byte-range reads that
never pull a whole file, and one sentence per failure.

Threading: a ``HubClient`` may be used from several threads at once (the session is
huggingface_hub's shared, thread-safe client).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlsplit

import httpx2
from huggingface_hub import (
    HfApi,
    constants,
    get_hf_file_metadata,
    get_token,
    hf_hub_url,
    hf_raise_for_status,
)
from huggingface_hub.errors import (
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    build_hf_headers,
    http_backoff,
    http_stream_backoff,
    validate_repo_id,
)

from mtpstudio import __version__
from mtpstudio.core.errors import HubError
from mtpstudio.core.outside_text import has_control, visible
from mtpstudio.core.units import MIB

__all__ = [
    "FileMetadata",
    "HubClient",
    "RemoteFile",
    "Repo",
    "StreamBroken",
    "parse_repo_id",
]

_REPO_ID: Final = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_PAGE_URL: Final = re.compile(r"^https?://[^/]+/(?P<id>[^/?#]+/[^/?#]+)")
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_RANGE: Final = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_RETRY_STATUSES: Final = (429, 500, 502, 503, 504)
_LOGIN_HINT: Final = "log in with `hf auth login` (or set HF_TOKEN)"
MAX_LISTED_FILES: Final = 100_000
"""A listing longer than this is refused (the Hub's largest model repositories hold a few
thousand files)."""


def parse_repo_id(text: str) -> str:
    """``OWNER/NAME`` from itself or from a model page address (``https://huggingface.co/…``).

    Raises:
        HubError: the text names no repository.
    """
    text = text.strip()
    page = _PAGE_URL.match(text)
    repo_id = page["id"] if page else text.strip("/")
    try:
        if not _REPO_ID.match(repo_id):
            raise HFValidationError("not OWNER/NAME")
        validate_repo_id(repo_id)  # the Hub's own rules (no '--' or '..', at most 96 …)
    except HFValidationError:
        raise HubError(
            f"{visible(text)!r} is not a model repository name",
            hint="Write it as OWNER/NAME with letters, digits, '-', '_' and '.' (no '--' or "
            "'..'), for example unsloth/Qwen3.6-35B-A3B-GGUF.",
        ) from None
    return repo_id


@dataclass(frozen=True)
class Repo:
    """A repository at a revision (None: the default branch, ``main``)."""

    repo_id: str
    revision: str | None = None

    @property
    def label(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"

    @property
    def ref(self) -> str:
        return self.revision or constants.DEFAULT_REVISION


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository as the tree listing describes it.

    ``sha256`` is the LFS object id (the hash of the whole file), None for a file kept in git
    itself; ``blob_id`` is the git blob id (``sha1("blob SIZE\\0" + content)``).
    """

    path: str
    size: int
    blob_id: str
    sha256: str | None = None
    problem: str | None = None
    """Why mtpstudio will not use this entry (a name with control characters, a size below
    one byte…); ``path`` is then shown with its control characters made visible."""

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class FileMetadata:
    """What the Hub answers to HEAD on a file: its commit, checksum (ETag) and size."""

    commit: str | None
    etag: str | None
    size: int | None

    @property
    def sha256(self) -> str | None:
        """The ETag when it is a SHA-256 (LFS files), else None."""
        return self.etag if self.etag and _SHA256.match(self.etag) else None


class HubClient:
    """A Hub (or a mirror, ``HF_ENDPOINT``) as mtpstudio reads it.

    Args:
        endpoint: The Hub's address; None reads ``HF_ENDPOINT`` (default https://huggingface.co).
        token: A token, or None for huggingface_hub's own (``HF_TOKEN``, ``hf auth login``).
        timeout: Seconds to wait for an answer.
        retries: Extra tries of a byte-range read answered 429 or 5xx.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 2,
    ) -> None:
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self._api = HfApi(
            endpoint=self.endpoint,
            token=token,
            library_name="mtpstudio",
            library_version=__version__,
        )

    # -- the repository -----------------------------------------------------------------------

    def resolve(self, repo: Repo) -> str:
        """The commit the revision points at (reading at it keeps every file consistent).

        Raises:
            HubError: not found, private, gated, unknown revision, rate limited, no network.
        """
        with self._said(repo, None):
            info = self._api.model_info(repo.repo_id, revision=repo.revision, timeout=self.timeout)
        return info.sha or repo.ref

    def list_files(self, repo: Repo) -> list[RemoteFile]:
        """Every file of the repository at ``repo.revision`` (folders walked).

        The Hub answers a page at a time (a ``Link: <…>; rel="next"`` header); the token goes
        only to the Hub's own origin: a next page on another host is refused, never followed
        with it. Entries mtpstudio will not use (control characters in the name, a size below
        zero, no checksum) come back with their ``problem``.

        Raises:
            HubError: refused, not found, rate limited, no network, a listing that is not the
                Hub's JSON, a next page elsewhere, more than ``MAX_LISTED_FILES`` entries.
        """
        headers = build_hf_headers(
            token=self._token, library_name="mtpstudio", library_version=__version__
        )
        url: str | None = (
            f"{self.endpoint}/api/models/{repo.repo_id}/tree/{quote(repo.ref, safe='')}"
        )
        params: Mapping[str, str] | None = {"recursive": "true", "expand": "false"}
        files: list[RemoteFile] = []
        with self._said(repo, None):
            while url is not None:
                response = http_backoff(
                    "GET", url, params=params, headers=headers, timeout=self.timeout
                )
                hf_raise_for_status(response)
                for entry in _page(response, repo):
                    if isinstance(entry, dict) and entry.get("type") == "file":
                        files.append(_remote_file(entry))
                if len(files) > MAX_LISTED_FILES:
                    raise HubError(
                        f"{repo.repo_id} lists more than {MAX_LISTED_FILES:,} files, more than "
                        "mtpstudio reads",
                        hint="Choose a repository of GGUF quants.",
                        whole_repo=True,
                    )
                url = response.links.get("next", {}).get("url")
                params = None  # the next link carries its own
                if url is not None and not self.same_origin(url):
                    raise HubError(
                        f"{self.endpoint} pointed the next page of {repo.repo_id}'s file list "
                        f"to another host ({visible(url)[:80]}); mtpstudio sends your token only "
                        "to the Hub itself, so it stopped there",
                        hint="Check HF_ENDPOINT: a Hub or mirror pages its listings on its own "
                        "address.",
                        whole_repo=True,
                    )
        return files

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the endpoint's own scheme, host and port."""
        return _origin(url) == _origin(self.endpoint)

    # -- one file -------------------------------------------------------------------------------

    def file_url(self, repo: Repo, path: str) -> str:
        return hf_hub_url(repo.repo_id, path, revision=repo.revision, endpoint=self.endpoint)

    def metadata(self, repo: Repo, path: str) -> FileMetadata:
        """HEAD on the file: commit, ETag (the SHA-256 of LFS files) and size."""
        with self._said(repo, path):
            meta = get_hf_file_metadata(
                self.file_url(repo, path),
                token=self._token,
                timeout=self.timeout,
                library_name="mtpstudio",
                library_version=__version__,
                endpoint=self.endpoint,
                retry_on_errors=True,
            )
        return FileMetadata(meta.commit_hash, meta.etag, meta.size)

    def read_range(self, repo: Repo, path: str, start: int, end: int) -> tuple[bytes, int]:
        """Bytes ``start`` to ``end`` (exclusive) of the file, and the file's full size.

        A server that answers with the whole file instead of the range is refused after its
        status line, before any of the body is read.
        """
        want = end - start
        with self.open_bytes(repo, path, start, end) as (chunks, total):
            data = bytearray()
            for chunk in chunks:
                data += chunk
                if len(data) > want:
                    raise HubError(
                        f"{path}: the server sent more than the {want:,} bytes asked for",
                        hint="Use a Hub (or mirror) that answers HTTP range requests.",
                    )
        return bytes(data), total

    @contextlib.contextmanager
    def open_bytes(
        self, repo: Repo, path: str, start: int, end: int | None = None
    ) -> Iterator[tuple[Iterator[bytes], int]]:
        """Streams bytes ``start`` to ``end`` (None: the end of the file) of the file.

        Yields the chunks and the file's full size. The token goes only as far as the Hub
        itself: a redirect to the storage host drops it (httpx2's rule for other origins).

        Raises:
            HubError: refused, not found, a server that ignores the range (before its body is
                read), rate limited, no network; ``StreamBroken`` while the chunks are read.
        """
        headers = build_hf_headers(
            token=self._token, library_name="mtpstudio", library_version=__version__
        )
        headers["Accept-Encoding"] = "identity"
        if start or end is not None:
            headers["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        with contextlib.ExitStack() as stack:
            with self._said(repo, path):
                response = stack.enter_context(
                    http_stream_backoff(
                        "GET",
                        self.file_url(repo, path),
                        headers=headers,
                        timeout=self.timeout,
                        max_retries=self.retries,
                        retry_on_status_codes=_RETRY_STATUSES,
                    )
                )
                if response.status_code >= 400:
                    response.read()  # a small error body: the error quotes the server's message
                hf_raise_for_status(response)
                total = _checked_range(response, path, start, end)
            yield _chunks(response, path), total

    # -- errors -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _said(self, repo: Repo, path: str | None) -> Iterator[None]:
        """huggingface_hub's and httpx2's errors as one sentence each (``HubError``)."""
        try:
            yield
        except HubError:
            raise
        except GatedRepoError:
            raise HubError(
                f"{repo.repo_id} is gated: its files open only after you accept its conditions "
                f"on {self.endpoint}/{repo.repo_id} with your account",
                hint=f"Accept them on the model page, then {_LOGIN_HINT}.",
                whole_repo=True,
            ) from None
        except RepositoryNotFoundError:
            sent = "the token sent has no access" if self._has_token() else "no token was sent"
            raise HubError(
                f"{repo.repo_id} was not found on {self.endpoint}, or it is private and {sent}",
                hint=f"Check the name; for a private repository {_LOGIN_HINT}.",
                whole_repo=True,
            ) from None
        except RevisionNotFoundError:
            raise HubError(
                f"{repo.repo_id} has no revision {repo.ref!r}",
                hint="Give a branch, tag or commit of the repository (default: main).",
                whole_repo=True,
            ) from None
        except RemoteEntryNotFoundError:
            raise HubError(
                f"{path} is not in {repo.label}",
                hint="List the repository again: the file may have been renamed or removed.",
            ) from None
        except DisabledRepoError:
            raise HubError(
                f"{repo.repo_id} has been disabled on {self.endpoint}",
                hint="Choose another repository.",
                whole_repo=True,
            ) from None
        except HfHubHTTPError as exc:
            raise self._http_error(repo, path, exc) from None
        except OfflineModeIsEnabled:
            raise HubError(
                "HF_HUB_OFFLINE is set, so the Hub is not contacted",
                hint="Unset HF_HUB_OFFLINE to read repositories.",
                whole_repo=True,
            ) from None
        except httpx2.TransportError as exc:
            raise HubError(
                f"cannot reach {self.endpoint}: {_reason(exc)}",
                hint="Check the network connection (and HF_ENDPOINT, if you use a mirror).",
                whole_repo=True,
            ) from None

    def _http_error(self, repo: Repo, path: str | None, exc: HfHubHTTPError) -> HubError:
        status = exc.response.status_code if exc.response is not None else 0
        what = path or repo.repo_id
        if status == 429:
            wait = _retry_after(exc.response)
            if wait is None:
                later = "Try again in a minute"
            elif wait <= 1:
                later = "Try again in a moment"
            else:
                later = f"Wait {wait} seconds and try again"
            return HubError(
                f"{self.endpoint} is rate-limiting requests from this computer (HTTP 429) while "
                f"reading {what}",
                hint=f"{later}; logged-in users get a higher limit: {_LOGIN_HINT}.",
                whole_repo=True,
            )
        if status in (401, 403):
            return HubError(
                f"{self.endpoint} refused access to {what} (HTTP {status})",
                hint=f"Check that your account may read {repo.repo_id}, then {_LOGIN_HINT}.",
                whole_repo=True,
            )
        if status == 416:
            return HubError(
                f"{what}: the server refused the byte range asked for (HTTP 416)",
                hint="The file may have changed on the Hub; list the repository again.",
            )
        if status >= 500:
            return HubError(
                f"{self.endpoint} failed to answer for {what} (HTTP {status})",
                hint="The Hub has a problem right now; try again later.",
                whole_repo=True,
            )
        return HubError(
            f"{self.endpoint} answered HTTP {status} for {what}",
            hint="Check the repository name and revision.",
        )

    def _has_token(self) -> bool:
        return bool(self._token or get_token())


def _checked_range(response: httpx2.Response, path: str, start: int, end: int | None) -> int:
    """The file's full size from a ranged answer; refuses one that ignored the range."""
    length = _int(response.headers.get("Content-Length"))
    if response.status_code == 206:
        m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if m is None or int(m[1]) != start:
            raise HubError(
                f"{path}: the server answered a different byte range than the one asked for "
                f"({response.headers.get('Content-Range')!r})",
                hint="Use a Hub (or mirror) that answers HTTP range requests correctly.",
            )
        if m[3] != "*":
            return int(m[3])
        if length is None:
            raise HubError(f"{path}: the server did not say how big the file is")
        return start + length
    whole = length if length is not None else _int(response.headers.get("X-Linked-Size"))
    if start == 0 and whole is not None and (end is None or whole <= end):
        return whole  # the whole file was asked for, or it is smaller than the range
    shown = f"all {whole:,} bytes" if whole is not None else "the whole file"
    raise HubError(
        f"{path}: the server ignored the byte range and began sending {shown}; mtpstudio "
        "stopped it before reading any of it",
        hint="Use the Hub or a mirror that answers HTTP range requests (HF_ENDPOINT).",
    )


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return ("", "", None)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _page(response: httpx2.Response, repo: Repo) -> list[Any]:
    try:
        page = response.json()
    except (ValueError, RecursionError):
        page = None
    if not isinstance(page, list):
        raise HubError(
            f"the file list of {repo.repo_id} is not the Hub's JSON",
            hint="Check HF_ENDPOINT (a Hub or a mirror of it).",
            whole_repo=True,
        )
    return page


def _remote_file(entry: Mapping[str, Any]) -> RemoteFile:
    """A tree entry as a RemoteFile; what mtpstudio will not use carries its ``problem``."""
    raw_path = entry.get("path")
    path = raw_path if isinstance(raw_path, str) else ""
    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else None
    size = lfs.get("size") if lfs is not None else entry.get("size")
    blob = entry.get("oid")
    sha = lfs.get("oid") if lfs is not None else None
    problem = None
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or len(path) > 1024:
        problem = "its path is not a file path"
    elif has_control(path):
        problem = "its name holds control characters"
    elif not isinstance(size, int) or isinstance(size, bool) or size < 0:
        problem = f"the Hub gives it no size mtpstudio can use ({visible(str(size))[:20]})"
    elif not isinstance(blob, str) or (sha is not None and not _SHA256.match(str(sha))):
        problem = "the Hub gives it no checksum"
    return RemoteFile(
        path=path if problem is None else visible(path)[:200],
        size=size if problem is None and isinstance(size, int) else 0,
        blob_id=blob if isinstance(blob, str) else "",
        sha256=str(sha) if sha is not None and problem is None else None,
        problem=problem,
    )


def _retry_after(response: httpx2.Response | None) -> int | None:
    if response is None:
        return None
    value = _int(response.headers.get("Retry-After"))
    if value is not None:
        return value
    m = re.search(r"\bt=(\d+)", response.headers.get("RateLimit", ""))
    return int(m[1]) if m else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.rstrip(".")


class StreamBroken(HubError):
    """The connection broke (or timed out) while a file's bytes were read; resuming can follow."""


def _chunks(response: httpx2.Response, path: str) -> Iterator[bytes]:
    try:
        yield from response.iter_bytes(MIB)
    except httpx2.TransportError as exc:
        raise StreamBroken(
            f"the connection broke while {path} was read: {_reason(exc)}",
            hint="Run the same command again: the download resumes where it stopped.",
        ) from None
