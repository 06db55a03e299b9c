"""The catalogue as a user reaches it from the command line: every GPU family people own plans
(`plan --demo --gpu ID`), `--gpu list` groups the cards by vendor, a typo gets "did you mean",
and every quant of both models is a demo card (`--demo list`, `--demo qwen3.6-27b-q4_k_m`)."""

from __future__ import annotations

import re

import pytest
from support.cli import run_cli

# one card of each vendor, each workstation line and each laptop generation
ONE_OF_EACH = [
    "rtx-2080-ti",
    "rtx-3080-12gb",
    "rtx-4070-ti-super",
    "rtx-5070",
    "rtx-a5000",
    "rtx-pro-4000-blackwell",
    "rtx-2070-laptop",
    "rtx-3070-ti-laptop",
    "rtx-4090-laptop",
    "rtx-5080-laptop",
    "rx-7900-xtx",
    "rx-9070-xt",
    "arc-a770-16gb",
    "arc-b580",
]


@pytest.mark.parametrize("gpu", ONE_OF_EACH)
def test_a_card_of_each_family_plans_with_memory_and_speed(gpu: str) -> None:
    done = run_cli("plan", "--demo", "--gpu", gpu)
    assert done.returncode == 0, done.stderr
    assert f"target           {gpu}" in done.stdout
    assert re.search(r"^Verdict: ", done.stdout, re.M), done.stdout
    assert re.search(r"^Speed \(estimate\): ≈ [\d.]+ tok/s decoding", done.stdout, re.M)


def test_the_gpu_list_is_grouped_by_vendor() -> None:
    done = run_cli("plan", "--gpu", "list")
    assert done.returncode == 0, done.stderr
    heads = [line for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert heads == ["NVIDIA:", "AMD:", "Intel:"]
    nvidia, amd, intel = re.split(r"^\w+:\n", done.stdout, flags=re.M)[1:]
    assert "rtx-4090-laptop" in nvidia and "80-150 W" in nvidia
    assert "rx-7900-xtx" in amd and "rocm, vulkan" in amd
    assert "arc-b580" in intel and "sycl, vulkan" in intel


def test_a_typo_gets_did_you_mean() -> None:
    done = run_cli("plan", "--demo", "--gpu", "rtx-3090ti")
    assert done.returncode != 0
    assert "did you mean rtx-3090-ti" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_every_quant_is_a_demo_card_with_its_size() -> None:
    done = run_cli("plan", "--demo", "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Qwen3.6 35B A3B (qwen3.6-35b-a3b):"
    assert re.search(r"^  qwen3\.6-35b-a3b-iq4_xs +19\.\d\d GB  IQ4_XS  \(default\)$", done.stdout,
                     re.M)  # fmt: skip
    assert re.search(r"^  qwen3\.6-27b-q4_k_m +1\d\.\d\d GB  Q4_K_M$", done.stdout, re.M)
    assert re.search(r"^  qwen3\.6-27b-iq4_ks .* IQ4_KS  ik_llama\.cpp only$", done.stdout, re.M)


@pytest.mark.parametrize(
    ("card", "gpu"),
    [("qwen3.6-27b-q4_k_m", "rtx-3090"), ("qwen3.6-35b-a3b-q4_k_m", "rtx-5060-ti-16gb")],
)
def test_the_quants_people_run_plan_on_their_cards(card: str, gpu: str) -> None:
    done = run_cli("plan", "--demo", card, "--gpu", gpu)
    assert done.returncode == 0, done.stderr
    assert f"Model: demo card {card}" in done.stdout
    assert "quant mix     Q4_K " in done.stdout
    assert re.search(r"^Speed \(estimate\): ≈ [\d.]+ tok/s decoding", done.stdout, re.M)
