"""A local Hugging Face Hub over real HTTP, for tests and benchmarks.

It answers what huggingface_hub 2.x asks of the Hub (read in its source: ``HfApi.model_info``,
``HfApi.list_repo_tree``, ``get_hf_file_metadata``) and what a download does:

* ``GET /api/models/OWNER/NAME[/revision/REV]``: id, commit sha, private, gated, siblings;
* ``GET /api/models/OWNER/NAME/tree/REV[/PATH]?recursive=true``: the files, with LFS size and
  sha256, a page at a time (a ``Link: <…>; rel="next"`` header, as the Hub paginates);
* ``HEAD|GET /OWNER/NAME/resolve/REV/PATH``: for LFS files a 302 to the storage server with
  ``X-Repo-Commit``, ``X-Linked-Etag`` (the sha256), ``X-Linked-Size`` and ``ETag``; small git
  files are served directly;
* the storage server (another origin, like the Hub's CDN): ``GET`` with HTTP ranges (206).

Errors carry the Hub's ``X-Error-Code`` (RepoNotFound, GatedRepo, RevisionNotFound,
EntryNotFound), so huggingface_hub raises its own error types. Every body byte sent is counted
per file; faults (ignore ranges, cut a connection, corrupt a byte, 429, a slow link) are
switched on per test.

Files bigger than ``hash_limit`` are announced with a stand-in sha256 (hashing 19 GB of zeros
takes most of a minute): they serve header reads and refusals, not whole downloads.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["HostedFile", "HostedRepo", "HubTestServer"]

_CHUNK = 1 << 20
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class HostedFile:
    """A file of a hosted repository: its path there and its bytes (a file on disk)."""

    path: str
    source: Path
    lfs: bool = True
    sha256: str = ""
    blob_id: str = ""

    @property
    def size(self) -> int:
        return self.source.stat().st_size


@dataclass
class HostedRepo:
    """A repository: files at one commit; private (token needed) or gated (access needed)."""

    repo_id: str
    files: list[HostedFile]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    private: bool = False
    gated: bool = False
    token: str | None = None  # the token that may read a private or gated repository

    def file(self, path: str) -> HostedFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass
class Faults:
    """What goes wrong on purpose; the counters say what happened."""

    ignore_range: bool = False
    cut_after: dict[str, int] = field(default_factory=dict)  # path -> body bytes, then close
    cuts_left: int = 0  # how many more responses get cut (each cut decrements)
    corrupt: dict[str, int] = field(default_factory=dict)  # path -> file offset to flip
    rate_limit: int = 0  # the next N requests get 429
    page_size: int = 1000
    chunk_delay_s: float = 0.0  # a slow link: the pause after each 1 MiB of a body
    next_page_origin: str | None = None  # the tree listing's next page on this origin instead
    listed_size: dict[str, int] = field(default_factory=dict)  # path -> size the Hub reports


class HubTestServer:
    """The hub and its storage host on two loopback ports; a context manager.

    ``endpoint`` goes to ``HF_ENDPOINT`` (or ``HubClient(endpoint=…)``). ``bytes_sent[path]``
    counts body bytes sent for each file, ``ranges[path]`` lists each GET's (start, end).
    """

    def __init__(self, repos: list[HostedRepo], *, hash_limit: int = 1 << 28) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.faults = Faults()
        self.bytes_sent: dict[str, int] = {}
        self.ranges: dict[str, list[tuple[int, int]]] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) in order
        self.auth_seen_by_storage: list[str] = []
        self._lock = threading.Lock()
        for repo in repos:
            for f in repo.files:
                self._fill_ids(f, hash_limit)
        self._hub = _Server(self, storage=False)
        self._storage = _Server(self, storage=True)

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> HubTestServer:
        for server in (self._hub, self._storage):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in (self._hub, self._storage):
            server.shutdown()
            server.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def storage(self) -> str:
        return f"http://127.0.0.1:{self._storage.server_address[1]}"

    def reset_counters(self) -> None:
        with self._lock:
            self.bytes_sent.clear()
            self.ranges.clear()
            self.requests.clear()
            self.auth_seen_by_storage.clear()

    # -- bookkeeping (any thread) ------------------------------------------------------------

    @staticmethod
    def _fill_ids(f: HostedFile, hash_limit: int) -> None:
        size = f.size
        if not f.sha256:
            if size <= hash_limit:
                h = hashlib.sha256()
                with open(f.source, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                f.sha256 = h.hexdigest()
            else:
                f.sha256 = hashlib.sha256(f"stand-in {f.path} {size}".encode()).hexdigest()
        if not f.blob_id:
            if f.lfs:  # git stores the LFS pointer file
                pointer = (
                    "version https://git-lfs.github.com/spec/v1\n"
                    f"oid sha256:{f.sha256}\nsize {size}\n"
                ).encode()
            else:
                pointer = f.source.read_bytes()
            blob = b"blob %d\0" % len(pointer) + pointer
            f.blob_id = hashlib.sha1(blob, usedforsecurity=False).hexdigest()

    def _count(self, path: str, n: int) -> None:
        with self._lock:
            self.bytes_sent[path] = self.bytes_sent.get(path, 0) + n

    def _log(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def _take_rate_limit(self) -> bool:
        with self._lock:
            if self.faults.rate_limit > 0:
                self.faults.rate_limit -= 1
                return True
            return False

    def _take_cut(self, path: str) -> int | None:
        with self._lock:
            at = self.faults.cut_after.get(path)
            if at is None or self.faults.cuts_left <= 0:
                return None
            self.faults.cuts_left -= 1
            return at


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, hub: HubTestServer, *, storage: bool) -> None:
        self.hub = hub
        self.storage = storage
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def hub(self) -> HubTestServer:
        return self.server.hub

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self._reply(status, body, {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str, message: str) -> None:
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        self.hub._log(self.command, path)
        if self.hub._take_rate_limit():
            self._json(
                429,
                {"error": "rate limited"},
                {"Retry-After": "0", "RateLimit": '"api";r=0;t=0'},
            )
            return
        if self.server.storage:
            self._storage(path)
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
        if m:
            self._model_info(m[1], m[2])
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
        if m:
            self._tree(m[1], m[2], m[3] or "", parse_qs(url.query))
            return
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            self._resolve(m[1], m[2], m[3])
            return
        self._error(404, "NotFound", f"no route for {path}")

    # -- access -----------------------------------------------------------------------------

    def _repo(self, repo_id: str, rev: str | None, *, files: bool) -> HostedRepo | None:
        """The repository when this request may see it (else the error is sent)."""
        repo = self.hub.repos.get(repo_id)
        token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if repo is None or (repo.private and token != repo.token):
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if rev not in (None, "main", repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        if files and repo.gated and token != repo.token:
            status = 403 if token else 401
            self._error(
                status,
                "GatedRepo",
                f"Access to model {repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )
            return None
        return repo

    # -- the API ----------------------------------------------------------------------------

    def _model_info(self, repo_id: str, rev: str | None) -> None:
        repo = self._repo(repo_id, rev, files=False)
        if repo is None:
            return
        self._json(
            200,
            {
                "_id": "6650a0b0c0d0e0f000000000",
                "id": repo_id,
                "modelId": repo_id,
                "sha": repo.commit,
                "private": repo.private,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": ["gguf"],
                "library_name": "gguf",
                "siblings": [{"rfilename": f.path} for f in repo.files],
            },
        )

    def _tree(self, repo_id: str, rev: str, folder: str, query: dict[str, list[str]]) -> None:
        repo = self._repo(repo_id, rev, files=False)
        if repo is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = folder.rstrip("/") + "/" if folder else ""
        entries: list[dict[str, Any]] = []
        dirs: set[str] = set()
        for f in sorted(repo.files, key=lambda f: f.path):
            if not f.path.startswith(prefix):
                continue
            rest = f.path[len(prefix) :]
            parts = rest.split("/")
            for depth in range(1, len(parts)):
                d = prefix + "/".join(parts[:depth])
                if d not in dirs and (recursive or depth == 1):
                    dirs.add(d)
                    oid = hashlib.sha1(d.encode(), usedforsecurity=False).hexdigest()
                    entries.append({"type": "directory", "oid": oid, "size": 0, "path": d})
            if len(parts) > 1 and not recursive:
                continue
            size = self.hub.faults.listed_size.get(f.path, f.size)
            entry: dict[str, Any] = {
                "type": "file",
                "oid": f.blob_id,
                "size": size,
                "path": f.path,
            }
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": size, "pointerSize": 134}
            entries.append(entry)
        start = int(query.get("cursor", ["0"])[0])
        page = entries[start : start + self.hub.faults.page_size]
        headers = {}
        if start + len(page) < len(entries):
            origin = self.hub.faults.next_page_origin or self.hub.endpoint
            base = f"{origin}{quote(urlsplit(self.path).path)}"
            headers["Link"] = (
                f"<{base}?recursive={str(recursive).lower()}&expand=false&cursor="
                f'{start + len(page)}>; rel="next"'
            )
        self._json(200, page, headers)

    def _resolve(self, repo_id: str, rev: str, path: str) -> None:
        repo = self._repo(repo_id, rev, files=True)
        if repo is None:
            return
        f = repo.file(path)
        if f is None:
            self._error(404, "EntryNotFound", f"{path} does not exist on {rev}")
            return
        common = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
        if f.lfs:
            location = f"{self.hub.storage}/lfs/{quote(repo_id)}/{f.sha256}/{quote(f.path)}"
            self._reply(
                302,
                b"",
                {
                    **common,
                    "Location": location,
                    "X-Linked-Etag": f'"{f.sha256}"',
                    "X-Linked-Size": str(self.hub.faults.listed_size.get(f.path, f.size)),
                    "ETag": f'"{f.blob_id}"',
                },
            )
            return
        self._send_file(f, {**common, "ETag": f'"{f.blob_id}"'})

    # -- the storage host ---------------------------------------------------------------------

    def _storage(self, path: str) -> None:
        auth = self.headers.get("Authorization")
        if auth:
            self.hub.auth_seen_by_storage.append(auth)
        m = re.match(r"^/lfs/([^/]+/[^/]+)/([0-9a-f]{64})/(.+)$", path)
        repo = self.hub.repos.get(m[1]) if m else None
        f = repo.file(m[3]) if repo is not None and m else None
        if f is None or m is None or f.sha256 != m[2]:
            self._reply(404, b"NoSuchKey")
            return
        self._send_file(f, {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"})

    def _send_file(self, f: HostedFile, headers: dict[str, str]) -> None:
        size = f.size
        start, end = 0, size
        status = 200
        wanted = self.headers.get("Range")
        if wanted and not self.hub.faults.ignore_range:
            m = _RANGE.match(wanted.strip())
            if m is None or int(m[1]) >= size:
                self._reply(416, b"", {"Content-Range": f"bytes */{size}"})
                return
            start = int(m[1])
            end = min(size, int(m[2]) + 1) if m[2] else size
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{size}"}
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        with self.hub._lock:
            self.hub.ranges.setdefault(f.path, []).append((start, end))
        cut = self.hub._take_cut(f.path)
        flip = self.hub.faults.corrupt.get(f.path)
        sent = 0
        try:
            for pos, chunk in _read(f.source, start, end):
                if flip is not None and pos <= flip < pos + len(chunk):
                    data = bytearray(chunk)
                    data[flip - pos] ^= 0xFF
                    chunk = bytes(data)
                if cut is not None and sent + len(chunk) > cut:
                    chunk = chunk[: cut - sent]
                    self.wfile.write(chunk)
                    self.hub._count(f.path, len(chunk))
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(chunk)
                self.hub._count(f.path, len(chunk))
                sent += len(chunk)
                if self.hub.faults.chunk_delay_s:
                    time.sleep(self.hub.faults.chunk_delay_s)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (as it should on a refusal)


def _read(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as src:
        src.seek(start)
        pos = start
        while pos < end:
            chunk = src.read(min(_CHUNK, end - pos))
            if not chunk:
                return
            yield pos, chunk
            pos += len(chunk)
