"""Service page: the highlighted files and flag notes, the Plan it writes, Export (byte for byte
the CLI's `export-unit`), install as a user unit or through the helper, and unit control."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot
from support.cli import write_model
from support.helper_bench import make_root, snapshot

from mtpstudio.core import paths
from mtpstudio.core.desktop.install import revert_user_group, user_status
from mtpstudio.core.plan.io import save_plan
from mtpstudio.core.plan.schema import EngineChoice, ModelChoice, Plan
from mtpstudio.core.runner import RunResult, SubprocessRunner
from mtpstudio.core.service.render import UnitScope
from mtpstudio.ui.system_access import SystemAccess
from mtpstudio.ui.widgets.common import Tone
from mtpstudio.ui.wizard import MtpWizard, PageId, default_detector

from .conftest import WizardFactory, go_to

SHOW = (
    "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"
    "ExecMainStatus=0\nResult=success\n"
)
JOURNAL = "main: server is listening on http://127.0.0.1:8080\nsrv  update_slots: all slots idle\n"


class RecordedSystemctl:
    """systemctl/journalctl as a system manager answers them (none runs in this container);
    records the argv it was asked, optionally holds each answer until released."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.calls: list[list[str]] = []
        self.hold = hold

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        self.calls.append(list(argv))
        if self.hold is not None:
            self.hold.wait(10)
        out = JOURNAL if argv[0] == "journalctl" else SHOW if "show" in argv else ""
        return RunResult(tuple(argv), 0, out, "")


@pytest.fixture
def model_plan(tmp_path: Path, engine: Callable[[str], Path]) -> Plan:
    """A model file on this computer and the upstream build the test bench built (a unit is
    exported only when its ExecStart exists)."""
    model = tmp_path / "models" / "Qwen 3.6 35B.gguf"
    write_model(model)
    return Plan(model=ModelChoice(path=model), engine=EngineChoice(binary=engine("upstream")))


def service_wizard(
    make_wizard: WizardFactory, plan: Plan, system: SystemAccess | None = None, **kw: object
) -> MtpWizard:
    wizard = make_wizard(plan, **kw)
    if system is not None:
        wizard.service_page.system = system
    go_to(wizard, PageId.SERVICE)
    # the tests run as root, and a system unit is never written to run the engine as root
    wizard.service_page.account_edit.setText("bob")
    wizard.service_page.account_edit.editingFinished.emit()
    return wizard


def test_files_are_highlighted_and_flags_explained(
    make_wizard: WizardFactory, model_plan: Plan
) -> None:
    page = service_wizard(make_wizard, model_plan).service_page
    unit = page.views["unit"]
    text = unit.toPlainText()
    assert "[Service]" in text and "ExecStart=" in text and "-c 32768" in text
    assert unit.highlighter is not None
    assert unit.highlighter.names_at("[Service]", 1) == ["section"]
    assert unit.highlighter.names_at("ExecStart=/usr/bin/llama-server", 3) == ["key"]
    assert "comment" in unit.highlighter.names_at("# Written by mtpstudio", 4)
    script = page.views["script"]
    assert script.highlighter is not None and "exec" in script.toPlainText()
    assert script.highlighter.names_at("  --port 8080 \\", 4) == ["flag"]
    assert "variable" in script.highlighter.names_at('exec "$@"', 7)
    env = page.views["env"].toPlainText()
    assert env == page.rendered.files["env"].text  # type: ignore[union-attr]

    spec = page.rendered.spec  # type: ignore[union-attr]
    assert page.flags.rowCount() == len(spec.flags)
    rows = {
        page.flags.item(i, 0).text(): (page.flags.item(i, 1).text(), page.flags.item(i, 2).text())
        for i in range(page.flags.rowCount())
    }
    assert rows["-c 32768"][0] == "runtime.ctx"
    assert "Context window" in rows["-c 32768"][1]


