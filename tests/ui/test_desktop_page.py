"""Desktop VRAM page: holders and options from detection, the Plan it writes, and Apply → preview
→ the real helper code against a temporary root → Revert, then the check after the login."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot
from support.helper_bench import make_root, snapshot

from mtpstudio.core.detect.models import GpuProcess
from mtpstudio.core.detect.processes import ProcessCategory
from mtpstudio.core.memory.targets import NVIDIA_PROFILE_DESKTOP_BYTES
from mtpstudio.core.plan.choices import DesktopReclaim
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.runner import SubprocessRunner
from mtpstudio.ui.system_access import SystemAccess
from mtpstudio.ui.widgets.common import Tone
from mtpstudio.ui.wizard import MtpWizard, PageId

from .conftest import MIB, WizardFactory, go_to, gpu_report, no_gpu_report

SESSION_STEM = "plasmawayland-llvmpipe-mtpstudio"
SESSION_FILE = f"usr/local/share/wayland-sessions/{SESSION_STEM}.desktop"
WRAPPER_FILE = "usr/local/lib/mtpstudio/startplasma-wayland-llvmpipe-mtpstudio"
PROFILE_FILE = "etc/nvidia/nvidia-application-profiles-rc.d/50-mtpstudio-desktop-vram.json"


PLASMA6 = Path(__file__).resolve().parent.parent / "fixtures" / "desktop" / "arch-plasma6"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root with Plasma 6's own session files (Arch's paths) and no display manager."""
    root = make_root(tmp_path / "root")
    shutil.copytree(PLASMA6 / "usr/share", root / "usr/share")
    return root


def desktop_wizard(
    make_wizard: WizardFactory, root: Path, environ: dict[str, str] | None = None, **kw: object
) -> MtpWizard:
    wizard = make_wizard(**kw)
    wizard.desktop_page.system = SystemAccess(
        root=root, runner=SubprocessRunner(), environ=environ or {}
    )
    go_to(wizard, PageId.DESKTOP)
    wizard.tasks.wait_idle(30)
    return wizard


