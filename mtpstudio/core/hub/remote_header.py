"""GGUF headers of remote files, read by HTTP range requests (a few MB, never the weights).

The first range of a model's first file is ``FIRST_RANGE`` bytes (the other parts of a split
model hold only their tensor table: ``PART_RANGE``); when the project's header reader says the
header goes on (``GgufHeaderIncomplete``), the next bytes are fetched, half as many again as
held at least, until it parses or ``MAX_HEADER_BYTES`` is reached. A whole listing has a total
budget too (``listing_budget``): every model's first ranges plus ``EXTRA_LISTING_BYTES`` shared
by the headers that need more, so a repository of hostile files cannot make mtpstudio read
``MAX_HEADER_BYTES`` for each of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Final

from mtpstudio.core.cancel import CancelToken
from mtpstudio.core.errors import GgufError, HubError, MtpStudioError
from mtpstudio.core.hub.client import HubClient, Repo
from mtpstudio.core.hub.listing import RemoteModel
from mtpstudio.core.model.gguf import (
    GgufHeaderIncomplete,
    HeaderBytes,
    model_info_from_gguf,
    read_gguf_bytes,
)
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.units import MIB

__all__ = [
    "EXTRA_LISTING_BYTES",
    "FIRST_RANGE",
    "MAX_HEADER_BYTES",
    "PART_RANGE",
    "HeaderBudget",
    "RemoteHeader",
    "listing_budget",
    "read_remote_header",
    "read_remote_headers",
]

FIRST_RANGE: Final = 8 * MIB
"""Bytes asked for first: a header with Qwen3.6's 248k-token vocabulary is about 8 MB, and
every parse of a partial header costs as much as a whole one (so fewer, larger reads)."""

PART_RANGE: Final = 256 * 1024
"""Bytes asked for first from the second and later parts of a split model."""

MAX_HEADER_BYTES: Final = 64 * MIB
"""A header bigger than this is not read remotely (no real model's comes close)."""

EXTRA_LISTING_BYTES: Final = 64 * MIB
"""What the headers of one listing may read beyond their first ranges, all together."""

_PROJECTOR_ARCHS: Final = frozenset({"clip", "mmproj"})
_PROJECTOR: Final = (
    "a vision projector (mmproj): it goes with a model (llama-server --mmproj), it is not one "
    "to run"
)


@dataclass(frozen=True)
class RemoteHeader:
    """One remote model's header: its facts, or the one sentence why they cannot be had.

    ``bytes_read`` and ``requests`` count what was fetched for it (every part).
    """

    model: RemoteModel
    info: ModelInfo | None
    error: str | None
    bytes_read: int
    requests: int


@dataclass
class HeaderBudget:
    """Bytes the header reads of one listing may still fetch (shared by its threads)."""

    total: int
    used: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, n: int, what: str) -> None:
        """Count ``n`` bytes about to be read; HubError when the budget would be exceeded."""
        with self._lock:
            if self.used + n > self.total:
                raise HubError(
                    f"{what}: the header reads of this repository reached their budget of "
                    f"{self.total / MIB:,.0f} MiB, so this header was not read further",
                    hint="Download the file and open it on the Model page instead.",
                )
            self.used += n


def listing_budget(
    models: Sequence[RemoteModel], first_range: int = FIRST_RANGE, extra: int = EXTRA_LISTING_BYTES
) -> HeaderBudget:
    """Every model's first ranges plus ``extra`` for the headers that need more."""
    total = extra
    for m in models:
        for i, part in enumerate(m.parts):
            total += min(part.size, first_range if i == 0 else min(PART_RANGE, first_range))
    return HeaderBudget(total)