def test_service_name_drives_the_plan(make_wizard: WizardFactory, model_plan: Plan) -> None:
    wizard = service_wizard(make_wizard, model_plan)
    page = wizard.service_page
    page.name_edit.setText("qwen-mtp")
    page.name_edit.editingFinished.emit()
    assert wizard.plan.outputs.service_name == "qwen-mtp"
    assert "qwen-mtp.service" in page.views["unit"].toPlainText()
    assert page.unit_label.text().startswith("qwen-mtp.service")

    page.name_edit.setText("bad name")
    page.name_edit.editingFinished.emit()
    assert wizard.plan.outputs.service_name == "qwen-mtp"  # refused, said, shown back
    assert page.action.outcome.tone is Tone.BAD
    assert "service name" in page.action.outcome.sentence
    assert page.name_edit.text() == "qwen-mtp"

    page.set_scope(UnitScope.USER)
    assert not page.account_edit.isEnabled()
    assert "[Install]\nWantedBy=default.target" in page.views["unit"].toPlainText()


@pytest.mark.parametrize("scope", ["system", "user"])
def test_export_writes_the_bytes_of_the_cli(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path, scope: str
) -> None:
    plan_file = tmp_path / "plan.json"
    save_plan(model_plan, plan_file)
    cli_unit = tmp_path / "cli.service"
    result = subprocess.run(
        [sys.executable, "-m", "mtpstudio", "export-unit", "--plan", str(plan_file),
         "-o", str(cli_unit), "--scope", scope, "--user", "bob"],
        capture_output=True, text=True, env=dict(os.environ), timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr

    wizard = service_wizard(make_wizard, model_plan, detector=default_detector())
    page = wizard.service_page
    page.set_scope(UnitScope(scope))
    page.account_edit.setText("bob")
    page.account_edit.editingFinished.emit()
    gui_unit = tmp_path / "gui dir" / "my unit.service"
    gui_unit.parent.mkdir()
    page.ask_export_path = lambda: gui_unit  # type: ignore[method-assign]
    page.export_button.click()
    assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
    assert gui_unit.read_bytes() == cli_unit.read_bytes()
    assert gui_unit.stat().st_mode & 0o777 == cli_unit.stat().st_mode & 0o777
    assert page.views["unit"].toPlainText().encode() == cli_unit.read_bytes()


def test_export_to_an_unwritable_place_says_so(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    page = service_wizard(make_wizard, model_plan).service_page
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    target = blocker / "x.service"
    assert not page.export_unit(target)
    assert page.action.outcome.tone is Tone.BAD
    assert str(target) in page.action.outcome.sentence
    assert blocker.read_text() == "not a folder"


def test_install_user_unit_then_status_from_a_real_systemctl(
    make_wizard: WizardFactory, model_plan: Plan, qtbot: QtBot
) -> None:
    system = SystemAccess(runner=SubprocessRunner())
    wizard = service_wizard(make_wizard, model_plan, system)
    page = wizard.service_page
    page.set_scope(UnitScope.USER)
    qtbot.mouseClick(page.install_button, Qt.MouseButton.LeftButton)
    assert page.preview_box.isVisibleTo(page)
    unit_path = paths.user_unit_dir() / "mtpstudio-llama.service"
    rows = {
        page.preview_box.files.topLevelItem(i).text(0): page.preview_box.files.topLevelItem(i).text(
            1
        )
        for i in range(page.preview_box.files.topLevelItemCount())
    }
    assert rows[str(unit_path)] == "new"
    try:
        page.preview_box.install_button.click()
        assert wizard.tasks.wait_idle(30)
        assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
        assert unit_path.read_text() == page.views["unit"].toPlainText()
        assert "systemctl --user enable --now mtpstudio-llama.service" in (
            page.action.outcome.sentence
        )

        # no user manager runs in this container: the real systemctl says so, in one sentence
        page.status_button.click()
        assert wizard.tasks.wait_idle(30)
        outcome = page.action.outcome
        assert outcome.tone is Tone.BAD
        assert outcome.sentence.startswith("Systemctl could not read the status of")
        assert "systemd is not running" in outcome.sentence  # the hint
        assert "ServerError" in outcome.details.toPlainText()
        assert page.status_button.isEnabled()
    finally:
        for group in user_status()["groups"]:
            revert_user_group(group, SubprocessRunner())


def test_system_unit_through_the_helper_and_its_control(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    root = make_root(tmp_path / "root")
    before = snapshot(root)
    systemctl = RecordedSystemctl()
    wizard = service_wizard(make_wizard, model_plan, SystemAccess(root=root, runner=systemctl))
    page = wizard.service_page
    page.account_edit.setText("bob")
    page.account_edit.editingFinished.emit()

    page.status_button.click()  # nothing installed yet: said plainly, systemctl not asked
    assert wizard.tasks.wait_idle(30)
    assert "There is no system unit mtpstudio-llama.service" in page.action.outcome.sentence
    assert "choose 'User unit' under Install as" in page.action.outcome.sentence
    assert systemctl.calls == []

    page.install_button.click()
    assert "/etc/systemd/system/mtpstudio-llama.service" in page.preview_box.diff.toPlainText()
    page.preview_box.install_button.click()
    assert wizard.tasks.wait_idle(30)
    assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
    installed = root / "etc/systemd/system/mtpstudio-llama.service"
    assert "User=bob" in installed.read_text()
    assert (root / "etc/mtpstudio/mtpstudio-llama.env").is_file()

    page.start_button.click()
    assert wizard.tasks.wait_idle(30)
    assert systemctl.calls[0] == ["systemctl", "start", "mtpstudio-llama.service"]
    assert systemctl.calls[1][:3] == ["systemctl", "show", "mtpstudio-llama.service"]
    assert page.last_status is not None and page.last_status.active
    assert "active (running), pid 4242" in page.output.toPlainText()
    assert page.action.outcome.tone is Tone.GOOD

    page.journal_button.click()
    assert wizard.tasks.wait_idle(30)
    assert systemctl.calls[-1][:4] == ["journalctl", "-u", "mtpstudio-llama.service", "-n"]
    assert "server is listening" in page.output.toPlainText()

    page.stop_button.click()
    assert wizard.tasks.wait_idle(30)
    assert ["systemctl", "stop", "mtpstudio-llama.service"] in systemctl.calls

    from mtpstudio.core.desktop.install import helper_for, revert_group

    revert_group("unit:mtpstudio-llama.service", helper_for(root))
    assert snapshot(root) == before


def test_a_system_unit_under_another_name_is_refused_before_any_preview(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    """``sshd`` (a shared plan's name) would override the distribution's sshd.service."""
    root = make_root(tmp_path / "root")
    packaged = root / "usr/lib/systemd/system/sshd.service"
    packaged.parent.mkdir(parents=True)
    packaged.write_text("[Unit]\nDescription=OpenBSD Secure Shell server\n")
    before = snapshot(root)
    wizard = service_wizard(make_wizard, model_plan, SystemAccess(root=root))
    page = wizard.service_page
    page.name_edit.setText("sshd")
    page.name_edit.editingFinished.emit()
    page.install_button.click()
    assert page.action.outcome.tone is Tone.BAD
    assert "'sshd.service' does not start with 'mtpstudio-'" in page.action.outcome.sentence
    assert "Name the service mtpstudio-" in page.action.outcome.sentence
    assert not page.preview_box.isVisibleTo(page)
    assert snapshot(root) == before


def test_a_slow_action_shows_progress_and_can_be_cancelled(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    root = make_root(tmp_path / "root")
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "mtpstudio-llama.service").write_text("# Written by mtpstudio\n[Service]\n")
    hold = threading.Event()
    systemctl = RecordedSystemctl(hold)
    wizard = service_wizard(make_wizard, model_plan, SystemAccess(root=root, runner=systemctl))
    page = wizard.service_page
    page.status_button.click()
    assert page.action.progress.isVisibleTo(page)
    assert "Reading the status of mtpstudio-llama.service" in page.action.label.text()
    assert not page.start_button.isEnabled()
    page.action.cancel_button.click()
    hold.set()
    assert wizard.tasks.wait_idle(30)
    assert page.action.outcome.tone is Tone.WARN
    assert page.action.outcome.sentence.startswith("Cancelled")
    assert page.last_status is None  # the late answer was dropped
    assert page.output.toPlainText() == ""


# -- issue 25: units only for real files, no silent replace, a readable preview -----------------


def test_the_demo_card_gets_no_unit_and_is_told_what_to_do(
    make_wizard: WizardFactory, tmp_path: Path
) -> None:
    wizard = service_wizard(make_wizard, Plan())  # the demo card
    page = wizard.service_page
    assert "[Service]" in page.views["unit"].toPlainText()  # still shown, to read
    assert "demo card qwen3.6-35b-a3b-iq4_xs" in page.notice.text()
    target = tmp_path / "demo.service"
    page.ask_export_path = lambda: target  # type: ignore[method-assign]
    page.export_button.click()
    assert not target.exists()
    assert page.action.outcome.tone is Tone.BAD
    assert "demo card" in page.action.outcome.sentence
    assert "Open the GGUF file first" in page.action.outcome.sentence
    page.set_scope(UnitScope.USER)
    page.install_button.click()
    assert not page.preview_box.isVisibleTo(page)
    assert "Cannot install: The plan uses the demo card" in page.action.outcome.sentence
    assert not (paths.user_unit_dir() / "mtpstudio-llama.service").exists()


def test_a_different_installed_user_unit_is_replaced_only_after_asking(
    make_wizard: WizardFactory, model_plan: Plan
) -> None:
    system = SystemAccess(runner=SubprocessRunner())
    wizard = service_wizard(make_wizard, model_plan, system)
    page = wizard.service_page
    page.set_scope(UnitScope.USER)
    unit_path = paths.user_unit_dir() / "mtpstudio-llama.service"
    asked: list[str] = []
    answer = [False]

    def ask(replaced: list) -> bool:  # type: ignore[type-arg]
        asked.append("\n".join(p.diff for p in replaced))
        return answer[0]

    page.ask_replace = ask  # type: ignore[method-assign]
    try:
        page.install_button.click()
        page.preview_box.install_button.click()  # nothing installed yet: no question
        assert wizard.tasks.wait_idle(30)
        assert asked == [] and unit_path.is_file()
        installed = unit_path.read_text()

        wizard.state.update({"runtime.ctx": 8192})  # another plan for the same unit
        page.refresh()
        page.install_button.click()
        assert page.preview_box.install_button.text().startswith("Replace")
        assert "A different mtpstudio-llama.service is installed" in (page.preview_box.notes.text())
        page.preview_box.install_button.click()  # asks, with the diff; the answer is no
        assert wizard.tasks.wait_idle(30)
        assert len(asked) == 1 and "-c 8192" in asked[0] and "-c 32768" in asked[0]
        assert unit_path.read_text() == installed
        assert "Nothing was installed" in page.action.outcome.sentence

        answer[0] = True
        page.preview_box.install_button.click()
        assert wizard.tasks.wait_idle(30)
        assert page.action.outcome.tone is Tone.GOOD, page.action.outcome.sentence
        assert "-c 8192" in unit_path.read_text()
    finally:
        for group in user_status()["groups"]:
            revert_user_group(group, SubprocessRunner())


def test_a_missing_pkexec_is_said_before_any_preview_with_its_package(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    system = SystemAccess(runner=RecordedSystemctl(), pkexec_missing=True,
                          os_release='ID=debian\nVERSION_ID="12"\n')  # fmt: skip
    page = service_wizard(make_wizard, model_plan, system).service_page
    page.account_edit.setText("bob")
    page.account_edit.editingFinished.emit()
    page.install_button.click()
    assert not page.preview_box.isVisibleTo(page)
    said = page.action.outcome.sentence
    assert "System files are written only through pkexec (polkit), which is not installed" in said
    assert "package pkexec (sudo apt install pkexec)" in said
    assert "User unit" in said and "--root" not in said and "--dry-run" not in said
    page.set_scope(UnitScope.USER)
    assert page.action.outcome.sentence == ""


def test_a_system_unit_without_a_helper_sets_it_up_in_the_same_install(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    root = make_root(tmp_path / "root")
    system = SystemAccess(root=root, runner=RecordedSystemctl(), setup_in_root=True)
    wizard = service_wizard(make_wizard, model_plan, system)
    page = wizard.service_page
    page.account_edit.setText("bob")
    page.account_edit.editingFinished.emit()
    page.install_button.click()
    assert page.preview_box.isVisibleTo(page)
    assert page.preview_box.install_button.text() == (
        "Set up the helper and install (asks for a password)"
    )
    assert "sets up mtpstudio's helper first" in page.preview_box.notes.text()
    page.preview_box.install_button.click()
    assert wizard.tasks.wait_idle(60)
    said = page.action.outcome.sentence
    assert page.action.outcome.tone is Tone.GOOD, said
    assert said.startswith("Set up the helper (/usr/lib/mtpstudio/mtpstudio-helper, ")
    assert (root / "usr/lib/mtpstudio/mtpstudio-helper").is_file()
    assert "User=bob" in (root / "etc/systemd/system/mtpstudio-llama.service").read_text()
    # set up now: the next install goes straight to the helper
    page.install_button.click()
    assert page.preview_box.install_button.text() == "Install"


def test_the_preview_is_readable_on_a_laptop_screen(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    root = make_root(tmp_path / "root")
    wizard = service_wizard(make_wizard, model_plan, SystemAccess(root=root))
    wizard.resize(1366, 768)
    page = wizard.service_page
    page.install_button.click()
    QApplication.processEvents()
    box = page.preview_box
    assert box.isVisibleTo(page)
    lines = box.diff.fontMetrics().lineSpacing()
    assert box.diff.viewport().height() >= 8 * lines  # the diff, not two lines of it
    rows = box.files.topLevelItemCount()
    assert rows == 2
    last = box.files.visualItemRect(box.files.topLevelItem(rows - 1))
    assert last.bottom() <= box.files.viewport().height()  # every file row shown
    assert box.notes.isVisibleTo(page) and box.notes.height() >= box.notes.heightForWidth(
        box.notes.width()
    )  # the explanation not clipped


# -- issue 34: Export writes the set that starts, and refuses before asking where ---------------


def test_export_writes_the_set_and_says_the_commands(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    page = service_wizard(make_wizard, model_plan).service_page
    target = tmp_path / "out" / "mtpstudio-llama.service"
    target.parent.mkdir()
    page.ask_export_path = lambda: target  # type: ignore[method-assign]
    page.export_button.click()
    said = page.action.outcome.sentence
    assert page.action.outcome.tone is Tone.GOOD, said
    assert sorted(p.name for p in target.parent.iterdir()) == [
        "install-mtpstudio-llama.sh", "mtpstudio-llama.env", "mtpstudio-llama.service"
    ]  # fmt: skip
    assert f"sudo sh {target.parent}/install-mtpstudio-llama.sh" in said
    assert "sudo systemctl start mtpstudio-llama.service" in said

    # the message is in sight: right below the buttons, not under the unit's output
    def top(widget: QWidget) -> int:
        return widget.mapTo(page, QPoint(0, 0)).y()

    assert top(page.action) < top(page.unit_label) < top(page.output)


def test_export_refuses_before_the_dialog_when_the_unit_could_not_start(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    plan = model_plan.model_copy(
        update={"engine": model_plan.engine.model_copy(update={"binary": tmp_path / "gone"})}
    )
    page = service_wizard(make_wizard, plan).service_page
    asked: list[bool] = []
    page.ask_export_path = lambda: asked.append(True)  # type: ignore[method-assign,func-returns-value]
    page.export_button.click()
    said = page.action.outcome.sentence
    assert asked == []  # refused before the save dialog
    assert page.action.outcome.tone is Tone.BAD
    assert f"the unit would start {tmp_path}/gone" in said
    assert "Engine & options page" in said and "`mtpstudio plan" not in said

    page.account_edit.setText("root")
    page.account_edit.editingFinished.emit()
    page = service_wizard(make_wizard, model_plan).service_page
    page.account_edit.setText("root")
    page.account_edit.editingFinished.emit()
    page.export_button.click()
    assert "runs the engine as root is refused" in page.action.outcome.sentence
    assert "under 'Runs as'" in page.action.outcome.sentence
    assert "--user" not in page.action.outcome.sentence


def test_a_partial_model_is_refused_before_the_dialog(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path
) -> None:
    model = Path(str(model_plan.model.path))
    with model.open("r+b") as f:
        f.truncate(model.stat().st_size // 2)  # a download that stopped halfway
    page = service_wizard(make_wizard, model_plan).service_page
    asked: list[bool] = []
    page.ask_export_path = lambda: asked.append(True)  # type: ignore[method-assign,func-returns-value]
    page.export_button.click()
    assert asked == []
    assert page.action.outcome.tone is Tone.BAD
    assert "incomplete" in page.action.outcome.sentence.lower()


def test_the_preview_keeps_what_it_is_readable_beside_a_long_path(
    make_wizard: WizardFactory, model_plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long install path (a user unit below a deep config folder) took the whole width,
    squeezing "What it is" to a word per line."""
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(deep))
    wizard = service_wizard(make_wizard, model_plan, SystemAccess(runner=RecordedSystemctl()))
    wizard.resize(1180, 768)
    page = wizard.service_page
    page.set_scope(UnitScope.USER)
    page.install_button.click()
    QApplication.processEvents()
    files = page.preview_box.files
    room = files.viewport().width()
    assert files.header().sectionSize(2) >= 0.3 * room
    line = files.fontMetrics().lineSpacing()
    for row in range(files.topLevelItemCount()):
        assert files.visualItemRect(files.topLevelItem(row)).height() <= 5 * line + 8


def test_a_system_unit_for_the_card_says_why_its_placement_is_written_out(
    make_wizard: WizardFactory, model_plan: Plan
) -> None:
    """For the catalogue RTX 4070 SUPER (a desktop of 1,024 MiB) the system unit, which starts
    at boot, runs the plan's placement with the fit off, and the page says why and names the
    two moments; the user unit keeps the engine's fit."""
    plan = model_plan.model_copy(update={"device": "rtx-4070-super"})
    page = service_wizard(make_wizard, plan).service_page
    page.set_scope(UnitScope.SYSTEM)
    page.state.tasks.wait_idle(30)
    text = page.views["unit"].toPlainText()
    notice = page.notice.text()
    assert "--fit off" in text and "--n-cpu-moe " in text and "ExecStartPre=" in text
    assert "The plan's placement written out" in notice
    assert "At boot (before any login)" in notice and "After login" in notice
    rows = [page.flags.item(i, 0).text() for i in range(page.flags.rowCount())]
    placement = next(i for i, r in enumerate(rows) if r.startswith("--n-cpu-moe"))
    assert "before the desktop" in page.flags.item(placement, 2).text()
    page.set_scope(UnitScope.USER)
    page.state.tasks.wait_idle(30)
    user_unit = page.views["unit"].toPlainText()
    assert "--fit on" in user_unit and "--fit-target 1024" in user_unit
    assert "The plan's placement written out" not in page.notice.text()


def test_the_choice_for_too_little_vram_drives_the_plan_and_the_check(
    make_wizard: WizardFactory, model_plan: Plan
) -> None:
    plan = model_plan.model_copy(update={"device": "rtx-4070-super"})
    page = service_wizard(make_wizard, plan).service_page
    assert "--on-short refuse" in page.views["unit"].toPlainText()
    page.short_combo.setCurrentIndex(page.short_combo.findData("warn"))
    page.state.tasks.wait_idle(30)
    assert page.state.plan.outputs.short_vram.value == "warn"
    assert "--on-short warn" in page.views["unit"].toPlainText()
    assert "--on-short warn" in page.views["script"].toPlainText()
