"""The whole PC as a target: the CPU catalogue, a RAM spec, another PC's rates by one rule, and
the plan options that name them."""

from __future__ import annotations

import json

import pytest

from mtpstudio.core.catalog.cpus import cpu_spec, cpu_specs, find_cpu
from mtpstudio.core.errors import CatalogError
from mtpstudio.core.speed.host_rates import HostRates
from mtpstudio.core.speed.host_target import RAM_READ_SHARE, other_host, parse_ram
from tests.support.cli import run_cli

GB = 1e9
HERE = HostRates(
    read_bytes_per_s=((1, 20 * GB), (2, 36 * GB)),
    gemv_flop_per_s=40 * GB,
    gemm_flop_per_s=120 * GB,
    cores=2,
    source="stated for the test",
)


def test_the_catalogue_covers_the_cpus_people_pair_with_such_cards() -> None:
    specs = cpu_specs()
    ids = {c.id for c in specs}
    assert len(ids) == len(specs) >= 50
    for family in ("ryzen-5-5600x", "ryzen-7-7700x", "ryzen-7-9700x", "core-i5-12400",
                   "core-i7-13700k", "core-i9-14900k", "core-ultra-7-265k",
                   "core-ultra-7-155h"):  # fmt: skip
        assert family in ids, family
    zen5 = cpu_spec("ryzen-7-9700x")
    assert (zen5.performance_cores, zen5.threads, zen5.memory_channels) == (8, 16, 2)
    assert zen5.microarchitecture == "Zen 5" and zen5.memory_type == "DDR5"
    hybrid = cpu_spec("core-i7-13700k")
    assert hybrid.efficiency_cores > 0 and hybrid.simd == "avx2"
    assert find_cpu("AMD Ryzen 7 9700X") == zen5 and find_cpu("Ryzen 7 9700X") == zen5
    with pytest.raises(CatalogError, match="ryzen-7-9700x"):
        cpu_spec("ryzen-7-970")


@pytest.mark.parametrize(
    ("text", "peak"),
    [
        ("ddr5-6000x2", 96.0),
        ("DDR4-3200x2", 51.2),
        ("ddr5-4800x4", 153.6),
        ("lpddr5x-8000x4", 256.0),
    ],
)
def test_a_ram_spec_gives_its_peak_and_what_a_read_reaches(text: str, peak: float) -> None:
    ram = parse_ram(text)
    assert ram.peak_bytes_per_s / GB == pytest.approx(peak)
    assert ram.read_bytes_per_s == pytest.approx(ram.peak_bytes_per_s * RAM_READ_SHARE)


def test_a_bandwidth_is_taken_as_the_read_itself() -> None:
    assert parse_ram("65GB/s").read_bytes_per_s == pytest.approx(65 * GB)
    assert parse_ram("ddr5-6000", cpu_spec("ryzen-ai-max-plus-395")).words.startswith(
        "DDR5-6000 × 4 channels"
    )  # the channels default to the CPU's
    for bad in ("ddr9-6000x2", "fast", "ddr5-6000x99", "0GB/s"):
        with pytest.raises(CatalogError, match="is not a RAM spec"):
            parse_ram(bad)


def test_another_pc_follows_this_ones_probe_by_its_clock() -> None:
    """One rule: a core scales with the boost clock (the kernels are 256-bit code, so AVX-512
    does not count), the RAM reads its share of the peak once enough threads read it, one
    thread reads what this one's did scaled by the clock, the performance cores are the
    threads."""
    cpu = cpu_spec("ryzen-7-9700x")
    pc = other_host(HERE, cpu, parse_ram("ddr5-6000x2"), here_ghz=2.75)
    scale = cpu.boost_ghz / 2.75
    assert pc.gemv_flop_per_s == pytest.approx(HERE.gemv_flop_per_s * scale)
    assert pc.cores == 8 and not pc.measured
    assert pc.read_bandwidth(1) == pytest.approx(20 * GB * scale)
    assert pc.read_bandwidth(8) == pytest.approx(96 * GB * RAM_READ_SHARE)
    assert "AMD Ryzen 7 9700X" in pc.source and "DDR5-6000" in pc.source
    intel = other_host(HERE, cpu_spec("core-i7-13700k"), None, here_ghz=2.75)
    assert intel.cores == cpu_spec("core-i7-13700k").performance_cores
    slower = other_host(HERE, cpu, parse_ram("ddr4-2400x2"), here_ghz=2.75)
    assert slower.read_bandwidth(8) < pc.read_bandwidth(8)
    assert other_host(HERE, None, None) is HERE  # this computer: its own probe


def test_plan_for_the_published_pc_with_a_given_acceptance() -> None:
    """The issue's command: the estimate's basis names that PC, the acceptance is the one
    given, and the plan keeps both (it changes no flag)."""
    result = run_cli(
        "plan", "--demo", "--cpu", "ryzen-7-9700x", "--ram", "ddr5-6000x2",
        "--acceptance", "0.87", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    speed = data["speed"]
    assert any("AMD Ryzen 7 9700X" in line and "DDR5-6000" in line for line in speed["basis"])
    assert speed["acceptance"]["rate"] == 0.87 and speed["acceptance"]["source"].startswith("given")
    assert data["effective_options"]["host"] == {"cpu": "ryzen-7-9700x", "ram": "ddr5-6000x2"}
    assert "0.87" not in " ".join(data["argv"])


def test_plan_help_lists_the_cpu_ids_and_a_typo_lists_them_too() -> None:
    helped = run_cli("plan", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    joined = text.replace("- ", "-")  # argparse wraps the ids at their hyphens
    assert "--cpu CPU" in text and all(c.id in joined for c in cpu_specs())
    assert "--ram SPEC" in text and "--acceptance A" in text
    typo = run_cli("plan", "--demo", "--cpu", "ryzen-7-9700")
    assert typo.returncode == 2
    assert "unknown CPU 'ryzen-7-9700'; catalogue ids: " in typo.stderr
    assert "ryzen-7-9700x" in typo.stderr
    ram = run_cli("plan", "--demo", "--ram", "ddr5")
    assert ram.returncode == 2 and "is not a RAM spec" in ram.stderr
