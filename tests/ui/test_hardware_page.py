"""Hardware page: what detection found, and the target choice it writes into the Plan."""

from __future__ import annotations

import threading

from pytestqt.qtbot import QtBot

from mtpstudio.core.catalog.gpus import DEFAULT_GPU_CARD
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.plan.schema import Plan

from .conftest import WizardFactory, go_to, gpu_report, no_gpu_report


def _tree_rows(tree) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [
        [tree.topLevelItem(i).text(c) for c in range(tree.columnCount())]
        for i in range(tree.topLevelItemCount())
    ]


def test_shows_gpus_vram_users_host_and_session(make_wizard: WizardFactory) -> None:
    wizard = make_wizard()
    page = wizard.hardware_page
    page.refresh()
    rows = _tree_rows(page.gpu_tree)
    assert rows[0][:5] == ["CUDA0", "NVIDIA GeForce RTX 4070 SUPER", "12,282 MiB", "1,400 MiB",
                           "10,882 MiB"]  # fmt: skip
    assert rows[0][6] == "Gen4 x16"
    assert rows[0][7] == "discrete · drives the display"
    assert rows[1][0] == "card1" and rows[1][7] == "iGPU · no display"
    groups = {
        page.process_tree.topLevelItem(i).text(0): page.process_tree.topLevelItem(i)
        for i in range(page.process_tree.topLevelItemCount())
    }
    assert list(groups) == ["compositor (2)", "desktop shell (1)", "browser (1)"]
    assert groups["compositor (2)"].text(3) == "780 MiB"
    assert groups["compositor (2)"].child(0).text(0) == "kwin_wayland"
    assert "7800X3D" in page.cpu_label.text() and "8 cores / 16 threads" in page.cpu_label.text()
    assert page.ram_label.text().startswith("64.00 GiB RAM, 50.00 GiB available")
    assert page.session_label.text() == "wayland · KDE · login screen sddm · KWin OpenGL"
    assert page.display_label.text() == "driven by CUDA0 (NVIDIA GeForce RTX 4070 SUPER) on DP-1"
    assert page.notice.isHidden()


