"""What a benchmark runs against (a live server and its metadata) and how to get one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from mtpstudio.core.cancel import CancelToken as BaseCancelToken
from mtpstudio.core.errors import BenchError
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.schema import Plan


@dataclass(frozen=True)
class BenchTarget:
    """A running llama-server to benchmark.

    Attributes:
        base_url: ``http://HOST:PORT`` (no trailing slash).
        flavour: which engine family answers there; picks the endpoint with draft counts.
        label: a short name for reports (``A``, ``mtp-on``, the plan file name ...).
        drafting_requested: True when the server was started with MTP or a draft model; None
            lets the benchmark find out from the server's own answers (upstream says it).
        api_key: sent as ``Authorization: Bearer``; None sends nothing.
        plan: the Plan the server was launched from, when there is one.
        engine_build: how the engine build describes itself (version, commit).
        device: the device the server runs on (``CUDA0``, ``cpu`` ...).
        env: extra environment the server was started with (``GGML_CUDA_DISABLE_GRAPHS`` ...).
    """

    base_url: str
    flavour: EngineFlavour = EngineFlavour.UPSTREAM
    label: str = ""
    drafting_requested: bool | None = None
    api_key: str | None = None
    plan: Plan | None = None
    engine_build: str | None = None
    device: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.label or self.base_url


class ServerLauncher(Protocol):
    """Starts a server from a Plan and yields it as a BenchTarget; leaving the context stops it.

    ``env`` is added to the server's environment (the CUDA-graphs control passes
    ``GGML_CUDA_DISABLE_GRAPHS=1``). Failing to start raises an ``MtpStudioError``.
    """

    def __call__(
        self, plan: Plan, *, label: str, env: Mapping[str, str]
    ) -> AbstractContextManager[BenchTarget]: ...


class CancelToken(BaseCancelToken):
    """Set from any thread; the benchmark stops before its next request and drops a stream."""

    def cancelled_error(self) -> Exception:
        return BenchCancelled("the benchmark was cancelled")


class BenchCancelled(BenchError):
    """Raised inside the benchmark when its CancelToken is set (reports keep what finished)."""


@dataclass(frozen=True)
class BenchProgress:
    """One step of a benchmark, for progress bars: ``done`` of ``total`` requests."""

    label: str
    phase: str  # "warmup", "measure", "gate", "concurrency"
    category: str
    done: int
    total: int


ProgressCallback = Callable[[BenchProgress], None]


def no_progress(_: BenchProgress) -> None:
    """The default progress callback: ignore."""
