"""`mtpstudio plan` as a new user meets it (issue 11): plain models, honest verdicts, key files,
vendor-aware desktop options, JSON fields, the demo's published defaults, --engine paths."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import write_model
from support.servers import EngineMissingError, engine_binary


def run_plan(
    *args: str, home: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DISPLAY", "WAYLAND_DISPLAY"}}
    if home is not None:
        env["XDG_CONFIG_HOME"] = str(home / "config")
    return subprocess.run(
        [sys.executable, "-m", "mtpstudio", "plan", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        input=stdin,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "usage:" not in lines[0]
    return lines[0]


def plan_json(*args: str, home: Path | None = None) -> dict[str, Any]:
    result = run_plan(*args, "--json", home=home)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# -- item 2: MTP auto ------------------------------------------------------------------------


def test_a_plain_gguf_plans_with_mtp_off_and_says_why(tiny_model: Any) -> None:
    model = tiny_model("dense")
    result = run_plan("--model", str(model))
    assert result.returncode == 0, result.stderr
    assert "MTP auto: off (the model has no MTP (nextn) layer)." in result.stdout
    assert "--spec-type" not in result.stdout
    # asking for MTP on such a model stays an error, in one sentence
    assert "no MTP (nextn) layer" in one_line_error(run_plan("--model", str(model), "--mtp"))


def test_mtp_auto_is_on_for_a_model_with_an_mtp_layer(tiny_model: Any) -> None:
    """The full-size card on a 24 GB card drafts faster by the estimate: auto is on. The tiny
    model's drafts cost more than they gain (its passes are all fixed costs), so auto is off
    and says so; asked for, on."""
    model = str(tiny_model("hybrid-mtp"))
    out = plan_json("--demo", "--gpu", "rtx-3090")  # the full-size 35B-A3B card
    assert out["effective"]["mtp"] is True
    assert out["effective"]["mtp_reason"].startswith("MTP auto: on")
    assert out["effective_options"]["mtp"]["enabled"] is True
    assert "--spec-type" in out["argv"]
    cpu = plan_json("--model", model)
    assert cpu["effective"]["mtp"] is False and "--spec-type" not in cpu["argv"]
    assert cpu["effective"]["mtp_reason"].startswith("MTP auto: off (the estimate is ")
    assert "--spec-type" in plan_json("--model", model, "--mtp")["argv"]


# -- item 3: ik on qwen35moe -----------------------------------------------------------------


def test_ik_on_qwen35moe_plans_todays_ik_where_no_build_says_otherwise(tiny_model: Any) -> None:
    """No ik build is detected here: ``--engine ik`` plans today's ik (8337e4c, which runs
    qwen35moe's MTP with its ``--spec-type mtp:`` stage), never the legacy ``-mtp``; the
    0.1.5 era's refusal is kept for a build that answers as that era
    (``tests/engines/test_recorded_eras.py``)."""
    model = str(tiny_model("hybrid-mtp"))
    result = run_plan("--model", model, "--engine", "ik", "--mtp", "--gpu", "rtx-3090", "--check")
    assert result.returncode == 0, result.stdout
    assert "Verdict: will NOT run as planned" not in result.stdout
    command = result.stdout.split("Command line:")[1]
    assert " -mtp" not in command and "--spec-type mtp:n_max=" in command
    out = plan_json("--demo", "--engine", "ik", "--gpu", "rtx-3090")
    assert out["verdict"]["status"] == "fits" and out["effective"]["mtp"] is True
    assert any("mtp:n_max=" in a for a in out["argv"])


# -- item 4: the API key lives in a 0600 file the plan names ------------------------------


def test_api_key_goes_to_a_user_only_file_never_the_plan_or_argv(tmp_path: Path) -> None:
    saved = tmp_path / "plan.json"
    key = "sk-secret-123"
    model = write_model(tmp_path / "models" / "q.gguf")  # render writes units for files only
    result = run_plan(
        "--model", str(model), "--host", "0.0.0.0", "--api-key", key, "--save", str(saved),
        "--engine", str(engine_binary("upstream")), home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    key_file = tmp_path / "config" / "mtpstudio" / "server-api-key"
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key not in saved.read_text() and key not in result.stdout
    assert json.loads(saved.read_text())["server"]["api_key_file"] == str(key_file)
    argv = plan_json("--plan", str(saved), home=tmp_path)["argv"]
    assert argv[argv.index("--api-key-file") + 1] == str(key_file) and key not in argv
    # render uses that same file: the key clients were given keeps working
    out = tmp_path / "out"
    render = [sys.executable, "-m", "mtpstudio", "render", "--plan", str(saved),
              "--out", str(out), "--user", "alice"]  # fmt: skip
    rendered = subprocess.run(
        render,
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")},
        timeout=180,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert key_file.read_text().strip() == key  # not replaced by a generated one
    assert "New API key" not in rendered.stdout
    unit = (out / "mtpstudio-llama.service").read_text()
    assert f"--api-key-file {key_file}" in unit and key not in unit
    assert not any(key in f.read_text() for f in out.iterdir())
    # the key can come from standard input, so it is not in mtpstudio's own argv either
    piped = run_plan("--demo", "--api-key", "-", home=tmp_path, stdin="sk-from-stdin\n")
    assert piped.returncode == 0, piped.stderr
    assert key_file.read_text().strip() == "sk-from-stdin"


# -- item 8: desktop options by vendor, sourced figures ---------------------------------


def test_nvidia_profile_is_refused_for_an_amd_card() -> None:
    line = one_line_error(run_plan("--demo", "--gpu", "rx-7800-xt", "--desktop", "nvidia-profile"))
    assert "does not apply to an AMD card" in line and "llvmpipe" in line


def test_desktop_options_follow_the_vendor_with_their_savings() -> None:
    amd = plan_json("--demo", "--gpu", "rx-7800-xt")
    assert [o["option"] for o in amd["desktop_options"]] == ["none", "igpu", "llvmpipe"]
    assert amd["devices"][0]["segments"]["driver_overhead"] > 0  # the ROCm runtime is counted
    nv = plan_json("--demo", "--gpu", "rtx-4070-super")
    options = {o["option"]: o for o in nv["desktop_options"]}
    assert set(options) == {"none", "nvidia-profile", "igpu", "llvmpipe"}
    desktop = nv["devices"][0]["segments"]["desktop"]
    assert options["none"]["saves_bytes"] == 0
    assert options["igpu"]["saves_bytes"] == desktop
    profile = options["nvidia-profile"]
    assert 0 < profile["saves_bytes"] < desktop
    assert profile["desktop_bytes"] + profile["saves_bytes"] == desktop


# -- item 9: JSON fields -----------------------------------------------------------------


def test_json_carries_what_the_text_shows() -> None:
    out = plan_json("--demo", "--gpu", "rtx-4070-super", "--ctx", "200000")
    assert out["verdict"]["status"] in {"fits", "does_not_fit"}
    assert out["verdict"]["fits"] is out["devices"][0]["fits"]
    assert out["effective"]["ctx"] % 256 == 0 and out["effective"]["ctx"] >= 200000
    assert out["effective_options"]["runtime"]["ctx"] == 200000
    layers = out["cpu_expert_layers"]
    assert layers and layers == sorted(layers) and all(isinstance(i, int) for i in layers)
    assert any(f"{layers[0]}-" in w for w in out["warnings"] if "fit is expected" in w)


# -- item 10: the demo follows the published setup where it fits ------------------------


def test_demo_uses_the_published_setup_when_it_fits() -> None:
    out = plan_json("--demo", "--gpu", "rtx-4070-super")
    assert out["demo_defaults"].startswith("Demo defaults: the published setup")
    assert "fits" in out["demo_defaults"]
    argv = out["argv"]
    for flag, value in (
        ("-c", "131072"),
        ("--spec-draft-n-max", "3"),
        ("--spec-draft-p-min", "0.75"),
        ("--spec-draft-type-k", "q8_0"),
        ("--spec-draft-type-v", "q8_0"),
    ):
        assert argv[argv.index(flag) + 1] == value
    # what the user chose is kept
    mine = plan_json("--demo", "--gpu", "rtx-4070-super", "--ctx", "8192", "--draft-max", "1")
    assert mine["argv"][mine["argv"].index("-c") + 1] == "8192"
    assert mine["argv"][mine["argv"].index("--spec-draft-n-max") + 1] == "1"


def test_demo_keeps_its_defaults_where_the_published_setup_does_not_fit() -> None:
    result = run_plan("--demo", "--gpu", "rtx-3060-12gb", "--cpu-moe", "--fit-margin", "8000")
    assert result.returncode == 0, result.stderr
    assert "published setup" in result.stdout
    assert "does not fit" in result.stdout.split("Demo defaults:")[1].splitlines()[0]
    assert " -c 32768 " in result.stdout


# -- item 13: honest text, an exit status, sizes, the demo cards -------------------------


def test_check_exits_3_when_it_does_not_fit_and_0_when_it_does() -> None:
    short = run_plan("--demo", "--gpu", "rtx-3060-12gb", "--n-cpu-moe", "0", "--check")
    assert "Verdict: does NOT fit" in short.stdout and short.returncode == 3
    ok = run_plan("--demo", "--gpu", "rtx-4070-super", "--check")
    assert "Verdict: fits" in ok.stdout and ok.returncode == 0
    plain = run_plan("--demo", "--gpu", "rtx-3060-12gb", "--n-cpu-moe", "0")
    assert plain.returncode == 0  # without --check the report is just a report


def test_fit_lines_each_say_what_they_buy_and_come_ranked() -> None:
    result = run_plan(
        "--demo", "--gpu", "rtx-3060-12gb", "--n-cpu-moe", "0", "--ctx", "65536", "--mtp"
    )
    fit = [w.strip()[len("- Fit: ") :] for w in result.stdout.splitlines() if "- Fit: " in w]
    outcome = re.compile(
        r"(: | — )(fits, [\d,]+ MiB spare|fits with \d+ layers? on the CPU|still [\d,]+ MiB short)$"
    )
    assert len(fit) >= 3 and all(outcome.search(line) for line in fit), fit
    assert "suggested above" not in result.stdout and "at this offload" not in result.stdout
    fits = [" fits," in line or " fits with " in line for line in fit]
    assert fits[0] and fits == sorted(fits, reverse=True)  # what fits comes first
    # of those, the one with the most experts on the GPU first (the engine's own fit splits a
    # layer; --n-cpu-moe moves whole layers)
    # (the two placements of the experts tie within the estimate's rounding: either comes first)
    assert fit[0].startswith(("let the engine's fit place the weights: ", "--n-cpu-moe "))
    assert any(line.startswith("--n-cpu-moe ") for line in fit)


def test_no_slots_warning_for_one_slot_and_desktop_text_agrees_with_the_budget() -> None:
    result = run_plan("--demo", "--gpu", "rtx-4070-super")
    assert "quadruple" not in result.stdout
    assert "desktop VRAM     none" not in result.stdout
    assert "none: the desktop keeps its VRAM (1,024 MiB on the card" in result.stdout
    two = run_plan("--demo", "--gpu", "rtx-4070-super", "--parallel", "2")
    assert "2 slots with MTP keep" in two.stdout


@pytest.mark.parametrize(
    ("text", "tokens"), [("131072", 131072), ("128k", 131072), ("1e6", 1000000), ("64K", 65536)]
)
def test_ctx_accepts_sizes(text: str, tokens: int) -> None:
    out = plan_json("--demo", "--gpu", "rtx-4070-super", "--ctx", text)
    assert out["effective_options"]["runtime"]["ctx"] == tokens


@pytest.mark.parametrize("text", ["1e6x", "lots", "1.5", "-5"])
def test_ctx_nonsense_is_one_sentence(text: str) -> None:
    line = one_line_error(run_plan("--demo", f"--ctx={text}"))
    assert "is not a whole number of tokens" in line and "128k" in line


def test_demo_cards_are_listed() -> None:
    from mtpstudio.core.catalog.models import model_cards

    ids = [c.card_id for c in model_cards()]
    listed = run_plan("--demo", "list")
    assert listed.returncode == 0
    rows = [line.split()[0] for line in listed.stdout.splitlines() if line.startswith("  ")]
    assert rows == ids  # every card, grouped by model, in catalogue order
    helped = " ".join(run_plan("--help").stdout.split())
    assert "qwen3.6-35b-a3b, qwen3.6-27b" in helped or "qwen3.6-27b, qwen3.6-35b-a3b" in helped
    assert "`--demo list` lists every quant" in helped
    assert "--check" in helped and "3" in helped
    line = one_line_error(run_plan("--demo", "no-such-card"))
    assert "qwen3.6-35b-a3b, qwen3.6-27b" in line and "plan --demo list" in line


# -- item 11: --engine PATH ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("foo", "neither upstream, ik nor the path of a llama-server binary"),
        ("/nonexistent/llama-server", "does not exist"),
        ("{tmp}/plain file", "is not an executable file"),
        ("/bin/true", "is not a llama-server mtpstudio knows"),
    ],
)
def test_bad_engine_is_refused_at_once(value: str, expected: str, tmp_path: Path) -> None:
    plain = tmp_path / "plain file"
    plain.write_text("not a program\n")
    plain.chmod(0o644)
    value = value.format(tmp=tmp_path)
    assert expected in one_line_error(run_plan("--demo", "--engine", value))


def _engine(name: str) -> Path:
    try:
        return engine_binary(name)
    except EngineMissingError as exc:  # scripts/test builds them; say so rather than skip
        pytest.fail(str(exc))


@pytest.mark.engine
def test_engine_paths_are_probed_like_detected_builds(tiny_model: Any, tmp_path: Path) -> None:
    model = str(tiny_model("hybrid-mtp"))
    up = plan_json("--model", model, "--engine", str(_engine("upstream")), "--mtp")
    assert up["argv"][0] == str(_engine("upstream"))
    assert not any("no upstream llama-server was found" in w for w in up["warnings"])
    assert "--spec-type" in up["argv"]
    saved = tmp_path / "ik.json"
    # a GPU target: on a machine without one the model file plans, and its command runs, on the
    # CPU (-ngl 0, no fit)
    ik = run_plan("--model", model, "--engine", str(_engine("ik")), "--gpu", "rtx-4070-super",
                  "--save", str(saved))  # fmt: skip
    assert ik.returncode == 0, ik.stderr
    assert json.loads(saved.read_text())["engine"]["flavour"] == "ik"
    assert "  engine           ik (" in ik.stdout
    command = ik.stdout.split("Command line:")[1]
    for upstream_only in ("--fit-target", "--spec-draft-n-max", "-mtp "):
        assert upstream_only not in command
    assert "--fit-margin" in command
