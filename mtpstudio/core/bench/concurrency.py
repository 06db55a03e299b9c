"""N parallel clients on one server: aggregate and per-client tokens per second."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mtpstudio.core.bench.client import BenchClient, CompletionSample
from mtpstudio.core.bench.prompts import WARMUP, BenchPrompt
from mtpstudio.core.bench.results import BenchSettings
from mtpstudio.core.bench.target import (
    BenchProgress,
    BenchTarget,
    CancelToken,
    ProgressCallback,
    no_progress,
)
from mtpstudio.core.errors import BenchError


@dataclass
class ClientResult:
    """One client's requests (it runs every prompt, starting at its own offset)."""

    index: int
    samples: list[CompletionSample] = field(default_factory=list)
    wall_s: float = 0.0
    error: str | None = None

    @property
    def predicted(self) -> int:
        return sum(s.predicted_n for s in self.samples)

    @property
    def tok_s(self) -> float | None:
        return self.predicted / self.wall_s if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "client": self.index,
            "n_requests": len(self.samples),
            "predicted": self.predicted,
            "draft": sum(s.draft_n for s in self.samples),
            "accepted": sum(s.accepted_n for s in self.samples),
            "wall_s": round(self.wall_s, 3),
            "tok_s": None if self.tok_s is None else round(self.tok_s, 2),
            "error": self.error,
        }


@dataclass
class ConcurrencyReport:
    """All clients together: tokens over the wall time from the first start to the last end."""

    label: str
    n_clients: int
    clients: list[ClientResult]
    wall_s: float

    @property
    def total_predicted(self) -> int:
        return sum(c.predicted for c in self.clients)

    @property
    def aggregate_tok_s(self) -> float | None:
        return self.total_predicted / self.wall_s if self.wall_s > 0 else None

    @property
    def error(self) -> str | None:
        return next((c.error for c in self.clients if c.error), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "concurrency": self.n_clients,
            "total_predicted": self.total_predicted,
            "wall_s": round(self.wall_s, 3),
            "aggregate_tok_s": _r(self.aggregate_tok_s),
            "clients": [c.to_dict() for c in self.clients],
            "error": self.error,
        }


def run_concurrent(
    target: BenchTarget,
    prompts: Sequence[BenchPrompt],
    n_clients: int,
    settings: BenchSettings | None = None,
    *,
    cancel: CancelToken | None = None,
    progress: ProgressCallback = no_progress,
) -> ConcurrencyReport:
    """``n_clients`` threads, each streaming every prompt once (client i starts at prompt i).

    The server needs at least ``n_clients`` slots (``-np``) to serve them in parallel.
    """
    if n_clients < 1:
        raise BenchError("concurrency must be at least 1")
    settings = settings or BenchSettings()
    cancel = cancel or CancelToken()
    results = [ClientResult(i) for i in range(n_clients)]
    lock = threading.Lock()
    done = [0]
    total = n_clients * len(prompts)

    def client_job(result: ClientResult) -> None:
        order = [prompts[(result.index + k) % len(prompts)] for k in range(len(prompts))]
        start = time.perf_counter()
        with BenchClient(target, settings.timeout_s) as client:
            try:
                for prompt in order:
                    cancel.raise_if_cancelled()
                    result.samples.append(
                        client.complete(
                            prompt.category,
                            prompt.prompt,
                            settings.n_predict,
                            temperature=settings.temperature,
                            ignore_eos=settings.ignore_eos,
                            cancel=cancel,
                        )
                    )
                    with lock:
                        done[0] += 1
                        step = done[0]
                    progress(
                        BenchProgress(target.name, "concurrency", prompt.category, step, total)
                    )
            except BenchError as exc:
                result.error = str(exc)
                cancel.cancel()  # one failing client ends the others too
        result.wall_s = time.perf_counter() - start

    if settings.warmup and prompts:
        with BenchClient(target, settings.timeout_s) as client:
            client.complete(WARMUP.category, WARMUP.prompt, settings.n_predict)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n_clients, thread_name_prefix="bench-client") as pool:
        list(pool.map(client_job, results))
    wall = time.perf_counter() - start
    return ConcurrencyReport(target.name, n_clients, results, wall)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