def test_target_choices_write_the_plan_device(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    page = wizard.hardware_page
    page.refresh()
    assert page.radio_detected.isChecked()
    assert page.detected_combo.currentData() == "auto"
    assert [page.detected_combo.itemData(i) for i in range(page.detected_combo.count())] == [
        "auto",
        "CUDA0",
    ]  # the iGPU is not offered
    page.detected_combo.setCurrentIndex(1)
    assert wizard.plan.device == "CUDA0"
    page.radio_catalogue.setChecked(True)
    assert wizard.plan.device == page.catalogue_combo.currentData()
    index = page.catalogue_combo.findData("rtx-4060-ti-16gb")
    assert index >= 0
    page.catalogue_combo.setCurrentIndex(index)
    assert wizard.plan.device == "rtx-4060-ti-16gb"
    assert "16 GB" in page.target_help.text()
    page.radio_cpu.setChecked(True)
    assert wizard.plan.device == "cpu"
    assert "CPU" in page.target_help.text()


def test_no_gpu_says_so_and_preselects_the_catalogue_card(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(), report=no_gpu_report())
    page = wizard.hardware_page
    page.refresh()
    assert page.no_gpu_label.text().startswith("No GPU found")
    assert page.gpu_tree.isHidden()
    assert not page.radio_detected.isEnabled()
    assert page.radio_catalogue.isChecked()
    assert page.catalogue_combo.currentData() == DEFAULT_GPU_CARD
    assert wizard.plan.device == DEFAULT_GPU_CARD
    assert "No GPU was detected" in page.notice.text()


def test_a_device_that_is_gone_falls_back_with_a_notice(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(device="CUDA1"))
    assert wizard.plan.device == "auto"
    assert "CUDA1 was not detected" in (wizard.state.device_notice or "")


def test_refresh_runs_detection_again_with_a_busy_indicator(
    make_wizard: WizardFactory, qtbot: QtBot
) -> None:
    calls: list[int] = []
    gate = threading.Event()
    gate.set()

    def detector() -> DetectionReport:
        calls.append(1)
        gate.wait(10)
        return gpu_report() if len(calls) == 1 else no_gpu_report()

    wizard = make_wizard(Plan(), detector=detector)
    wizard.show()
    page = wizard.hardware_page
    assert len(calls) == 1 and page.busy.isHidden()
    gate.clear()
    page.refresh_button.click()
    assert page.busy.busy and not page.refresh_button.isEnabled()
    gate.set()
    qtbot.waitUntil(lambda: not wizard.tasks.busy, timeout=10000)
    assert len(calls) == 2
    assert page.busy.isHidden() and page.refresh_button.isEnabled()
    assert page.no_gpu_label.text().startswith("No GPU found")


def test_a_display_manager_alone_is_not_called_a_session(make_wizard: WizardFactory) -> None:
    """Issue 25 item 8: a headless box with sddm installed showed 'Session: sddm'."""
    from mtpstudio.core.detect.models import DisplayInfo

    report = no_gpu_report()
    report.display = DisplayInfo(display_manager="sddm")
    wizard = make_wizard(Plan(), report=report)
    go_to(wizard, 0)
    assert wizard.hardware_page.session_label.text() == (
        "no graphical session here (login screen: sddm)"
    )


def test_an_rpc_server_is_probed_and_added_as_a_device(
    make_wizard: WizardFactory,
    qtbot: QtBot,
    engine,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    """The pinned engine's rpc-server on loopback, reporting 4,000 MiB: Probe and add puts what
    it answered into the plan, and the list shows it."""
    from devkit.rpc_servers import rpc_servers

    wizard = make_wizard(Plan(device="CUDA0"))
    page = wizard.hardware_page
    page.refresh()
    with rpc_servers(engine("upstream-rpc").parent, [4000], tmp_path) as (port,):
        page.rpc_edit.setText(f"127.0.0.1:{port}")
        page.rpc_button.click()
        qtbot.waitUntil(lambda: bool(wizard.plan.split.rpc), timeout=10000)
    (server,) = wizard.plan.split.rpc
    assert (server.port, server.memory_mib, server.backend) == (port, 4000, "CPU")
    assert page.devices_list.item(0).text().startswith(f"RPC 127.0.0.1:{port} · CPU · 4,000 MiB")
    assert "rpc-server 7.0.0" in page.rpc_notice.text()


def test_an_unreachable_rpc_endpoint_is_one_sentence_and_the_plan_stays(
    make_wizard: WizardFactory, qtbot: QtBot
) -> None:
    from devkit.rpc_servers import free_port

    wizard = make_wizard(Plan(device="CUDA0"))
    page = wizard.hardware_page
    page.refresh()
    before = wizard.plan
    port = free_port()
    page.rpc_edit.setText(f"127.0.0.1:{port}")
    page.rpc_button.click()
    qtbot.waitUntil(lambda: "cannot be reached" in page.rpc_notice.text(), timeout=10000)
    assert page.rpc_notice.text().startswith(f"The RPC endpoint 127.0.0.1:{port} cannot")
    assert wizard.plan == before and not wizard.plan.split.rpc
    page.rpc_edit.setText("no port here")
    page.rpc_button.click()
    qtbot.waitUntil(lambda: "is not an RPC endpoint" in page.rpc_notice.text(), timeout=10000)
    assert wizard.plan == before


def test_the_pc_box_plans_another_pc_and_the_budget_page_says_whose(
    make_wizard: WizardFactory,
) -> None:
    """The user picks another PC's CPU and types its RAM: the plan keeps both, the budget
    page's speed is that PC's and its basis names it; a RAM that is not a spec is refused in
    one sentence and changes nothing; "This PC" goes back to this computer."""
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))
    page = wizard.hardware_page
    page.refresh()
    assert page.pc_combo.currentData() is None and "probed" in page.pc_note.text()
    page.pc_combo.setCurrentIndex(page.pc_combo.findData("ryzen-7-9700x"))
    assert wizard.plan.host.cpu == "ryzen-7-9700x"
    page.ram_edit.setText("ddr5-6000x2")
    page.ram_edit.editingFinished.emit()
    assert wizard.plan.host.ram == "ddr5-6000x2"
    page.refresh()
    assert "assumes that PC" in page.pc_note.text() and page.ram_edit.text() == "ddr5-6000x2"
    page.ram_edit.setText("fast")
    page.ram_edit.editingFinished.emit()
    assert wizard.plan.host.ram == "ddr5-6000x2"  # refused: nothing changed
    assert not page.notice.isHidden() and "is not a RAM spec" in page.notice.text()
    go_to(wizard, 3)
    budget = wizard.budget_page
    wizard.tasks.wait_idle(30)
    assert "tok/s" in budget.speed_label.text()
    assert "AMD Ryzen 7 9700X" in budget.speed_label.toolTip()
    page.pc_combo.setCurrentIndex(0)
    assert wizard.plan.host.cpu is None


def test_the_engine_pages_acceptance_field_sets_the_estimates_acceptance(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan(device=DEFAULT_GPU_CARD))
    go_to(wizard, 2)
    box = wizard.engine_page.acceptance
    assert box.specialValueText() == "measured or published" and box.value() == box.minimum()
    box.setValue(0.6)
    assert wizard.plan.mtp.acceptance == 0.6
    box.setValue(box.minimum())
    assert wizard.plan.mtp.acceptance is None


def test_the_catalogue_is_offered_by_vendor_with_laptops_after_desktops(
    make_wizard: WizardFactory,
) -> None:
    from mtpstudio.core.catalog.gpus import gpu_card, gpu_cards

    wizard = make_wizard(Plan())
    page = wizard.hardware_page
    page.refresh()
    combo = page.catalogue_combo
    ids = [combo.itemData(i) for i in range(combo.count())]
    separators = [i for i, card in enumerate(ids) if card is None]
    assert len(separators) == 2  # NVIDIA | AMD | Intel
    groups = [
        ids[: separators[0]],
        ids[separators[0] + 1 : separators[1]],
        ids[separators[1] + 1 :],
    ]
    assert [{gpu_card(c).vendor for c in g} for g in groups] == [{"nvidia"}, {"amd"}, {"intel"}]
    assert sorted(c for g in groups for c in g) == sorted(c.id for c in gpu_cards())
    laptop = combo.itemText(ids.index("rtx-4090-laptop"))
    assert laptop == "NVIDIA GeForce RTX 4090 Laptop GPU (16 GB, 80-150 W) · 16,376 MiB"
    page.radio_catalogue.setChecked(True)
    combo.setCurrentIndex(ids.index("arc-b580"))
    assert wizard.plan.device == "arc-b580"
