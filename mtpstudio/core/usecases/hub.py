"""Models on the Hugging Face Hub: the listing grouped by model, the remote GGUF headers, the
fit table (which quant fits this machine) and the download.

`mtpstudio models` and the Model page's Hub dialog enter the hub room here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mtpstudio.core.hub.client import HubClient, Repo, parse_repo_id
from mtpstudio.core.hub.download import DownloadProgress, DownloadResult, download_model
from mtpstudio.core.hub.fit_table import BEST_RULE, COLUMN_LEGEND, TableRow, best_row, table_rows
from mtpstudio.core.hub.listing import RemoteModel, group_models, size_text
from mtpstudio.core.hub.remote_header import RemoteHeader, read_remote_headers
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import MachineFacts

__all__ = [
    "BEST_RULE",
    "COLUMN_LEGEND",
    "DownloadProgress",
    "DownloadResult",
    "HubClient",
    "RemoteHeader",
    "RemoteModel",
    "Repo",
    "TableRow",
    "best_row",
    "download_model",
    "group_models",
    "list_models",
    "parse_repo_id",
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
