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

from devkit.cuda_compare import (
    TruthArchive,
    all_within_targets,
    budget_on,
    compare,
    context_ok,
    context_rows,
    cuda_buffers_mib,
    device_rows,
    smi_memory,
)
from devkit.fullsize import CARD_27B, CARD_35B
from devkit.kit_runs import (
    ARCHIVE_LIMIT,
    ARCHIVE_NAME,
    RunPlace,
    fit_target_mib,
    table,
    write_archive,
)
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.memory.devices import TargetDevice
from mtpstudio.core.server.load_log import ContextBuffers, LoadReport
from mtpstudio.core.units import MIB

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "cuda_truth"


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


# --- the CUDA side of the converter, on parsed figures ------------------------------------------


def _h100() -> TargetDevice:
    return TargetDevice(
        "CUDA0",
        "NVIDIA H100 80GB HBM3",
        81559 * MIB,
        driver_overhead_bytes=555 * MIB + 512 * MIB,  # the context figure and NVML's reserved
        vendor="nvidia",
        compute_capability="9.0",
    )


def _report_as_planned(budget: Budget, *, compute_scale: float = 1.0) -> LoadReport:
    """What a load log would say if every buffer were as the budget plans (MiB, 2 decimals)."""
    gpu, host = budget.devices[0].segments, budget.host.segments

    def mib(n: int) -> float:
        return round(n / MIB, 2)

    main = ContextBuffers(
        "main",
        kv={"CUDA0": mib(gpu["kv_cache"])},
        recurrent={"CUDA0": mib(gpu["recurrent_state"])},
        output={"CUDA_Host": mib(budget.parts["output"])},
        compute={
            "CUDA0": round(mib(gpu["compute"]) * compute_scale, 2),
            "CUDA_Host": mib(budget.parts["compute_host"]),
        },
    )
    mtp = ContextBuffers(
        "mtp",
        kv={"CUDA0": mib(gpu["mtp_kv_cache"])},
        compute={
            "CUDA0": mib(gpu["mtp_compute"]),
            "CUDA_Host": mib(budget.parts["mtp_compute_host"]),
        },
    )
    model = {"CUDA0": mib(gpu["weights"]), "CPU_Mapped": mib(host["weights_mapped"])}
    return LoadReport(model=model, contexts=[main, mtp])


def test_gpu_buffers_are_compared_with_the_gpu_segments() -> None:
    config = next(x.config for x in table("full") if x.config.name == "on dmax2 16k q8_0/q8_0")
    budget = budget_on(config, _h100(), CARD_35B)
    rows = device_rows(CARD_35B, config, _report_as_planned(budget), budget)
    by_segment = {r.segment: r for r in rows}
    assert {"weights", "kv_cache", "mtp_compute", "weights_host", "kv_cache_host"} <= set(
        by_segment
    )
    assert all(r.ok for r in rows), [r for r in rows if not r.ok]
    off = device_rows(CARD_35B, config, _report_as_planned(budget, compute_scale=1.1), budget)
    assert [r.segment for r in off if not r.ok] == ["compute"]


def test_the_cuda_context_is_what_the_process_holds_beyond_its_buffers() -> None:
    config = next(x.config for x in table("full") if x.config.name == "on dmax1 4k f16")
    budget = budget_on(config, _h100(), CARD_35B)
    report = _report_as_planned(budget)
    buffers = cuda_buffers_mib(report)
    segments = budget.devices[0].segments
    loaded = (segments["driver_overhead"] - 512 * MIB) / MIB
    grown = loaded + segments["runtime_growth"] / MIB  # cuBLAS, pool, kernels after a prompt
    used = {"loaded": int((buffers + 500) * MIB), "after_prompt": int((buffers + grown) * MIB)}
    rows = context_rows(CARD_35B, config, {"process_used_bytes": used}, report, budget, 512 * MIB)
    assert [r.segment for r in rows] == ["context loaded", "context after_prompt"]
    assert rows[1].logged == pytest.approx(grown, abs=0.01) and context_ok(rows[1])
    assert rows[0].logged == pytest.approx(500, abs=0.01) and not context_ok(rows[0])
    assert rows[0].predicted == pytest.approx(loaded, abs=0.01)


def test_nvidia_smis_memory_is_read_from_its_xml() -> None:
    xml = (
        "<nvidia_smi_log><gpu id='00000000:01:00.0'><fb_memory_usage>"
        "<total>81559 MiB</total><reserved>512 MiB</reserved><used>1 MiB</used>"
        "<free>81046 MiB</free></fb_memory_usage></gpu></nvidia_smi_log>"
    )
    assert smi_memory(xml) == {"total": 81559, "reserved": 512, "used": 1, "free": 81046}
    assert smi_memory("not xml") == {}