def test_holders_by_category_and_options_ranked_by_cost(
    make_wizard: WizardFactory, root: Path
) -> None:
    page = desktop_wizard(make_wizard, root).desktop_page
    categories = {
        page.holders.topLevelItem(i).text(0): page.holders.topLevelItem(i).text(3)
        for i in range(page.holders.topLevelItemCount())
    }
    # kwin_wayland 700 + Xwayland 80; plasmashell 310; firefox is not the desktop
    assert categories == {"compositor": "780 MiB", "desktop shell": "310 MiB"}
    compositor = page.holders.topLevelItem(0)
    assert [compositor.child(i).text(0) for i in range(compositor.childCount())] == [
        "kwin_wayland",
        "Xwayland",
    ]
    assert "1,090 MiB" in page.summary.text()

    options = page.options()
    assert [o.kind for o in options] == [
        DesktopReclaim.NVIDIA_PROFILE,
        DesktopReclaim.IGPU,
        DesktopReclaim.LLVMPIPE,
    ]
    saved = {o.kind: o.likely_saved_bytes // MIB for o in options}
    assert saved == {
        DesktopReclaim.NVIDIA_PROFILE: (1090 * MIB - NVIDIA_PROFILE_DESKTOP_BYTES) // MIB,
        DesktopReclaim.IGPU: 1090,
        DesktopReclaim.LLVMPIPE: 1090 - 130,
    }
    assert "~960 MiB" in page.rows[DesktopReclaim.LLVMPIPE].radio.text()
    # the iGPU exists (AMD Raphael) but lists no connector and no DRM node: say so, no button
    igpu = page.rows[DesktopReclaim.IGPU]
    assert "AMD Raphael" in igpu.detail.text()
    assert not igpu.apply_button.isEnabled()
    assert page.rows[DesktopReclaim.LLVMPIPE].apply_button.isEnabled()


def test_igpu_option_names_the_connector_to_use(make_wizard: WizardFactory, root: Path) -> None:
    from mtpstudio.core.detect.models import Connector

    report = gpu_report()
    igpu = report.gpus[1]
    igpu.drm_card = "card1"
    igpu.pci_bus_id = "0000:0e:00.0"
    igpu.connectors = [Connector(card="card1", name="HDMI-A-1", status="disconnected")]
    page = desktop_wizard(make_wizard, root, report=report).desktop_page
    row = page.rows[DesktopReclaim.IGPU]
    assert "HDMI-A-1" in row.detail.text() and "motherboard" in row.detail.text()
    assert row.apply_button.isEnabled()


def test_choosing_an_option_writes_the_plan(
    make_wizard: WizardFactory, root: Path, qtbot: QtBot
) -> None:
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    assert page.keep_radio.isChecked() and wizard.plan.desktop is DesktopReclaim.NONE
    qtbot.mouseClick(page.rows[DesktopReclaim.NVIDIA_PROFILE].radio, Qt.MouseButton.LeftButton)
    assert wizard.plan.desktop is DesktopReclaim.NVIDIA_PROFILE
    page.rows[DesktopReclaim.LLVMPIPE].radio.setChecked(True)
    assert wizard.plan.desktop is DesktopReclaim.LLVMPIPE
    page.keep_radio.setChecked(True)
    assert wizard.plan.desktop is DesktopReclaim.NONE
    # a plan opened from elsewhere shows its choice
    wizard.state.set_plan(wizard.plan.model_copy(update={"desktop": DesktopReclaim.IGPU}))
    assert page.rows[DesktopReclaim.IGPU].radio.isChecked()


def test_catalogue_card_budget_follows_the_choice(make_wizard: WizardFactory, root: Path) -> None:
    wizard = desktop_wizard(
        make_wizard, root, plan=Plan(device="rtx-4070-super"), report=no_gpu_report()
    )
    page = wizard.desktop_page
    assert "typical" in page.summary.text() and "1,024 MiB" in page.summary.text()

    def desktop_segment() -> int:
        evaluation = wizard.state.evaluation()
        assert evaluation is not None and evaluation.budget is not None
        return evaluation.budget.devices[0].segments["desktop"]

    before = desktop_segment()
    page.rows[DesktopReclaim.LLVMPIPE].radio.setChecked(True)
    assert wizard.plan.desktop is DesktopReclaim.LLVMPIPE
    assert desktop_segment() == 130 * MIB < before


def test_apply_llvmpipe_session_preview_install_revert(
    make_wizard: WizardFactory, root: Path, qtbot: QtBot
) -> None:
    before = snapshot(root)
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    qtbot.mouseClick(page.rows[DesktopReclaim.LLVMPIPE].apply_button, Qt.MouseButton.LeftButton)
    assert page.action.progress.isVisibleTo(page) or wizard.tasks.busy
    assert wizard.tasks.wait_idle(30)

    # the preview: both files new, the diff shows the wrapper's content; nothing written yet
    assert page.preview_box.isVisibleTo(page)
    files = page.preview_box.files
    rows = {files.topLevelItem(i).text(0): files.topLevelItem(i).text(1) for i in range(2)}
    assert rows == {f"/{SESSION_FILE}": "new", f"/{WRAPPER_FILE}": "new"}
    assert "+export KWIN_COMPOSE=Q" in page.preview_box.diff.toPlainText()
    assert "1,090 MiB" in page.preview_box.notes.text()  # the 'before' figure kept
    assert snapshot(root) == before

    qtbot.mouseClick(page.preview_box.install_button, Qt.MouseButton.LeftButton)
    assert wizard.tasks.wait_idle(30)
    assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
    assert "Plasma software rendering by mtpstudio (Wayland)" in page.action.outcome.sentence
    assert "Plasma (Wayland)" in page.action.outcome.sentence  # how to switch back
    assert (root / SESSION_FILE).is_file() and (root / WRAPPER_FILE).is_file()
    stored = json.loads((root / f"var/lib/mtpstudio/desktop-vram-{SESSION_STEM}.json").read_text())
    assert stored["desktop_bytes"] == 1090 * MIB
    assert wizard.plan.desktop is DesktopReclaim.LLVMPIPE  # applying also chose it
    assert page.groups == [f"session:{SESSION_STEM}.desktop"]
    assert page.revert_button.isEnabled()

    qtbot.mouseClick(page.revert_button, Qt.MouseButton.LeftButton)
    assert wizard.tasks.wait_idle(30)
    assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
    assert "Reverted" in page.action.outcome.sentence
    assert snapshot(root) == before
    assert page.groups == [] and not page.revert_button.isEnabled()


def test_nvidia_profile_through_the_helper(make_wizard: WizardFactory, root: Path) -> None:
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    page.rows[DesktopReclaim.NVIDIA_PROFILE].apply_button.click()
    assert wizard.tasks.wait_idle(30)
    assert "GLVidHeapReuseRatio" in page.preview_box.diff.toPlainText()
    page.preview_box.install_button.click()
    assert wizard.tasks.wait_idle(30)
    assert (root / PROFILE_FILE).is_file()
    assert "GLVidHeapReuseRatio" in (root / PROFILE_FILE).read_text()
    assert page.groups == ["nvidia-profile:50-mtpstudio-desktop-vram.json"]
    page.revert_button.click()
    assert wizard.tasks.wait_idle(30)
    assert not (root / PROFILE_FILE).exists()


def test_dismissing_the_preview_writes_nothing(make_wizard: WizardFactory, root: Path) -> None:
    before = snapshot(root)
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    page.rows[DesktopReclaim.LLVMPIPE].apply_button.click()
    assert wizard.tasks.wait_idle(30)
    page.preview_box.cancel_button.click()
    assert not page.preview_box.isVisibleTo(page)
    assert page.action.outcome.sentence == "Nothing was installed."
    assert snapshot(root) == before


def test_cancel_stops_waiting_and_changes_nothing(make_wizard: WizardFactory, root: Path) -> None:
    before = snapshot(root)
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    page.rows[DesktopReclaim.LLVMPIPE].apply_button.click()
    assert page.action.progress.isVisibleTo(page)
    page.action.cancel_button.click()
    assert wizard.tasks.wait_idle(30)
    assert not page.action.progress.isVisibleTo(page)
    assert page.action.outcome.tone is Tone.WARN
    assert page.action.outcome.sentence.startswith("Cancelled")
    assert not page.preview_box.isVisibleTo(page)  # the dropped result never shows
    assert snapshot(root) == before


def test_a_refusal_is_one_sentence_with_details(make_wizard: WizardFactory, root: Path) -> None:
    # Debian 12's SDDM 0.19 given a comma list: it reads that as one folder and lists nothing
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(
        "Package: sddm\nStatus: install ok installed\nVersion: 0.19.0-5\n"
    )
    (root / "etc").mkdir()
    (root / "etc/sddm.conf").write_text("[Wayland]\nSessionDir=/opt/my-sessions,/usr/share/x\n")
    before = snapshot(root)
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    page.rows[DesktopReclaim.LLVMPIPE].apply_button.click()
    assert wizard.tasks.wait_idle(30)
    outcome = page.action.outcome
    assert outcome.tone is Tone.BAD
    assert "/opt/my-sessions" in outcome.sentence and "\n" not in outcome.sentence
    assert not outcome.details.isVisibleTo(page)
    outcome.toggle.click()
    assert outcome.details.isVisibleTo(page)
    assert outcome.details.toPlainText().startswith("InstallError:")
    assert "Set one folder" in outcome.details.toPlainText()  # the hint
    assert snapshot(root) == before


def test_after_the_login_the_check_compares_before_and_after(
    make_wizard: WizardFactory, root: Path
) -> None:
    wizard = desktop_wizard(make_wizard, root)
    page = wizard.desktop_page
    page.rows[DesktopReclaim.LLVMPIPE].apply_button.click()
    assert wizard.tasks.wait_idle(30)
    page.preview_box.install_button.click()
    assert wizard.tasks.wait_idle(30)

    # the next login: the llvmpipe session, with only the scanout left on the card
    after = gpu_report()
    after.processes = [
        GpuProcess(gpu_id="CUDA0", pid=3001, name="kwin_wayland", used_bytes=24 * MIB,
                   category=ProcessCategory.COMPOSITOR),
    ]  # fmt: skip
    again = desktop_wizard(
        make_wizard, root, environ={"DESKTOP_SESSION": SESSION_STEM}, report=after
    )
    page = again.desktop_page
    assert again.tasks.wait_idle(30)  # the check starts by itself in the installed session
    assert page.last_check is not None
    assert page.last_check.desktop_bytes_before == 1090 * MIB
    assert page.last_check.desktop_bytes_now == 24 * MIB
    text = page.check_label.text()
    assert "Before: 1,090 MiB · now: 24 MiB · given back: 1,066 MiB" in text
    assert SESSION_STEM in text
    page.revert_button.click()
    assert again.tasks.wait_idle(30)


# -- issue 34: the helper is set up by the first privileged action; pkexec named when missing --

HELPER_FILES = ("usr/lib/mtpstudio", "usr/share/polkit-1")


def without_helper_files(tree: dict[str, object]) -> dict[str, object]:
    """The tree less the helper's files and /usr/lib (which every real system has)."""
    return {k: v for k, v in tree.items() if not k.startswith(HELPER_FILES) and k != "usr/lib"}


def test_apply_without_a_helper_sets_it_up_in_the_same_install_then_reverts(
    make_wizard: WizardFactory, root: Path
) -> None:
    """A venv install finds no helper: the preview says the install sets it up first (one
    password), the one confirmed run sets it up and installs, Revert needs no second setup,
    and the tree is as before except for the helper (its code, launcher and policy)."""
    before = snapshot(root)
    wizard = make_wizard()
    page = wizard.desktop_page
    page.system = SystemAccess(root=root, runner=SubprocessRunner(), environ={},
                               setup_in_root=True)  # fmt: skip
    go_to(wizard, PageId.DESKTOP)
    assert wizard.tasks.wait_idle(30)
    page.rows[DesktopReclaim.LLVMPIPE].apply_button.click()
    assert wizard.tasks.wait_idle(30)
    box = page.preview_box
    assert box.isVisibleTo(page)
    assert box.install_button.text() == "Set up the helper and install (asks for a password)"
    assert "sets up mtpstudio's helper first" in box.notes.text()
    assert "/usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy" in box.notes.text()
    assert "--root" not in box.notes.text() and "mtpstudio apply" not in box.notes.text()
    assert snapshot(root) == before  # nothing before the confirmation

    box.install_button.click()
    assert wizard.tasks.wait_idle(60)
    said = page.action.outcome.sentence
    assert page.action.outcome.tone is Tone.GOOD, said
    assert said.startswith("Set up the helper (/usr/lib/mtpstudio/mtpstudio-helper, ")
    assert (root / SESSION_FILE).is_file()
    assert (root / "usr/lib/mtpstudio/mtpstudio-helper").is_file()
    assert page.system.helper_state().needs_setup is False

    page.revert_button.click()
    assert wizard.tasks.wait_idle(60)
    assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
    assert not page.action.outcome.sentence.startswith("Set up")  # set up once
    after = snapshot(root)
    assert without_helper_files(after) == without_helper_files(before)
    assert {k.split("/")[0] for k in set(after) - set(before)} <= {"usr", "var"}


def test_without_pkexec_apply_names_the_package_and_shows_no_preview(
    make_wizard: WizardFactory, root: Path
) -> None:
    wizard = make_wizard()
    page = wizard.desktop_page
    ubuntu = 'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'
    page.system = SystemAccess(root=root, runner=SubprocessRunner(), environ={},
                               setup_in_root=True, pkexec_missing=True,
                               os_release=ubuntu)  # fmt: skip
    go_to(wizard, PageId.DESKTOP)
    assert wizard.tasks.wait_idle(30)
    page.rows[DesktopReclaim.LLVMPIPE].apply_button.click()
    assert wizard.tasks.wait_idle(30)
    outcome = page.action.outcome
    assert outcome.tone is Tone.BAD
    assert "pkexec (polkit), which is not installed" in outcome.sentence
    assert "Install the package pkexec (sudo apt install pkexec)" in outcome.sentence
    assert "--root" not in outcome.sentence and "--dry-run" not in outcome.sentence
    assert not page.preview_box.isVisibleTo(page)

    page.refresh_button.click()  # the old error does not stay beside a fresh reading
    assert outcome.sentence == ""


def test_each_reclaim_says_what_it_does_for_this_plans_speed(
    make_wizard: WizardFactory, root: Path
) -> None:
    """The seeds' 35B on the catalogue RTX 4070 SUPER at 128k: each reclaim says how many more
    expert layers it puts on the GPU and its gain in tok/s, and the page ranks them by the
    speed estimate (spare second)."""
    from mtpstudio.core.plan.io import plan_with

    seeds = {"device": "rtx-4070-super", "runtime.ctx": 131072, "runtime.cache_type_k": "q8_0",
             "runtime.cache_type_v": "q8_0", "mtp.draft_max": 3}  # fmt: skip
    wizard = desktop_wizard(make_wizard, root, plan=plan_with(Plan(), seeds),
                            report=no_gpu_report())  # fmt: skip
    page = wizard.desktop_page
    assert wizard.tasks.wait_idle(30)
    import re

    llvmpipe = page.rows[DesktopReclaim.LLVMPIPE].detail.text()
    more = (
        r"For this plan: (\d+) more expert layers? on the GPU, MTP kept, ≈ \+([\d.]+) % tok/s "
        r"\(fits, (\d+) MiB"
    )
    found_llvmpipe = re.search(more, llvmpipe)
    found_profile = re.search(more, page.rows[DesktopReclaim.NVIDIA_PROFILE].detail.text())
    assert found_llvmpipe and found_profile, llvmpipe
    note = page.plan_note.text()
    assert note.startswith("For this plan's tokens/s, best first: 1. ")
    gains = (float(found_llvmpipe[2]), float(found_profile[2]))
    spare = (int(found_llvmpipe[3]), int(found_profile[3]))
    assert int(found_llvmpipe[1]) >= int(found_profile[1])
    llvmpipe_first = note.index("llvmpipe") < note.index("NVIDIA driver profile")
    assert llvmpipe_first == (gains[0] > gains[1] or (gains[0] == gains[1]
                                                      and spare[0] > spare[1]))  # fmt: skip
