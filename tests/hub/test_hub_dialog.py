"""The Model page's Hugging Face dialog, driven like a user: list, sort, download → broken
connection → resume → verified → the wizard plans the local file; cancel keeps the part."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub.constants
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from devkit.hub_server import HubTestServer
from mtpstudio.core.detect.models import DetectionReport, HostInfo
from mtpstudio.core.hub.download import DownloadProgress
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.units import GIB, MIB
from mtpstudio.ui.pages.hub_dialog import COLUMNS, HubModelsDialog
from mtpstudio.ui.settings import StateStore
from mtpstudio.ui.widgets.common import Tone
from mtpstudio.ui.wizard import MtpWizard

from .conftest import QUANTS_REPO, SMALL_REPO


def use_endpoint(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """What HF_ENDPOINT does, for a huggingface_hub imported before it was set: the two
    constants it computes at import."""
    c = huggingface_hub.constants
    monkeypatch.setattr(c, "ENDPOINT", url)
    monkeypatch.setattr(
        c, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )


def _report() -> DetectionReport:
    return DetectionReport(
        host=HostInfo(
            cpu_model="test", physical_cores=8, logical_cpus=16,
            ram_total_bytes=64 * GIB, ram_available_bytes=50 * GIB,
        )
    )  # fmt: skip


@pytest.fixture
def wizard(
    qtbot: QtBot, hub: HubTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> MtpWizard:
    use_endpoint(monkeypatch, hub.endpoint)
    plan = plan_with(Plan(), {"device": "rtx-3060-12gb", "runtime.ctx": 16384})
    report = _report()
    w = MtpWizard(plan, detector=lambda: report, store=StateStore(tmp_path / "cfg"), remember=False)
    qtbot.addWidget(w)
    assert w.tasks.wait_idle(30)
    w.show()
    w.next()  # the Model page
    assert w.tasks.wait_idle(30)
    yield w
    w.tasks.shutdown()


def _open(wizard: MtpWizard, repo_id: str, folder: Path) -> HubModelsDialog:
    page = wizard.model_page
    page.hub_button.click()
    dialog = page.findChild(HubModelsDialog)
    assert dialog is not None and dialog.isVisible()
    dialog.ask_folder = lambda: folder  # type: ignore[method-assign]
    dialog.folder_button.click()
    dialog.repo_edit.setText(repo_id)
    dialog.list_button.click()
    assert wizard.tasks.wait_idle(60)
    assert dialog.listing is not None, dialog.notice.text()
    return dialog


def _column(dialog: HubModelsDialog, name: str) -> list[str]:
    c = COLUMNS.index(name)
    return [dialog.table.item(r, c).text() for r in range(dialog.table.rowCount())]


def test_the_table_is_sortable_and_marks_the_best(
    wizard: MtpWizard, hub: HubTestServer, tmp_path: Path
) -> None:
    dialog = _open(wizard, QUANTS_REPO, tmp_path)
    assert dialog.table.rowCount() == len(dialog.listing.rows) == 11  # type: ignore[union-attr]
    marks = _column(dialog, "")
    assert marks.count("★") == 1
    best = marks.index("★")
    assert dialog.table.item(best, 1).font().bold()
    selected = dialog.selected_row()
    assert selected is not None and selected is dialog.listing.rows[dialog.listing.best]  # type: ignore[union-attr, index]
    sizes = [dialog.table.item(r, 3).data(Qt.ItemDataRole.UserRole + 1) for r in range(11)]
    assert sizes == sorted(sizes)
    dialog.table.sortItems(COLUMNS.index("CPU offload"), Qt.SortOrder.DescendingOrder)
    offloads = [dialog.table.item(r, 6).data(Qt.ItemDataRole.UserRole + 1) for r in range(11)]
    assert offloads == sorted(offloads, reverse=True)
    # the projector's sentence still spans the plan's columns after the sort
    row = _column(dialog, "File").index("mmproj-F16.gguf")
    assert dialog.table.columnSpan(row, COLUMNS.index("Fits at ctx")) == 4
    assert "vision projector" in dialog.table.item(row, 5).text()
    assert "RTX 3060" in dialog.target_label.text()
    # another context: planned again from the headers already read, no request made
    requests = len(hub.requests)
    dialog.ctx_combo.setCurrentIndex(dialog.ctx_combo.findData(131072))
    assert wizard.tasks.wait_idle(60)
    fits = [r.fit for r in dialog.listing.rows if r.fit is not None]  # type: ignore[union-attr]
    assert len(fits) == 10 and all(f.ctx == 131072 for f in fits)
    assert len(hub.requests) == requests


def test_download_breaks_resumes_verifies_and_the_wizard_plans_it(
    wizard: MtpWizard, hub: HubTestServer, tmp_path: Path, small_dir: Path, qtbot: QtBot
) -> None:
    folder = tmp_path / "my models"
    dialog = _open(wizard, SMALL_REPO, folder)
    names = _column(dialog, "File")
    assert "tiny-Q8_0.gguf" in names
    broken = names.index("broken-Q4_K_M.gguf")
    assert "not a GGUF file" in dialog.table.item(broken, 5).text()
    dialog.select_row(
        next(
            i for i, r in enumerate(dialog.listing.rows) if r.header.model.path == "tiny-Q8_0.gguf"
        )
    )  # type: ignore[union-attr]
    assert dialog.download_button.isEnabled()

    # the connection breaks again and again: the part stays, nothing is taken for a model
    hub.faults.cut_after = {"tiny-Q8_0.gguf": 2 * MIB}
    hub.faults.cuts_left = 100
    dialog.download_button.click()
    assert wizard.tasks.wait_idle(60)
    assert dialog.notice.tone is Tone.BAD
    assert "connection broke" in dialog.notice.text() and ".part" in dialog.notice.text()
    part = folder / "tiny-Q8_0.gguf.part"
    kept = part.stat().st_size
    assert kept > 0 and not (folder / "tiny-Q8_0.gguf").exists()
    assert wizard.plan.model.path is None  # still the demo card

    # the network is back: Download and use resumes from the part's size
    hub.faults.cut_after = {}
    hub.reset_counters()
    with qtbot.waitSignal(dialog.model_downloaded, timeout=60000) as got:
        dialog.download_button.click()
    local = folder / "tiny-Q8_0.gguf"
    assert got.args == [local]
    assert hub.ranges["tiny-Q8_0.gguf"] == [(kept, local.stat().st_size)]
    assert local.read_bytes() == (small_dir / "tiny-Q8_0.gguf").read_bytes()
    assert not part.exists()
    assert wizard.tasks.wait_idle(60)
    assert dialog.notice.tone is Tone.GOOD and "resumed from" in dialog.notice.text()
    # the plan names the local file and the wizard planned it
    assert wizard.plan.model.path == local
    assert wizard.state.model_info is not None and wizard.state.model_info.has_mtp
    evaluation = wizard.state.evaluation()
    assert evaluation is not None and evaluation.budget is not None
    assert str(local) in wizard.model_page.info_labels["source"].text()
    dialog.close()


def test_cancel_keeps_the_part_and_says_so(
    wizard: MtpWizard, hub: HubTestServer, tmp_path: Path, qtbot: QtBot
) -> None:
    dialog = _open(wizard, SMALL_REPO, tmp_path)
    dialog.select_row(
        next(
            i for i, r in enumerate(dialog.listing.rows) if r.header.model.path == "tiny-Q8_0.gguf"
        )
    )  # type: ignore[union-attr]
    hub.faults.chunk_delay_s = 0.05  # a slow link
    dialog.download_button.click()
    qtbot.waitUntil(
        lambda: (
            isinstance(dialog._last_progress, DownloadProgress)
            and dialog._last_progress.done >= 2 * MIB
        ),
        timeout=30000,
    )
    assert dialog.cancel_button.isVisible() and "Downloading tiny-Q8_0.gguf" in dialog.status.text()
    dialog.cancel_button.click()
    assert "Download cancelled" in dialog.notice.text() and "resumes" in dialog.notice.text()
    assert dialog.download_button.isEnabled() and not dialog.cancel_button.isVisible()
    assert wizard.tasks.wait_idle(60)
    assert (tmp_path / "tiny-Q8_0.gguf.part").stat().st_size >= 2 * MIB
    assert not (tmp_path / "tiny-Q8_0.gguf").exists()
    assert wizard.plan.model.path is None


def test_a_bad_name_or_an_unreachable_hub_is_one_sentence(
    wizard: MtpWizard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = wizard.model_page
    page.hub_button.click()
    dialog = page.findChild(HubModelsDialog)
    assert dialog is not None
    dialog.repo_edit.setText("not a repo")
    dialog.list_button.click()
    assert dialog.notice.tone is Tone.BAD and "OWNER/NAME" in dialog.notice.text()
    use_endpoint(monkeypatch, "http://127.0.0.1:9")
    dialog.client = type(dialog.client)()
    dialog.repo_edit.setText(SMALL_REPO)
    dialog.list_button.click()
    assert wizard.tasks.wait_idle(60)
    assert "Cannot reach http://127.0.0.1:9" in dialog.notice.text()
    assert dialog.list_button.isEnabled() and dialog.listing is None
