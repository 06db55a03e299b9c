"""detect_all over the recorded machines, the no-GPU case, `detect --json` and its schema."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.detect.fake_nvml import FakeNvml
from fixtures.detect.machines import MIB
from support.runners import ScriptedRunner

from mtpstudio.cli.detect import add_detect_parser, cmd_detect, format_report
from mtpstudio.core.detect.gather import DetectionReport, DetectionSources, detect_all
from mtpstudio.core.detect.models import GpuVendor
from mtpstudio.core.detect.processes import ProcessCategory

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DOC = REPO / "docs" / "detect-schema.json"
Sources = Callable[..., DetectionSources]


def _detect(sources: DetectionSources) -> DetectionReport:
    return detect_all(sources, include_engines=False)


def test_desktop_amd_igpu_plus_nvidia(machine_sources: Sources) -> None:
    report = _detect(machine_sources("desktop_amd_igpu_nvidia"))
    assert [(g.id, g.vendor) for g in report.gpus] == [
        ("CUDA0", GpuVendor.NVIDIA),
        ("card1", GpuVendor.AMD),
    ]
    nvidia, igpu = report.gpus
    assert nvidia.drm_card == "card0" and nvidia.pci_device_id == "0x2783"
    assert nvidia.memory.source == "nvml v2"
    assert [c.name for c in nvidia.connectors if c.active] == ["DP-1"]
    assert igpu.integrated and igpu.memory.total_bytes == 512 * MIB
    assert report.display.display_gpu_ids == ["CUDA0"]
    assert [c.name for c in report.display.connectors] == ["DP-1"]
    assert (report.display.session_type, report.display.desktop) == ("wayland", "KDE")
    assert report.display.display_manager == "sddm"
    on_nvidia = {p.name: p for p in report.processes if p.gpu_id == "CUDA0"}
    assert on_nvidia["llama-server"].used_bytes == 9216 * MIB
    on_igpu = {p.name: p for p in report.processes if p.gpu_id == "card1"}
    assert set(on_igpu) == {"kwin_wayland", "Xwayland", "plasmashell", "firefox"}
    assert on_igpu["kwin_wayland"].kinds == ["drm"]
    assert on_igpu["kwin_wayland"].category is ProcessCategory.COMPOSITOR
    assert on_igpu["kwin_wayland"].regions["vram"] == 180_432 // 16 * 1024
    assert report.host.cpu_model == "AMD Ryzen 7 7800X3D 8-Core Processor"
    assert report.problems == []  # unreadable systemd (pid 1) is not worth a word


def test_laptop_display_on_the_igpu(machine_sources: Sources) -> None:
    report = _detect(machine_sources("laptop_intel_nvidia"))
    assert [g.id for g in report.gpus] == ["CUDA0", "card1"]
    nvidia = report.gpu("CUDA0")
    assert nvidia is not None and not nvidia.drives_display
    assert nvidia.name == "NVIDIA GeForce RTX 4070 Laptop GPU"
    assert report.display.display_gpu_ids == ["card1"]
    assert [(c.card, c.name) for c in report.display.connectors] == [("card1", "eDP-1")]
    kwin_on_nvidia = [p for p in report.processes if p.gpu_id == "CUDA0"]
    assert [(p.name, p.used_bytes) for p in kwin_on_nvidia] == [("kwin_wayland", 3 * MIB)]
    intel = [p for p in report.processes if p.gpu_id == "card1"]
    assert all(p.used_bytes and p.used_bytes > 0 for p in intel)  # iGPU: system memory counts


def test_single_nvidia(machine_sources: Sources) -> None:
    report = _detect(machine_sources("single_nvidia"))
    assert [g.id for g in report.gpus] == ["CUDA0"]
    assert report.display.display_gpu_ids == ["CUDA0"]
    assert report.display.desktop == "GNOME" and report.display.display_manager == "gdm"
    assert report.problems == []


def test_amd_dgpu_without_nvml(machine_sources: Sources) -> None:
    report = _detect(machine_sources("amd_dgpu"))
    (gpu,) = report.gpus
    assert gpu.id == "ROCm0" and gpu.vendor is GpuVendor.AMD and not gpu.integrated
    assert gpu.memory.source == "sysfs" and gpu.memory.total_bytes == 25_753_026_560
    assert gpu.memory.free_bytes == 25_753_026_560 - 20_534_546_432
    assert report.display.display_gpu_ids == ["ROCm0"]
    llama = next(p for p in report.processes if p.name == "llama-server")
    assert llama.used_bytes == 18 * 1024**3
    assert llama.category is ProcessCategory.INFERENCE_ENGINE
    # NVML missing is no problem when there is no NVIDIA card; root's Xorg is
    assert report.problems == [
        "Xorg (pid 902, compositor) belongs to another user: its GPU memory on AMD/Intel GPUs "
        "is not visible without root"
    ]


def test_nvidia_card_with_driver_not_loaded(machine_sources: Sources) -> None:
    nvml = FakeNvml({"devices": []}, init_error="NVMLError_DriverNotLoaded")
    report = _detect(machine_sources("single_nvidia", nvml=nvml))
    (gpu,) = report.gpus  # still seen through sysfs
    assert gpu.vendor is GpuVendor.NVIDIA and gpu.id == "CUDA0"
    assert gpu.name == "AD104 [GeForce RTX 4070 SUPER]"
    assert gpu.memory.total_bytes is None
    assert any("NVML unavailable (NVIDIA driver not loaded)" in p for p in report.problems)


def test_no_gpu_one_sentence(tmp_path: Path) -> None:
    sources = DetectionSources(
        nvml=FakeNvml({"devices": []}, init_error="NVMLError_LibraryNotFound"),
        sys_root=tmp_path / "sys",
        proc_root=Path("/proc"),
        etc_root=tmp_path / "etc",
        environ={},
        runner=ScriptedRunner(),
        home=tmp_path,
        system_dirs=(),
        opt_root=None,
    )
    report = detect_all(sources, include_engines=False)
    assert report.gpus == []
    assert report.problems[0] == (
        "No GPU found: NVML library not found and no AMD/Intel GPU in /sys/class/drm — "
        "planning works for a catalogue GPU or the CPU."
    )
    text = format_report(report)
    assert text.count("No GPU found") == 1
    assert "Host" in text and "Engines" in text
    assert report.host.logical_cpus  # the host is still reported


def test_a_source_that_hangs_is_cut_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import mtpstudio.core.detect.gather as report_mod

    hang_s = 30

    class HangingNvml(FakeNvml):
        def nvmlInit(self) -> None:
            time.sleep(hang_s)

    monkeypatch.setattr(report_mod, "NVIDIA_TIMEOUT_S", 0.3)
    sources = DetectionSources(
        nvml=HangingNvml({"devices": []}),
        sys_root=tmp_path,
        proc_root=tmp_path,
        etc_root=tmp_path,
        environ={},
        runner=ScriptedRunner(),
        system_dirs=(),
        opt_root=None,
    )
    start = time.monotonic()
    report = detect_all(sources, include_engines=False)
    assert time.monotonic() - start < hang_s / 2  # it did not wait for NVML
    assert "NVIDIA (NVML): no answer within 0.3 s" in report.problems


def test_a_source_that_raises_is_a_problem(machine_sources: Sources) -> None:
    class BrokenNvml(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("boom")

    report = _detect(machine_sources("single_nvidia", nvml=BrokenNvml("rtx4070super-kde.json")))
    assert any("NVML could not count GPUs" in p for p in report.problems)


def test_human_report_lines(machine_sources: Sources) -> None:
    text = format_report(_detect(machine_sources("desktop_amd_igpu_nvidia")))
    assert "CUDA0  NVIDIA GeForce RTX 4070 SUPER · discrete · 12.0 GiB" in text
    assert "nvidia 580.82.09, CUDA 13.0, compute 8.9, PCIe 4.0 x16" in text
    assert "drives the display (DP-1)" in text
    assert "card1  Raphael · integrated · 512 MiB" in text
    assert "llama-server" in text and "inference engine" in text
    assert "Display  wayland · KDE · sddm · display on CUDA0" in text
    assert "Host     AMD Ryzen 7 7800X3D 8-Core Processor · 8 cores / 16 threads" in text


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mtpstudio")
    add_detect_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["detect", *argv])


def test_cli_json_validates_against_the_model(
    machine_sources: Sources, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _detect(machine_sources("laptop_intel_nvidia"))
    assert cmd_detect(_args("--json"), detector=lambda _args: expected) == 0
    out = capsys.readouterr().out
    parsed = DetectionReport.model_validate_json(out)
    assert parsed == expected
    data = json.loads(out)
    assert data["gpus"][0]["id"] == "CUDA0" and data["schema_version"] == 1


def test_cli_json_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """The real command: whatever this machine has, the output is a valid report."""
    args = _args("--json")
    assert args.func is cmd_detect
    assert cmd_detect(args) == 0
    report = DetectionReport.model_validate_json(capsys.readouterr().out)
    assert report.host.logical_cpus
    if not report.gpus:
        assert report.problems[0].startswith("No GPU found: ")


def test_cli_human_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_detect(_args()) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPUs\n") and "\nHost " in out and "\nEngines\n" in out


def test_schema_doc_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/detect-schema.json is `mtpstudio detect --schema` (regenerate it with that)."""
    assert cmd_detect(_args("--schema")) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == DetectionReport.model_json_schema()
    assert json.loads(SCHEMA_DOC.read_text()) == printed, (
        "docs/detect-schema.json is stale: `mtpstudio detect --schema > docs/detect-schema.json`"
    )


def test_virtual_display_is_not_a_gpu(tmp_path: Path) -> None:
    from fixtures.detect.machines import Card, _write_card

    sys_root = tmp_path / "sys"
    _write_card(
        sys_root,
        Card(
            "card0",
            "0000:00:02.0",
            "",
            "0x1234",
            "0x1111",
            "0x030000",
            "bochs-drm",
            boot_vga="1",
            connectors={"Virtual-1": ("connected", "enabled")},
        ),
    )
    sources = DetectionSources(
        nvml=FakeNvml({"devices": []}, init_error="NVMLError_LibraryNotFound"),
        sys_root=sys_root,
        proc_root=tmp_path,
        etc_root=tmp_path,
        environ={},
        runner=ScriptedRunner(),
        system_dirs=(),
        opt_root=None,
    )
    report = detect_all(sources, include_engines=False)
    assert report.gpus == []
    assert report.problems[0].startswith("No GPU found: NVML library not found and no AMD/Intel")
    assert "ignored display device card0 (0x1234:0x1111, driver bochs-drm)" in report.problems[1]
