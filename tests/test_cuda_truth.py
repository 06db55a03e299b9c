"""The GPU kit's parts that need no engine: its table, the archive, the converter on every
committed archive, and the device command the docs give."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from mtpstudio.testing.cuda_compare import (
    TruthArchive,
    all_within_targets,
    compare,
    context_ok,
)
from mtpstudio.testing.fullsize import CARD_27B, CARD_35B
from mtpstudio.testing.kit_runs import (
    ARCHIVE_LIMIT,
    ARCHIVE_NAME,
    RunPlace,
    fit_target_mib,
    table,
    write_archive,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "cuda_truth"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cuda_truth", REPO / "benchmarks/cuda_truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cuda_truth"] = module
    spec.loader.exec_module(module)
    return module


def test_the_full_table_covers_what_the_issue_asks_for() -> None:
    loads = table("full")
    configs = [x.config for x in loads]
    assert {x.card for x in loads} == {CARD_35B, CARD_27B}
    assert {c.mtp > 0 for c in configs} == {True, False}
    assert min(c.ctx for c in configs) == 4096 and max(c.ctx for c in configs) == 131072
    assert {c.ctk for c in configs} == {"f16", "q8_0"}
    assert any(c.moe == "n_cpu_moe" for c in configs) and any(c.moe == "all_cpu" for c in configs)
    fits = [x for x in loads if x.emulate_mib]
    assert [x.emulate_mib for x in fits] == [12282, 16380] and all(
        x.config.moe == "fit" for x in fits
    )
    # on the GPU every other load warms up and leaves the fit off; the CPU dry run does not warm
    assert all("--fit" in x.config.extra for x in loads if not x.emulate_mib)
    assert all("--no-warmup" in x.config.extra for x in table("dry"))
    assert len(table("short")) == 5 and len(table("dry")) == 2
    with pytest.raises(ValueError, match="unknown table"):
        table("huge")


def test_the_fit_target_leaves_the_room_of_the_emulated_card() -> None:
    # an 80 GB card playing a 12 GB one: the fit keeps free - target, the default 1024 margin
    assert fit_target_mib(81559, 12282) == 81559 - 12282 + 1024
    assert fit_target_mib(8000, 12282) == 1024  # a smaller card than emulated: the default


def test_the_archive_stays_under_the_limit_by_cutting_logs(tmp_path: Path) -> None:
    place = RunPlace(tmp_path / "work")
    (place.files / "loads").mkdir(parents=True)
    (place.files / "manifest.json").write_text(json.dumps({"backend": "cpu"}))
    raw = base64.b64encode(os.urandom(17 * 2**20)).decode()  # 22 MB that barely compress
    noise = "\n".join(raw[i : i + 76] for i in range(0, len(raw), 76))
    (place.files / "loads" / "00-x.log").write_text(noise)
    archive = write_archive(place, tmp_path / "out")
    assert archive.name == ARCHIVE_NAME and archive.stat().st_size <= ARCHIVE_LIMIT
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        log = tar.extractfile("cuda-truth/loads/00-x.log")
        assert log is not None
        text = log.read().decode()
    assert "cuda-truth/manifest.json" in names
    assert "lines cut by the kit" in text and text.startswith(noise[:64])


def test_a_foreign_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("x/readme.txt")
        tar.addfile(info)
    with pytest.raises(ValueError, match="no kit archive"):
        TruthArchive.read(path)


def test_the_docs_give_the_command_the_kit_prints() -> None:
    docs = (REPO / "docs" / "cuda-truth.md").read_text()
    script = _script()
    assert f"command: `{script.device_command(570)}`" in docs
    assert 'carry: `[".cuda-kit"]`' in docs
    gitignore = (REPO / ".gitignore").read_text().splitlines()
    assert "/.cuda-kit/" in gitignore and "/.cuda-build/" in gitignore


ARCHIVES = sorted(FIXTURES.glob(f"*/{ARCHIVE_NAME}"))


@pytest.mark.parametrize("archive", ARCHIVES, ids=[a.parent.name for a in ARCHIVES])
def test_every_committed_archive_converts_to_its_table_within_the_targets(archive: Path) -> None:
    """What the converter makes of a committed archive is the committed table, and every
    segment is within its target (a miss is fixed in the model, not in the fixture)."""
    comparison = compare(TruthArchive.read(archive))
    table_text = (archive.parent / "table.txt").read_text()
    assert "\n".join(comparison.table_lines()) + "\n" == table_text
    assert comparison.rows and not comparison.failed
    misses = [f"{r.config}/{r.segment}" for r in comparison.rows if not r.ok]
    misses += [f"{r.config}/{r.segment}" for r in comparison.context_rows if not context_ok(r)]
    assert not misses and all_within_targets(comparison)


def test_there_is_a_committed_archive_to_convert() -> None:
    assert ARCHIVES, f"no archive under {FIXTURES}: the dry run's is committed there"
