"""Predicted vs logged per device for the loads split over two or three devices, and the fit.

Reads the recordings in ``tests/fixtures/split`` (``record_split.py``: llama.cpp b11434 built
with the RPC backend, two or three ``ggml-rpc-server`` processes on loopback, the full-size
zero-weight Qwen3.6 27B and 35B-A3B) and prints every logged buffer beside the planner's
figure for the same device, the largest error per segment, and for each load the engine's
``--fit`` left to place the weights, its layouts per device beside the planner's.

    python benchmarks/split_accuracy.py [FIXTURE_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # devkit/ sits in the checkout; the wheel does not ship it

from devkit.arch_gguf import hybrid_spec  # noqa: E402
from devkit.budget_check import render_table  # noqa: E402
from devkit.split_compare import (  # noqa: E402
    SplitCase,
    device_rows,
    engine_layouts,
    predicted_budget,
)
from mtpstudio.core.catalog.header import write_card_header  # noqa: E402
from mtpstudio.core.catalog.models import model_card_info  # noqa: E402
from mtpstudio.core.memory.engine_fit import Layout  # noqa: E402
from mtpstudio.core.model.gguf import read_model_info  # noqa: E402
from mtpstudio.core.model.info import ModelInfo  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "split"


def model_for(name: str, tmp: Path) -> ModelInfo:
    if name == "moe-8-layers":
        header = tmp / "moe-8-layers.gguf"
        write_card_header(hybrid_spec("moe", n_layer=8), header)
        return read_model_info(header)
    return model_card_info(name)


def _shown(layouts: tuple[Layout, ...] | None) -> str:
    return "no change" if layouts is None else "  ".join(x.label() for x in layouts)


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else FIXTURES
    cases = [SplitCase.read(p) for p in sorted(folder.glob("*.json"))]
    rows = []
    fits = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            if not case.loaded:
                reason = next(
                    (
                        ln.split(": ", 2)[-1]
                        for ln in case.log.splitlines()
                        if "split buffers" in ln
                    ),
                    "did not load",
                )
                print(f"{case.name}: the engine refused it: {reason.strip()}")
                continue
            model = model_for(case.model, Path(tmp))
            rows += device_rows(case, model)
            if case.plan.runtime.moe.value == "fit":
                budget = predicted_budget(case, model)
                search = budget.split.search if budget.split is not None else None
                planner = search.layouts if search is not None else None
                engine = engine_layouts(case.log, len(case.device_mib)).layouts
                fits.append((case.name, engine, planner))
    loads = len({r.config for r in rows})
    print(f"\nPredicted vs logged per device ({loads} loads; MiB):")
    for line in render_table(rows):
        print(line)
    print("\nThe engine's --fit over the devices vs the planner, (n_layer, n_part, overflow):")
    same = 0
    for name, engine, planner in fits:
        ok = engine == planner
        same += ok
        mark = "=" if ok else "DIFFERS"
        print(f"  {name:28} engine {_shown(engine):40} planner {_shown(planner):40} {mark}")
    print(f"  {same} of {len(fits)} equal")
    return 0 if all(r.ok for r in rows) and same == len(fits) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
