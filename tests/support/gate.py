"""The correctness gate with both servers up: the drafting-on texts generated here (greedy, as
the benchmark's own samples are), then the product's ``gate_against`` on the drafting-off one."""

from __future__ import annotations

from collections.abc import Sequence

from mtpstudio.core.bench.client import BenchClient
from mtpstudio.core.bench.gate import GateReport, gate_against
from mtpstudio.core.bench.prompts import BenchPrompt
from mtpstudio.core.bench.target import BenchTarget


def gate_both(
    drafting_on: BenchTarget,
    drafting_off: BenchTarget,
    prompts: Sequence[BenchPrompt],
    n_predict: int,
) -> GateReport:
    """Generate every prompt on ``drafting_on``, then compare ``drafting_off``'s texts to them."""
    with BenchClient(drafting_on, 600.0) as on:
        samples = [on.complete(p.category, p.prompt, n_predict) for p in prompts]
    return gate_against(drafting_off, samples, drafting_on.name, prompts, n_predict)
