"""The command line, run as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_cli

from mtpstudio import __version__


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"mtpstudio {__version__}"


def test_plan_demo_prints_the_model_and_options() -> None:
    result = run_cli("plan", "--demo", "--gpu", "rtx-4070-super", "--ctx", "65536")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "qwen35moe" in out
    assert "40 trunk + 1 MTP" in out
    assert "10 attention, 30 recurrent" in out
    assert "248,320" in out and "262,144 native" in out
    assert "65,536 tokens" in out
    assert "rtx-4070-super" in out
    assert "Traceback" not in result.stderr


def test_no_arguments_without_display_prints_demo_plan_and_gui_hint() -> None:
    result = run_cli()
    assert result.returncode == 0, result.stderr
    assert "qwen35moe" in result.stdout
    assert "mtpstudio gui" in result.stdout
    assert "No display found" in result.stdout


def test_save_then_load_plan_and_override(tmp_path: Path) -> None:
    saved = tmp_path / "my plans" / "plan.json"
    first = run_cli(
        "plan",
        "--demo",
        "--ctx",
        "131072",
        "-ctk",
        "q8_0",
        "--mtp",
        "--draft-max",
        "3",
        "--n-cpu-moe",
        "20",
        "--save",
        str(saved),
    )
    assert first.returncode == 0, first.stderr
    data = json.loads(saved.read_text())
    assert data["runtime"]["ctx"] == 131072
    assert data["runtime"]["moe"] == "n_cpu_moe" and data["runtime"]["n_cpu_moe"] == 20
    assert data["mtp"]["draft_max"] == 3

    again = tmp_path / "again.json"
    second = run_cli(
        "plan", "--plan", str(saved), "--ctx", "8192", "--no-mtp", "--save", str(again)
    )
    assert second.returncode == 0, second.stderr
    out = json.loads(again.read_text())
    assert out["runtime"]["ctx"] == 8192
    assert out["mtp"]["enabled"] is False
    assert out["mtp"]["draft_max"] == 3  # untouched options kept
    assert out["runtime"]["n_cpu_moe"] == 20


def test_plan_json_has_exactly_the_documented_shape() -> None:
    result = run_cli(
        "plan",
        "--demo",
        "--gpu",
        "rtx-4070-super",
        "--ctx",
        "131072",
        "--cache-type-k",
        "q8_0",
        "--cache-type-v",
        "q8_0",
        "--mtp",
        "--draft-max",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {
        "devices", "host", "argv", "warnings", "verdict", "target", "effective",
        "cpu_expert_layers", "desktop_options", "demo_defaults", "effective_options", "model",
        "unloadable_files", "runtime_growth", "engine_fit", "speed",
    }  # fmt: skip
    growth = out["runtime_growth"]
    assert growth["bytes"] == sum(p["bytes"] for p in growth["parts"]) > 0
    assert out["devices"][0]["segments"]["runtime_growth"] == growth["bytes"]
    layout = out["engine_fit"]["layout"]  # the engine's fit, replayed: what --fit will pick
    assert layout["n_layer"] == 42 and 0 < layout["n_part"] < 42
    assert out["engine_fit"]["projected_bytes"] <= out["engine_fit"]["target_bytes"]
    (device,) = out["devices"]
    assert device["id"] == "CUDA0" and "4070" in device["name"]
    assert {
        "weights",
        "kv_cache",
        "recurrent_state",
        "mtp_kv_cache",
        "mtp_compute",
        "compute",
        "output",
    } <= set(device["segments"])
    assert device["free_bytes"] == device["total_bytes"] - sum(device["segments"].values())
    assert device["fits"] is (device["free_bytes"] >= 0)
    assert out["argv"][out["argv"].index("-c") + 1] == "131072"
    assert "--spec-draft-n-max" in out["argv"]
    assert out["argv"][out["argv"].index("--parallel") + 1] == "1"
    assert not any("quadruple" in w for w in out["warnings"])  # one slot: nothing to warn about


def test_cpu_plan_has_one_cpu_device() -> None:
    out = json.loads(run_cli("plan", "--demo", "--gpu", "cpu", "--ctx", "4096", "--json").stdout)
    assert [d["id"] for d in out["devices"]] == ["CPU"]
    assert out["devices"][0]["total_bytes"] > 0


def test_fit_and_cpu_moe_flags_set_the_placement(tmp_path: Path) -> None:
    saved = tmp_path / "fit.json"
    assert (
        run_cli("plan", "--demo", "--fit", "--fit-margin", "512", "--save", str(saved)).returncode
        == 0
    )
    fit = json.loads(saved.read_text())
    assert fit["runtime"]["moe"] == "fit"
    assert fit["runtime"]["fit_margin_mib"] == 512
    assert run_cli("plan", "--demo", "--cpu-moe", "--save", str(saved)).returncode == 0
    assert json.loads(saved.read_text())["runtime"]["moe"] == "all_cpu"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.write_bytes(b"NOTAGGUF" * 8), "not a gguf file"),
        (lambda p: p.write_bytes(b"GGUF\x03\x00\x00\x00"), "truncated"),
        (lambda p: None, "not found"),
    ],
)
def test_broken_model_file_gives_one_line_and_nonzero(tmp_path: Path, make, expected: str) -> None:
    model = tmp_path / "bro ken\tmodel.gguf"
    make(model)
    result = run_cli("plan", "--model", str(model))
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0].lower()
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ctx", "100"], "ctx must be at least 256"),
        (["--gpu", "rtx-9999"], "unknown gpu"),
        (["--port", "0"], "port must be between 1 and 65535"),
        (["--draft-max", "2", "--draft-min", "5"], "draft min (5) must not exceed draft max (2)"),
    ],
)
def test_bad_options_give_one_line(args: list[str], expected: str) -> None:
    result = run_cli("plan", "--demo", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0].lower()


def test_gui_without_display_says_so() -> None:
    result = run_cli("gui")
    assert result.returncode == 2
    assert "no display" in result.stderr
