"""The dense-model journey in the real window: ``xvfb_journey.py HOME ENGINE`` (run by
test_journeys.py with ``QT_QPA_PLATFORM=xcb`` on an Xvfb display and ``HOME`` set).

Takes the path of ``test_dense_model_on_a_16_gb_card_gets_layers_on_the_cpu`` through a real
``QApplication`` on the xcb platform, waiting with ``QTest.qWait``, and prints one JSON line:
the platform, the window size, the idle CPU shares, the plan, the command line, the unit
scope and the exported unit. Any failed step exits 1 with the assertion.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parents[2]))  # devkit/, which is not installed

from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from mtpstudio.ui.app import ensure_application
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.wizard import MtpWizard
from ui.journey import DENSE_FILE, Journey, UserHome


def main() -> int:
    home = UserHome(Path(sys.argv[1]), Path(sys.argv[2]))
    ensure_application()
    wizard = MtpWizard(None, store=StateStore(home.home / ".config" / "mtpstudio"))
    wizard.resize(1366, 768)
    wizard.show()
    try:
        assert wizard.tasks.wait_idle(120)
        j = Journey(wizard, home, QTest.qWait)
        idle: list[float] = []
        j.to_budget("rtx-4060-ti-16gb", DENSE_FILE)
        wizard.budget_page.fit_offload_button.click()
        j.settle()
        idle.append(j.assert_idle())
        exported = j.to_the_end()
        idle.append(j.assert_idle())
        size = wizard.size()
        result = {
            "platform": QGuiApplication.platformName(),
            "window": [size.width(), size.height()],
            "idle": idle,
            "plan": json.loads(wizard.plan.to_json()),
            "argv": j.command(),
            "scope": wizard.service_page.scope.value,
            "exported": exported,
        }
    except AssertionError as exc:
        print(f"journey failed: {exc}", file=sys.stderr)
        return 1
    finally:
        wizard.tasks.shutdown()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
