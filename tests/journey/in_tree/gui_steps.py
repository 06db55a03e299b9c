"""One GUI step of the journey, run as the desktop user with the venv's Python inside the booted
tree: the wizard (offscreen) on the user's tiny model, driven the way a user clicks.

    gui_steps.py apply|revert|export|unit-load OUT.json

It writes its PID to ``$JOURNEY_PID_FILE`` and, before any privileged click, waits for
``$JOURNEY_AGENT_READY`` (the test's polkit agent registered for this process). The result
(what the page showed) goes to OUT.json. The real system is reached as the window reaches it:
``SystemAccess()`` (pkexec, the helper at /usr/lib/mtpstudio, systemctl).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.schema import ModelChoice, Plan
from mtpstudio.ui.app import ensure_application
from mtpstudio.ui.wizard import MtpWizard, PageId

HOME = Path.home()
MODEL = HOME / "models" / "tiny-mtp.gguf"
WAIT_S = 600.0


def wait_file(path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout:.0f} s")
        time.sleep(0.1)


def go_to(wizard: MtpWizard, page_id: int) -> None:
    """Press Next until the page is shown, as a user does."""
    wizard.show()
    while wizard.currentId() < page_id:
        before = wizard.currentId()
        wizard.next()
        wizard.tasks.wait_idle(120)
        if wizard.currentId() == before:
            raise RuntimeError(f"stuck on page {before}")


def outcome(page: Any) -> dict[str, Any]:
    o = page.action.outcome
    return {"sentence": o.sentence, "tone": o.tone.name if o.tone else None,
            "details": o.details.toPlainText()}  # fmt: skip


def agent_ready() -> None:
    wait_file(os.environ["JOURNEY_AGENT_READY"])


def apply_session(wizard: MtpWizard) -> dict[str, Any]:
    go_to(wizard, PageId.DESKTOP)
    page = wizard.desktop_page
    wizard.tasks.wait_idle(120)
    row = page.rows[DesktopReclaim.LLVMPIPE]
    result: dict[str, Any] = {"button": row.apply_button.text(),
                              "enabled": row.apply_button.isEnabled()}  # fmt: skip
    row.apply_button.click()  # "Apply llvmpipe session…": the preview first
    wizard.tasks.wait_idle(120)
    box = page.preview_box
    result["preview"] = {
        "shown": box.isVisibleTo(page),
        "install_button": box.install_button.text(),
        "notes": box.notes.text(),
        "files": [[box.files.topLevelItem(i).text(c) for c in range(2)]
                  for i in range(box.files.topLevelItemCount())],
    }  # fmt: skip
    if not box.isVisibleTo(page):
        result["outcome"] = outcome(page)
        return result
    agent_ready()
    box.install_button.click()  # polkit asks the test's agent for the password here
    wizard.tasks.wait_idle(WAIT_S)
    result["outcome"] = outcome(page)
    result["installed"] = (
        [[path, action] for path, action in page.last_answer.changes]
        if (page.last_answer is not None)
        else []
    )
    result["groups"] = list(page.groups)
    return result


def revert(wizard: MtpWizard) -> dict[str, Any]:
    go_to(wizard, PageId.DESKTOP)
    page = wizard.desktop_page
    wizard.tasks.wait_idle(120)
    result: dict[str, Any] = {"installed_label": page.installed_label.text(),
                              "revert_enabled": page.revert_button.isEnabled()}  # fmt: skip
    agent_ready()
    page.revert_button.click()
    wizard.tasks.wait_idle(WAIT_S)
    result["outcome"] = outcome(page)
    wizard.tasks.wait_idle(60)
    result["installed_label_after"] = page.installed_label.text()
    return result


def export(wizard: MtpWizard) -> dict[str, Any]:
    go_to(wizard, PageId.SERVICE)
    page = wizard.service_page
    wizard.tasks.wait_idle(120)
    target = HOME / "export-gui" / "mtpstudio-llama.service"
    target.parent.mkdir(exist_ok=True)
    page.ask_export_path = lambda: target  # the save dialog, answered
    page.export_button.click()
    result: dict[str, Any] = {"outcome": outcome(page), "unit": page.views["unit"].toPlainText()}
    if page.last_set is not None:
        result["commands"] = list(page.last_set.commands)
        result["files"] = sorted(p.name for p in target.parent.iterdir())
    return result


def unit_load(wizard: MtpWizard) -> dict[str, Any]:
    """The Launch page as the user opens it while the installed unit runs: its Memory tab shows
    what the unit compared after its last load (read from the unit's journal)."""
    go_to(wizard, PageId.LAUNCH)
    page = wizard.launch_page
    wizard.tasks.wait_idle(120)
    label = page.memory_tab.unit_label
    return {"unit_load_shown": label.isVisibleTo(page.memory_tab), "unit_load": label.text()}


def main() -> int:
    step, out = sys.argv[1], Path(sys.argv[2])
    Path(os.environ["JOURNEY_PID_FILE"]).write_text(str(os.getpid()))
    ensure_application()
    result: dict[str, Any] = {"step": step}
    wizard = MtpWizard(Plan(model=ModelChoice(path=MODEL)), remember=False)
    try:
        wizard.tasks.wait_idle(120)
        steps = {"apply": apply_session, "revert": revert, "export": export, "unit-load": unit_load}
        result |= steps[step](wizard)
    except Exception:  # the report says what happened; the test fails on it
        result["error"] = traceback.format_exc()
    finally:
        wizard.tasks.shutdown()
        out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
