"""Render the Launch & benchmark page with a real run: docs/07-launch.png.

``mtpstudio gui --demo --screenshots DIR`` renders page 7 from the demo plan, which has no model
file to run, so it shows the latest run stored in the benchmark history (or the empty page).
This script shows the real thing: it generates the test bench's tiny hybrid MTP model, opens the
wizard on a CPU plan for the upstream build (scripts/build_engines.py), starts the server from
the page, waits for the memory reconciliation, runs the nine-category benchmark from the page
and grabs the window; then it stops the server. Nothing of the user's is read or written (the
XDG folders point into a temporary folder).

    .venv/bin/python scripts/screenshot_launch.py [--out docs/07-launch.png] [--n-predict 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "07-launch.png")
    parser.add_argument("--n-predict", type=int, default=64)
    parser.add_argument("--tabs", type=Path, metavar="DIR", help="also grab every tab into DIR")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="mtpstudio-shot-"))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("MTPSTUDIO_ENGINE_CACHE", str(cache / "mtpstudio" / "engines"))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        os.environ[name] = str(scratch / name.lower())
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtWidgets import QApplication
    from support.servers import engine_binary, free_port
    from support.tiny_models import make_model

    from mtpstudio.core.detect.gather import detect_all
    from mtpstudio.core.plan.io import plan_with
    from mtpstudio.core.plan.schema import Plan
    from mtpstudio.ui.pages.launch import BENCH_KEY, ServerExitChoice
    from mtpstudio.ui.screenshots import SCREENSHOT_SIZE
    from mtpstudio.ui.server_process import ServerPhase
    from mtpstudio.ui.wizard import MtpWizard, PageId

    app = QApplication.instance() or QApplication(sys.argv[:1])
    model = make_model("hybrid-mtp", scratch / "tiny-qwen35moe-mtp.gguf", dtype="q8_0")
    plan = plan_with(
        Plan(),
        {
            "device": "cpu",
            "model.path": str(model),
            "model.card": None,
            "engine.flavour": "upstream",
            "engine.binary": str(engine_binary("upstream")),
            "runtime.ctx": 4096,
            "runtime.threads": 2,
            "mtp.enabled": True,
            "mtp.draft_max": 2,
            "mtp.draft_p_min": 0.0,
            "server.port": free_port(),
        },
    )
    wizard = MtpWizard(plan, detector=lambda: detect_all(include_engines=False), remember=False)
    wizard.resize(SCREENSHOT_SIZE)
    wizard.show()

    def spin_until(done: object, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:  # type: ignore[operator]
            app.processEvents()
            time.sleep(0.005)
        return bool(done())  # type: ignore[operator]

    wizard.tasks.wait_idle(60)
    while wizard.currentId() < PageId.LAUNCH:
        wizard.next()
        wizard.tasks.wait_idle(60)
    page = wizard.launch_page
    page.ask_server_exit = lambda: ServerExitChoice.STOP  # type: ignore[method-assign]
    try:
        page.start_server()
        if not spin_until(lambda: page.server.phase is ServerPhase.HEALTHY, 120):
            print(f"the server did not start: {page.problem.sentence}")
            return 1
        spin_until(lambda: page.memory.rowCount() > 0, 60)
        page.n_predict.setValue(args.n_predict)
        page.run_benchmark()
        spin_until(lambda: not wizard.tasks.is_running(BENCH_KEY), 600)
        spin_until(lambda: False, 0.3)  # let the last log lines and the charts land
        if args.tabs is not None:
            args.tabs.mkdir(parents=True, exist_ok=True)
            page.search.setText("buffer size")
            for index in range(page.tabs.count()):
                page.tabs.setCurrentIndex(index)
                spin_until(lambda: False, 0.1)
                wizard.grab().save(str(args.tabs / f"07-launch-tab{index}.png"), "PNG")
        page.search.clear()
        page.tabs.setCurrentIndex(0)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if not wizard.grab().save(str(args.out), "PNG"):
            print(f"cannot write {args.out}")
            return 1
        bench = page.bench
        summary = page.summary.text() if bench is not None else "no benchmark result"
        print(f"{args.out}: {summary}")
    finally:
        wizard.done(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
