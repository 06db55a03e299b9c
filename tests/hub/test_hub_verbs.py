"""The two sequences ``models hf`` runs, as use-case verbs without the CLI: a repository planned
file by file over the local Hub, and a downloaded file planned from its header on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.hub_repo import QWEN_QUANTS
from mtpstudio.core.errors import HubError
from mtpstudio.core.hub.client import HubClient
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.usecases.hub import download_model, plan_downloaded, plan_repository

from .conftest import QUANTS_REPO, SMALL_REPO

CARD_PLAN = plan_with(Plan(), {"device": "rtx-4070-super", "runtime.ctx": 32768})


def test_a_repository_is_planned_file_by_file(client: HubClient, tmp_path: Path) -> None:
    planned = plan_repository(client, QUANTS_REPO, None, CARD_PLAN, tmp_path)
    assert planned.repo.revision and len(planned.repo.revision) == 40  # pinned to a commit
    names = [row.header.model.parts[0].path for row in planned.rows]
    assert len(planned.rows) == len(QWEN_QUANTS) + 1  # and the vision projector, said why
    assert any(n.startswith("mmproj") for n in names)
    assert planned.best is not None and planned.rows[planned.best].fit is not None


def test_a_repository_that_is_not_there_is_one_sentence(client: HubClient, tmp_path: Path) -> None:
    with pytest.raises(HubError, match="nobody/empty was not found"):
        plan_repository(client, "nobody/empty", None, CARD_PLAN, tmp_path)


def test_a_downloaded_file_is_planned_from_disk(client: HubClient, tmp_path: Path) -> None:
    planned = plan_repository(client, SMALL_REPO, None, Plan(), tmp_path)
    row = next(r for r in planned.rows if r.header.model.parts[0].path == "tiny-Q8_0.gguf")
    result = download_model(client, planned.repo, row.header.model, tmp_path)
    plan, evaluation = plan_downloaded(Plan(), result.paths[0])
    assert plan.model.path == result.paths[0] and plan.model.card is None
    assert str(result.paths[0]) in evaluation.argv
