"""``mtpstudio models hf OWNER/NAME``: every GGUF of a repository planned from its remote header.

With ``--download`` the chosen file is fetched (resumable, checksum verified) and the plan then
points at the local file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtpstudio.cli.plan import add_plan_options, plan_and_changes
from mtpstudio.core.errors import PlanError


def register(sub: Any) -> None:
    """Add ``models`` (with ``models hf``) to the main parser's subparsers."""
    p_models = sub.add_parser("models", help="models on a Hugging Face repository")
    models_sub = p_models.add_subparsers(dest="models_command", metavar="SOURCE", required=True)
    p_hf = models_sub.add_parser(
        "hf",
        help="plan every GGUF of a Hugging Face repository from its header, then download one",
        description="List the GGUF files of OWNER/NAME (split parts grouped), read each header "
        "with HTTP range requests (a few MB, never the weights) and plan it for the card and "
        "engine. HF_ENDPOINT and the token of `hf auth login` (or HF_TOKEN) are honoured.",
    )
    p_hf.add_argument("repo", metavar="OWNER/NAME", help="the repository (or its page address)")
    p_hf.add_argument("--revision", help="branch, tag or commit (default: main)")
    p_hf.add_argument("--json", action="store_true", help="print the table as JSON")
    p_hf.add_argument(
        "--download",
        metavar="FILE",
        help="then download this file (its name, its quant such as IQ4_XS, or 'best')",
    )
    p_hf.add_argument(
        "--to",
        type=Path,
        metavar="DIR",
        help="download folder (default: ~/.local/share/mtpstudio/models/OWNER/NAME)",
    )
    p_hf.add_argument(
        "--save", type=Path, metavar="PLAN_JSON", help="after the download, write the plan here"
    )
    add_plan_options(p_hf)
    p_hf.set_defaults(func=cmd_models_hf)


def cmd_models_hf(args: argparse.Namespace) -> int:
    from mtpstudio.core.hub.client import HubClient
    from mtpstudio.core.usecases.hub import parse_repo_id, plan_repository
    from mtpstudio.core.usecases.words import models_dir

    if args.model is not None or args.demo is not None:
        raise PlanError(
            "models hf plans the repository's own files; --model and --demo do not apply",
            hint="Leave them out (mtpstudio plan --model FILE plans a file on disk).",
        )
    if args.save is not None and args.download is None:
        raise PlanError("--save needs --download: the plan names the downloaded file")
    plan, _ = plan_and_changes(args)
    repo_id = parse_repo_id(args.repo)
    client = HubClient()
    started = time.monotonic()
    folder = args.to if args.to is not None else models_dir() / repo_id
    planned = plan_repository(client, repo_id, args.revision, plan, folder)
    repo, rows, best, notes = planned.repo, planned.rows, planned.best, list(planned.notes)
    commit = repo.revision or ""  # the commit the revision points at now
    elapsed = time.monotonic() - started
    where = f"{repo_id} @ {args.revision or 'main'} (commit {commit[:7]})"
    if args.json and args.download is None:
        print(json.dumps(_json(where, rows, best, notes, elapsed), indent=2))
        return 0
    out = sys.stderr if args.json else sys.stdout
    _print_table(out, where, rows, best, notes, elapsed)
    if args.download is None:
        if best is not None:
            quant = rows[best].quant
            print(f"\nNext: add --download {quant} (or another file) to fetch it.", file=out)
        return 0
    index = _pick(rows, args.download, best)
    return _download(args, client, repo, rows[index], folder, out)


def _json(
    where: str, rows: Sequence[Any], best: int | None, notes: list[str], elapsed: float
) -> dict[str, Any]:
    return {
        "repository": where,
        "files": [r.to_json() | {"best": i == best} for i, r in enumerate(rows)],
        "best": rows[best].header.model.path if best is not None else None,
        "notes": notes,
        "seconds": round(elapsed, 3),
    }


