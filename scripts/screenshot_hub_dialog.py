"""Render the Model page's Hugging Face dialog with a real listing: ten quants of Qwen3.6-35B-A3B.

The quants (zero-weight, full size, two split) are served over real HTTP by the local Hub of
``devkit.hub_server``; the dialog lists them, reads every header and plans it for a
catalogue RTX 3060 12 GB at 32k, then the window is grabbed. Nothing of the user's is read or
written (the XDG folders and HF_HOME point into a temporary folder).

    .venv/bin/python scripts/screenshot_hub_dialog.py [--out hub-dialog.png] [--gpu rtx-3060-12gb]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # devkit/ sits in the checkout; the wheel does not ship it


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("hub-dialog.png"))
    parser.add_argument("--gpu", default="rtx-3060-12gb")
    parser.add_argument("--ctx", type=int, default=32768)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="mtpstudio-hub-shot-"))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        os.environ[name] = str(scratch / name.lower())
    os.environ["HF_HOME"] = str(scratch / "hf")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QApplication

    from devkit.hub_repo import QWEN_QUANTS, quant_repo
    from devkit.hub_server import HubTestServer
    from mtpstudio.core.catalog.qwen36 import QWEN36_35B_A3B_IQ4_XS
    from mtpstudio.core.hub.client import HubClient
    from mtpstudio.core.plan.io import plan_with
    from mtpstudio.core.plan.schema import Plan
    from mtpstudio.ui.pages.hub_dialog import HubModelsDialog
    from mtpstudio.ui.state import WizardState
    from mtpstudio.ui.tasks import TaskManager

    app = QApplication.instance() or QApplication(sys.argv[:1])
    repo_id = "unsloth/Qwen3.6-35B-A3B-GGUF"
    repo = quant_repo(scratch / "repo", repo_id, QWEN36_35B_A3B_IQ4_XS, QWEN_QUANTS)
    plan = plan_with(Plan(), {"device": args.gpu, "runtime.ctx": args.ctx})
    tasks = TaskManager()
    state = WizardState(plan, tasks, detector=lambda: None)  # type: ignore[arg-type, return-value]
    with HubTestServer([repo]) as hub:
        dialog = HubModelsDialog(state, client=HubClient(hub.endpoint))
        dialog.show()
        dialog.repo_edit.setText(repo_id)
        dialog.list_files()
        if not tasks.wait_idle(120) or dialog.listing is None:
            print(f"the listing did not finish: {dialog.notice.text()}", file=sys.stderr)
            return 1
        for _ in range(5):
            QCoreApplication.processEvents()
        if not dialog.grab().save(str(args.out), "PNG"):
            print(f"cannot write {args.out}", file=sys.stderr)
            return 1
        dialog.close()
    tasks.shutdown()
    print(f"{args.out}: {dialog.width()}x{dialog.height()}")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