class _Reader:
    """Fetches the start of each part of one model, more as the parser asks for it."""

    def __init__(
        self,
        client: HubClient,
        repo: Repo,
        model: RemoteModel,
        first_range: int,
        most: int,
        budget: HeaderBudget | None = None,
    ) -> None:
        self.budget = budget
        self.client = client
        self.repo = repo
        self.model = model
        self.first_range = first_range
        self.most = most
        self.held: list[bytes] = [b""] * len(model.parts)
        self.sizes = [p.size for p in model.parts]
        self.bytes_read = 0
        self.requests = 0

    def fetch(self, index: int, upto: int) -> None:
        part = self.model.parts[index]
        have = self.held[index]
        upto = min(upto, self.sizes[index])
        if upto > self.most:
            raise HubError(
                f"{part.name}: its header is larger than {self.most / MIB:g} MiB, more than "
                "mtpstudio reads remotely",
                hint="Download the file and open it on the Model page instead.",
            )
        if upto <= len(have):
            return
        if self.budget is not None:
            self.budget.take(upto - len(have), part.name)
        data, total = self.client.read_range(self.repo, part.path, len(have), upto)
        self.requests += 1
        self.bytes_read += len(data)
        self.sizes[index] = total
        self.held[index] = have + data

    def info(self, cancel: CancelToken | None) -> ModelInfo:
        for i in range(len(self.model.parts)):
            self.fetch(i, self.first_range if i == 0 else min(PART_RANGE, self.first_range))
        while True:
            if cancel is not None:
                cancel.raise_if_cancelled()
            parts = [
                HeaderBytes(p.path, data, size)
                for p, data, size in zip(self.model.parts, self.held, self.sizes, strict=True)
            ]
            try:
                header = read_gguf_bytes(parts)
            except GgufHeaderIncomplete as more:
                held = len(self.held[more.index])
                self.fetch(more.index, max(more.needed + MIB, held + held // 2))
                continue
            if header.architecture in _PROJECTOR_ARCHS:
                raise HubError(_PROJECTOR)
            return model_info_from_gguf(header)


def read_remote_header(
    client: HubClient,
    repo: Repo,
    model: RemoteModel,
    cancel: CancelToken | None = None,
    *,
    first_range: int = FIRST_RANGE,
    max_header: int = MAX_HEADER_BYTES,
    budget: HeaderBudget | None = None,
) -> RemoteHeader:
    """One model's header, or why not in one sentence (``budget``: the listing's, shared).

    Raises:
        HubError: only when the cause stops the whole repository (``whole_repo``: gated,
            not found, rate limited, no network); a file's own problem is the row's ``error``.
    """
    reader = _Reader(client, repo, model, first_range, max_header, budget)
    if model.is_projector:
        return RemoteHeader(model, None, _PROJECTOR, 0, 0)
    try:
        info = reader.info(cancel)
    except HubError as exc:
        if exc.whole_repo:
            raise
        return RemoteHeader(model, None, _sentence(exc, model), reader.bytes_read, reader.requests)
    except GgufError as exc:
        error = f"not a usable GGUF model: {_sentence(exc, model)}"
        return RemoteHeader(model, None, error, reader.bytes_read, reader.requests)
    return RemoteHeader(model, info, None, reader.bytes_read, reader.requests)


def read_remote_headers(
    client: HubClient,
    repo: Repo,
    models: Sequence[RemoteModel],
    *,
    cancel: CancelToken | None = None,
    progress: Callable[[int, int, RemoteHeader], None] | None = None,
    workers: int = 4,
    first_range: int = FIRST_RANGE,
    max_header: int = MAX_HEADER_BYTES,
    budget: HeaderBudget | None = None,
) -> list[RemoteHeader]:
    """Every model's header, a few at a time; ``progress(done, total, header)`` after each.

    Returns the headers in the order of ``models``. Stops at the first error that concerns the
    whole repository (raised) and when ``cancel`` is set (its exception). All reads together
    stay within ``budget`` (default: ``listing_budget(models, first_range)``); a header that
    would go beyond it is that row's error.
    """
    budget = budget if budget is not None else listing_budget(models, first_range)
    results: dict[int, RemoteHeader] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="gguf-header") as pool:
        pending: dict[Future[RemoteHeader], int] = {
            pool.submit(
                read_remote_header,
                client,
                repo,
                m,
                cancel,
                first_range=first_range,
                max_header=max_header,
                budget=budget,
            ): i
            for i, m in enumerate(models)
        }
        try:
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                if cancel is not None:
                    cancel.raise_if_cancelled()
                for future in done:
                    index = pending.pop(future)
                    results[index] = future.result()
                    if progress is not None:
                        progress(len(results), len(models), results[index])
        finally:
            for future in pending:
                future.cancel()
    return [results[i] for i in range(len(models))]


def _sentence(exc: MtpStudioError, model: RemoteModel) -> str:
    """The error's sentence without the file name the row already shows."""
    text = str(exc).rstrip(".")
    for part in model.parts:
        for name in (part.path, part.name):
            if text.startswith(f"{name}: "):
                return text[len(name) + 2 :]
    return text