def _print_table(
    out: Any, where: str, rows: Sequence[Any], best: int | None, notes: list[str], elapsed: float
) -> None:
    from mtpstudio.core.hub.fit_table import BEST_RULE, COLUMN_LEGEND
    from mtpstudio.core.usecases.hub import size_text

    fit = next((r.fit for r in rows if r.fit is not None), None)
    target = f"{fit.target}, ctx {fit.ctx:,}" if fit is not None else "the chosen card"
    print(f"{where}: {len(rows)} GGUF models planned for {target}", file=out)
    if fit is not None and not fit.is_gpu:
        print(
            "  No GPU was detected, so this plans for the CPU; give --gpu CARD (for example "
            "--gpu rtx-4070-super) to plan for a card.",
            file=out,
        )
    if fit is not None:
        print(f"  {fit.mtp_line}", file=out)
    head = ("", "file", "quant", "size", "MTP", "fits", "CPU offload", "max ctx", "desktop")
    table: list[tuple[str, ...]] = [head]
    for i, row in enumerate(rows):
        model = row.header.model
        mark = "★" if i == best else ""
        mtp = {True: "yes", False: "no", None: "?"}[row.has_mtp]
        if row.fit is None:
            table.append((mark, model.name, row.quant, size_text(model.size), mtp, "—", "", "", ""))
            continue
        f = row.fit
        fits = {True: "yes", False: "no", None: "?"}[f.fits]
        max_ctx = f"{f.max_ctx:,}" if f.max_ctx else "—"
        table.append(
            (
                mark,
                model.name,
                row.quant,
                size_text(model.size),
                mtp + ("" if f.mtp or not row.has_mtp else " (off)"),
                fits,
                f.offload_text(),
                max_ctx,
                f.reclaim_text(),
            )
        )
    widths = [max(len(r[c]) for r in table) for c in range(len(head))]
    for r in table:
        print(
            "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(), file=out
        )
    for row in rows:
        if row.error:
            print(f"  {row.header.model.name}: {row.error}.", file=out)
    for note in notes:
        print(f"  Note: {note}.", file=out)
    print(f"  {COLUMN_LEGEND}.", file=out)
    if best is not None:
        print(f"  {rows[best].header.model.name}: {BEST_RULE}.", file=out)
    else:
        print("  No file fits this card at this context, even with all layers moved.", file=out)
    read = sum(r.header.bytes_read for r in rows)
    print(
        f"Headers: {read / 1e6:,.1f} MB read for {len(rows)} models in {elapsed:.2f} s "
        "(HTTP range requests; no weights).",
        file=out,
    )


def _pick(rows: Sequence[Any], wanted: str, best: int | None) -> int:
    if wanted.lower() == "best":
        if best is None:
            raise PlanError("no file fits, so there is no best one to download")
        return best
    low = wanted.lower()
    by_path = [i for i, row in enumerate(rows) if row.header.model.path.lower() == low]
    if by_path:
        return by_path[0]
    found = []
    for i, row in enumerate(rows):
        model = row.header.model
        names = {model.parts[0].name.lower(), model.name.lower(), row.quant.lower()}
        if low in names:
            found.append(i)
    if len(found) == 1:
        return found[0]
    if found:
        paths = ", ".join(rows[i].header.model.path for i in found)
        raise PlanError(
            f"--download {wanted!r} names {len(found)} of the repository's models ({paths})",
            hint="Give the file's path in the repository.",
        )
    known = ", ".join(r.quant for r in rows)
    raise PlanError(
        f"--download {wanted!r} names none of the repository's models",
        hint=f"Give a file name or one of the quants: {known}.",
    )


def _download(
    args: argparse.Namespace, client: Any, repo: Any, row: Any, folder: Path, out: Any
) -> int:
    from mtpstudio.core.hub.download import DownloadProgress
    from mtpstudio.core.plan.io import save_plan
    from mtpstudio.core.usecases.hub import download_model, plan_downloaded, size_text

    model = row.header.model
    tty = sys.stderr.isatty()
    shown = {"tenth": -1}

    def progress(p: DownloadProgress) -> None:
        verb = "checking the kept part of" if p.phase == "checking" else "downloading"
        text = (
            f"{verb} {p.file}: {size_text(p.done)} of {size_text(p.total)} "
            f"({100 * p.fraction:.0f}%), {p.rate / 1e6:,.0f} MB/s"
        )
        if tty:
            print(f"\r{text}\x1b[K", end="", file=sys.stderr, flush=True)
        elif int(10 * p.fraction) != shown["tenth"]:
            shown["tenth"] = int(10 * p.fraction)
            print(text, file=sys.stderr, flush=True)

    print(f"\nDownloading {model.name} ({size_text(model.size)}) to {folder}", file=out)
    try:
        result = download_model(client, repo, model, folder, progress=progress)
    except KeyboardInterrupt:
        print(
            f"\nStopped: what was fetched stays in {folder} as .part files; run the same "
            "command again to resume.",
            file=sys.stderr,
        )
        return 130
    finally:
        if tty:
            print(file=sys.stderr)
    for note in result.notes:
        print(f"  Note: {note}.", file=out)
    resumed = f", resumed from {size_text(result.kept_bytes)}" if result.kept_bytes else ""
    print(
        f"Verified {len(result.paths)} file(s) against the Hub's checksum: "
        f"{size_text(result.fetched_bytes)} fetched{resumed}.",
        file=out,
    )
    local = result.paths[0]
    planned = row.fit.plan if row.fit is not None else plan_and_changes(args)[0]
    plan, result_plan = plan_downloaded(planned, local)
    print(f"Plan for {local}:", file=out)
    for line in result_plan.verdict.lines():
        print(f"  {line}", file=out)
    print(f"  {result_plan.mtp_line}", file=out)
    print("  " + " ".join(result_plan.argv), file=out)
    if args.save is not None:
        save_plan(plan, args.save)
        print(f"Plan saved to {args.save} (mtpstudio plan --plan {args.save}).", file=out)
    if args.json:
        files = [str(p) for p in result.paths]
        print(json.dumps({"files": files, "plan": plan.to_data()}, indent=2))
    return 0
