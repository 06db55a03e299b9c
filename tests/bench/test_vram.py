"""Peak VRAM sampling through the NVML source, fed by the recorded fake NVML of real machines."""

from __future__ import annotations

from fixtures.detect.fake_nvml import FakeNvml

from mtpstudio.core.bench.doctor import diagnose
from mtpstudio.core.bench.vram import VramSampler

from .samples import report


def _set_free(nvml: FakeNvml, free: int) -> None:
    for key in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"):
        mem = nvml.data["devices"][0][key]
        mem["used"] = mem["total"] - free - mem.get("reserved", 0)
        mem["free"] = free


def test_peak_is_the_highest_sample_and_counts_reserved_memory() -> None:
    nvml = FakeNvml("rtx4070super-kde.json")
    recorded = nvml.data["devices"][0]["nvmlDeviceGetMemoryInfo_v2"]
    total = recorded["total"]
    with VramSampler(nvml, interval_s=3600) as sampler:  # samples on enter and exit only ...
        _set_free(nvml, int(total * 0.02))  # ... and when asked: the run's peak
        sampler.sample()
        _set_free(nvml, recorded["free"])
    (peak,) = sampler.peaks()
    assert peak.device == "CUDA0"
    assert peak.total_bytes == total
    assert peak.used_bytes == total - int(total * 0.02)
    assert peak.samples == 3
    assert "nvmlShutdown" in nvml.calls
    r = report(rows=[[(16, 10, 9, 100.0)]])
    r.vram = sampler.peaks()
    assert [f.code for f in diagnose(r)] == ["vram-full"]


def test_recorded_machine_as_is_is_not_full() -> None:
    nvml = FakeNvml("rtx4070super-kde.json")
    with VramSampler(nvml, interval_s=3600) as sampler:
        pass
    (peak,) = sampler.peaks()
    mem = nvml.data["devices"][0]["nvmlDeviceGetMemoryInfo_v2"]
    assert peak.used_bytes == mem["total"] - mem["free"]  # used + reserved
    assert 0.8 < peak.fraction < 0.95


def test_no_driver_means_no_samples() -> None:
    nvml = FakeNvml("rtx4070super-kde.json", init_error="NVMLError_DriverNotLoaded")
    with VramSampler(nvml) as sampler:
        pass
    assert sampler.peaks() == []

    def no_pynvml() -> FakeNvml:
        raise ImportError("no pynvml")

    with VramSampler(None, loader=no_pynvml) as sampler:
        pass
    assert sampler.peaks() == []


def test_v1_only_driver() -> None:
    nvml = FakeNvml("rtx4070super-kde.json")
    del nvml.data["devices"][0]["nvmlDeviceGetMemoryInfo_v2"]
    with VramSampler(nvml, interval_s=3600) as sampler:
        pass
    (peak,) = sampler.peaks()
    v1 = nvml.data["devices"][0]["nvmlDeviceGetMemoryInfo"]
    assert peak.used_bytes == v1["total"] - v1["free"]
