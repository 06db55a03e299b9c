"""Time one budget recompute on the demo card (the live bar follows a slider with it).

Run: .venv/bin/python benchmarks/bench_budget.py
Target: under 2 ms per recompute.
"""

from __future__ import annotations

import statistics
import time

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD, gpu_card
from mtpstudio.core.catalog.models import DEFAULT_MODEL_CARD, model_card_info
from mtpstudio.core.engines.profiles.upstream import MEMORY as UPSTREAM_FACTS
from mtpstudio.core.memory.budget import compute_budget
from mtpstudio.core.memory.placement import ModelWeights
from mtpstudio.core.memory.targets import catalogue_target
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.plan.schema import Plan


def main() -> None:
    model = model_card_info(DEFAULT_MODEL_CARD)
    weights = ModelWeights.from_model(model)
    target = catalogue_target(gpu_card(DEFAULT_GPU_CARD), Plan().desktop)
    plans = [
        plan_from_dict({"runtime": {"ctx": ctx, "moe": "n_cpu_moe", "n_cpu_moe": 24}})
        for ctx in range(4096, 262145, 4096)
    ]
    for p in plans[:5]:  # warm-up
        compute_budget(p, model, target, UPSTREAM_FACTS, weights=weights)
    times = []
    for _ in range(5):
        for p in plans:
            start = time.perf_counter()
            compute_budget(p, model, target, UPSTREAM_FACTS, weights=weights)
            times.append((time.perf_counter() - start) * 1000)
    print(f"budget recompute on {DEFAULT_MODEL_CARD} / {DEFAULT_GPU_CARD}: {len(times)} runs")
    print(
        f"  mean {statistics.mean(times):.3f} ms, median {statistics.median(times):.3f} ms, "
        f"max {max(times):.3f} ms (target < 2 ms)"
    )
    start = time.perf_counter()
    ModelWeights.from_model(model)
    print(
        f"  once per model: grouping {len(model.tensors)} tensors took "
        f"{(time.perf_counter() - start) * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
