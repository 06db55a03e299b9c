"""Models on the Hugging Face Hub: the listing grouped by model, the remote GGUF headers, the
fit table (which quant fits this machine) and the download.

`mtpstudio models` and the Model page's Hub dialog enter the hub room here; the two sequences
``models hf`` runs (a repository planned file by file, a downloaded file planned) are verbs here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.detect.gather import detect_for
from mtpstudio.core.errors import HubError
from mtpstudio.core.hub.client import HubClient, Repo, parse_repo_id
from mtpstudio.core.hub.download import DownloadProgress, DownloadResult, download_model
from mtpstudio.core.hub.fit_table import BEST_RULE, COLUMN_LEGEND, TableRow, best_row, table_rows
from mtpstudio.core.hub.listing import RemoteModel, group_models, size_text
from mtpstudio.core.hub.remote_header import RemoteHeader, read_remote_headers
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts, PlanResult, evaluate, machine_for
from mtpstudio.core.usecases.planning_context import planning_context_for

__all__ = [
    "BEST_RULE",
    "COLUMN_LEGEND",
    "DownloadProgress",
    "DownloadResult",
    "HubClient",
    "RemoteHeader",
    "RemoteModel",
    "Repo",
    "RepositoryPlan",
    "TableRow",
    "best_row",
    "download_model",
    "group_models",
    "list_models",
    "parse_repo_id",
    "plan_downloaded",
    "plan_repository",
    "planned_table",
    "read_remote_headers",
    "size_text",
    "table_rows",
]


def list_models(
    client: HubClient, repo_id: str, revision: str | None
) -> tuple[Repo, list[RemoteModel], list[str]]:
    """The repository at the commit ``revision`` (default: main) points at now, its GGUF
    models, and one sentence per file left out. Reading every header at that commit keeps the
    files consistent while the branch moves on."""
    commit = client.resolve(Repo(repo_id, revision))
    repo = Repo(repo_id, commit)
    models, notes = group_models(client.list_files(repo))
    return repo, models, notes


def planned_table(
    headers: Sequence[RemoteHeader], plan: Plan, machine: MachineFacts, folder: Path
) -> tuple[tuple[TableRow, ...], int | None]:
    """Every model whose header was read, planned on this machine (the others keep their one
    sentence), and the index of the best choice (None when nothing runs)."""
    rows = tuple(table_rows(headers, plan, machine, folder))
    return rows, best_row(rows)


@dataclass(frozen=True)
class RepositoryPlan:
    """A repository's GGUF models at one commit, each planned on this machine.

    Attributes:
        repo: the repository at the commit its revision pointed at.
        rows: one row per model (planned, or the sentence why not).
        best: the index of the best choice (None when nothing runs).
        notes: one sentence per file left out of the listing.
    """

    repo: Repo
    rows: tuple[TableRow, ...]
    best: int | None
    notes: tuple[str, ...]


def plan_repository(
    client: HubClient, repo_id: str, revision: str | None, plan: Plan, folder: Path
) -> RepositoryPlan:
    """Every GGUF model of ``repo_id`` planned with ``plan``'s settings on this machine (its
    header read over the Hub, nothing downloaded); HubError when it holds none."""
    repo, models, notes = list_models(client, repo_id, revision)
    if not models:
        raise HubError(
            f"{repo_id} has no GGUF files at {revision or 'main'}",
            hint="Choose a repository of GGUF quants (their names usually end in -GGUF).",
        )
    headers = read_remote_headers(client, repo, models)
    rows, best = planned_table(headers, plan, machine_for(detect_for(plan)), folder)
    return RepositoryPlan(repo, rows, best, tuple(notes))


def plan_downloaded(plan: Plan, path: Path) -> tuple[Plan, PlanResult]:
    """``plan`` for the downloaded model at ``path`` (its header read from disk), and what it
    plans to on this machine."""
    info = read_model_info(path)
    plan = plan_with(plan, {"model.path": str(path), "model.card": None})
    return plan, evaluate(plan, planning_context_for(plan, machine_for(detect_for(plan)), info))
