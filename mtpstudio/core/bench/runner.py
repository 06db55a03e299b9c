"""Run the nine-category benchmark against a live server: warm-up, repeats, metrics cross-check."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

from mtpstudio.core.bench.client import BenchClient, CompletionSample, metric_counters
from mtpstudio.core.bench.prompts import WARMUP, BenchPrompt
from mtpstudio.core.bench.results import BenchReport, BenchSettings, CategoryResult, MetricsCheck
from mtpstudio.core.bench.target import (
    BenchCancelled,
    BenchProgress,
    BenchTarget,
    CancelToken,
    ProgressCallback,
    no_progress,
)
from mtpstudio.core.bench.vram import VramSampler
from mtpstudio.core.errors import BenchError


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def spec_types_request_drafting(spec_types: str | None) -> bool | None:
    """Upstream echoes ``speculative.types`` (e.g. 'none,draft-mtp') in generation_settings."""
    if spec_types is None:
        return None
    return any(t.strip() not in ("", "none") for t in spec_types.split(","))


class BenchSession:
    """The benchmark's state on one target; A/B drives two sessions in turn.

    Threading: one session belongs to one thread; ``cancel`` may be set from any thread.
    """

    def __init__(
        self,
        target: BenchTarget,
        settings: BenchSettings,
        *,
        cancel: CancelToken | None = None,
        progress: ProgressCallback = no_progress,
        total_requests: int = 0,
    ) -> None:
        self.target = target
        self.settings = settings
        self.cancel = cancel or CancelToken()
        self.progress = progress
        self.total_requests = total_requests
        self.done = 0
        self.client = BenchClient(target, settings.timeout_s)
        self.report = BenchReport(
            label=target.name,
            flavour=target.flavour.value,
            base_url=target.base_url,
            endpoint=self.client.endpoint,
            settings=settings,
            started_at=utc_now(),
            drafting_requested=target.drafting_requested,
            plan_json=None if target.plan is None else target.plan.to_json(),
            engine_build=target.engine_build,
            device=target.device,
            env=dict(target.env),
        )
        self._metrics_before: dict[str, float] | None = None

    def close(self) -> None:
        self.client.close()

    def _request(self, prompt: BenchPrompt, phase: str) -> CompletionSample:
        self.cancel.raise_if_cancelled()
        sample = self.client.complete(
            prompt.category,
            prompt.prompt,
            self.settings.n_predict,
            temperature=self.settings.temperature,
            ignore_eos=self.settings.ignore_eos,
            cancel=self.cancel,
        )
        if self.report.drafting_requested is None:
            self.report.drafting_requested = spec_types_request_drafting(sample.speculative_types)
        return sample

    def warm_up(self, prompt: BenchPrompt) -> None:
        """One request whose figures are kept aside (never in the rows or the totals)."""
        self.progress(BenchProgress(self.target.name, "warmup", prompt.category, 0, 1))
        self.report.warmup = self._request(prompt, "warmup")

    def begin_measuring(self) -> None:
        self._metrics_before = self.client.metrics()

    def run_category(self, prompt: BenchPrompt) -> CategoryResult:
        """All repeats of one category; the row is added only when every repeat finished."""
        samples: list[CompletionSample] = []
        for _ in range(max(1, self.settings.repeats)):
            samples.append(self._request(prompt, "measure"))
            self.done += 1
            self.progress(
                BenchProgress(
                    self.target.name, "measure", prompt.category, self.done, self.total_requests
                )
            )
        row = CategoryResult(prompt.category, tuple(samples))
        self.report.categories.append(row)
        self.report.wall_s_total += sum(s.wall_ms for s in samples) / 1000.0
        return row

    def finish_measuring(self) -> None:
        """Compare the server's /metrics counters with the report's sums (when it has them)."""
        if self._metrics_before is None:
            return
        after = self.client.metrics()
        if after is None:
            return
        before = metric_counters(self._metrics_before)
        now = metric_counters(after)
        delta = {k: now[k] - before.get(k, 0.0) for k in now}
        expected = {"predicted": self.report.total_predicted}
        if "draft" in delta:
            expected["draft"] = self.report.total_draft
            expected["accepted"] = self.report.total_draft_accepted
        self.report.metrics = MetricsCheck(delta=delta, expected=expected)

    def fail(self, exc: BenchError) -> None:
        if isinstance(exc, BenchCancelled):
            self.report.cancelled = True
            self.report.error = "cancelled; the finished categories are kept"
        else:
            self.report.error = str(exc) + (f" {exc.hint}" if exc.hint else "")


def run_bench(
    target: BenchTarget,
    prompts: Sequence[BenchPrompt],
    settings: BenchSettings | None = None,
    *,
    cancel: CancelToken | None = None,
    progress: ProgressCallback = no_progress,
    vram: VramSampler | None = None,
) -> BenchReport:
    """Benchmark ``target`` on ``prompts``; never raises for a server that fails mid-run.

    The report keeps every finished category; ``report.error`` says what stopped the run.
    """
    settings = settings or BenchSettings()
    session = BenchSession(
        target,
        settings,
        cancel=cancel,
        progress=progress,
        total_requests=len(prompts) * max(1, settings.repeats),
    )
    sampler = vram or VramSampler.disabled()
    try:
        with sampler:
            if settings.warmup and prompts:
                session.warm_up(WARMUP)
            session.begin_measuring()
            for prompt in prompts:
                session.run_category(prompt)
            session.finish_measuring()
    except BenchError as exc:
        session.fail(exc)
    except KeyboardInterrupt:  # Ctrl-C in a terminal: keep what finished, like a cancel
        session.fail(BenchCancelled("interrupted"))
    finally:
        session.close()
    session.report.vram = sampler.peaks()
    return session.report
