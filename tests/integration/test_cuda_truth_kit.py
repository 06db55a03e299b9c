"""The GPU kit's whole path without a GPU: the same script builds from the pinned sdist in
calls cut short by their budget (the second resumes the first), loads the dry table on the
CPU build, writes the archive, and the converter turns it into fixtures and the table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from devkit.cuda_compare import TruthArchive, compare
from devkit.kit_build import SDIST_NAME, SDIST_SHA256, sha256_of

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "cuda_truth.py"

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _kit(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "GGML_"))}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


def _steps(log: str) -> list[int]:
    """The step counts ninja announced (``[done/total]``), in order."""
    return [int(m[1]) for m in re.finditer(r"^\[\d+/(\d+)\]", log, re.M)]


@pytest.fixture(scope="module")
def sdist() -> Path:
    from support.servers import engine_bin_dir

    path = engine_bin_dir("upstream").parent / "sdist" / SDIST_NAME
    if not path.exists():
        pytest.fail(f"{path} is missing: scripts/build_engines.py upstream downloads it")
    assert sha256_of(path) == SDIST_SHA256
    return path


def test_a_build_cut_short_resumes_where_it_stopped(sdist: Path, tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    first = _kit("build", "--cpu", "--budget", "60", "--jobs", "2", "--sdist", sdist,
                 "--work", work, "--out", out)  # fmt: skip
    assert first.returncode == 3, first.stdout + first.stderr
    assert "BUILD NOT DONE: run again" in first.stdout
    assert re.search(r"\d+ objects to compile for llama-server, 0 of them CUDA", first.stdout)
    assert "time is up for this call: stopping ninja" in first.stdout
    state = json.loads((work / "cpu" / "build.json").read_text())
    assert state["kind"] == "cpu" and not state["done"] and "-DGGML_CUDA=OFF" in state["flags"]
    log_after_first = (out / "build.log").read_text()

    second = _kit("build", "--cpu", "--budget", "20", "--jobs", "2", "--sdist", sdist,
                  "--work", work, "--out", out)  # fmt: skip
    assert second.returncode == 3, second.stdout + second.stderr
    assert "extracting" not in second.stdout  # the source and the configure step are kept
    resumed = _steps((out / "build.log").read_text()[len(log_after_first) :])
    started = _steps(log_after_first)
    assert started and resumed, "ninja printed no progress"
    assert resumed[0] < started[0]  # ninja only counts what is left
    assert json.loads((work / "cpu" / "build.json").read_text())["calls"] == 2


def test_the_dry_run_archives_every_load_and_converts(
    engine: Callable[[str], Path], tmp_path: Path
) -> None:
    binary = engine("upstream")
    work, out = tmp_path / "work", tmp_path / "out"
    # no time for even one load: the archive is written anyway, the loads are left for later
    early = _kit("run", "--cpu", "--binary", binary, "--work", work, "--out", out,
                 "--budget", "1", "--reserve", "60")  # fmt: skip
    assert early.returncode == 3 and "LOADS LEFT: run again" in early.stdout
    assert "stopping for time: 2 loads left" in early.stdout
    assert TruthArchive.read(out / "cuda-truth.tar.gz").records() == []

    done = _kit("run", "--cpu", "--binary", binary, "--work", work, "--out", out,
                "--budget", "400", "--reserve", "60")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 of 2 loads done before this call; 2 to go" in done.stdout
    assert "ALL DONE" in done.stdout
    archive_path = out / "cuda-truth.tar.gz"
    assert archive_path.stat().st_size < 16 * 2**20
    with tarfile.open(archive_path) as tar:
        names = set(tar.getnames())
    assert {"cuda-truth/manifest.json", "cuda-truth/detect.json"} <= names
    assert "cuda-truth/nvidia-smi.txt" in names  # no nvidia-smi here: why it is missing
    archive = TruthArchive.read(archive_path)
    assert archive.manifest["complete"] and archive.manifest["backend"] == "cpu"
    records = archive.records()
    assert [r["config"]["name"] for r in records] == ["off 4k f16", "on dmax1 4k f16"]
    for record in records:
        assert record["loaded"] and "-lv" in record["argv"]
        assert record["first_prompt"]["ok"] and record["first_prompt"]["prompt_tokens"] > 8
        assert set(record["nvml"]) == {"before", "loaded", "after_prompt"}
        assert record["nvml"]["loaded"]["unavailable"]  # no NVML here, and it says why
        assert "llama_context" in archive.log(record)

    again = _kit("run", "--cpu", "--binary", binary, "--work", work, "--out", out)
    assert "2 of 2 loads done before this call; 0 to go" in again.stdout and again.returncode == 0

    converted = _kit("convert", archive_path, "--fixtures", tmp_path / "fixtures")
    assert converted.returncode == 0, converted.stdout + converted.stderr
    folders = list((tmp_path / "fixtures").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("upstream-11434-cpu-")
    table = (folders[0] / "table.txt").read_text()
    assert "off 4k f16" in table and "on dmax1 4k f16" in table and "MISS" not in table
    comparison = compare(TruthArchive.read(folders[0] / "cuda-truth.tar.gz"))
    segments = {r.segment for r in comparison.rows}
    assert {"weights", "kv_cache", "compute", "mtp_compute"} <= segments
    assert all(r.ok for r in comparison.rows)
