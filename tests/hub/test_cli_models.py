"""``mtpstudio models hf`` run as a user runs it: a fresh process, HF_ENDPOINT at the local Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.hub_repo import QWEN_QUANTS
from devkit.hub_server import HubTestServer
from mtpstudio.core.hub.remote_header import FIRST_RANGE, PART_RANGE
from mtpstudio.core.plan.io import load_plan

from .conftest import QUANTS_REPO, SMALL_REPO, TOKEN


def _run(hub_url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub_url,
        "HF_HOME": str(home / "hf"),
        "XDG_DATA_HOME": str(home / "data"),
        "NO_COLOR": "1",
    }
    env.pop("HF_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "mtpstudio.cli.main", "models", "hf", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_table_lists_every_file_with_its_plan(hub: HubTestServer, tmp_path: Path) -> None:
    hub.reset_counters()
    done = _run(hub.endpoint, tmp_path, QUANTS_REPO, "--gpu", "rtx-4070-super", "--ctx", "32k")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "planned for NVIDIA GeForce RTX 4070 SUPER (catalogue), ctx 32,768" in out
    for name, _, _, parts in QWEN_QUANTS:
        shown = name.rsplit("/", 1)[-1] + (f"-00001-of-{parts:05d}" if parts > 1 else "")
        assert f"{shown}.gguf" in out
    assert out.count("★") == 2  # the marked row and the line saying why
    assert "expert layers" in out and "llvmpipe session →" in out
    assert "mmproj-F16.gguf: a vision projector" in out
    assert "Next: add --download" in out
    assert done.stderr == ""
    assert max(hub.bytes_sent.values()) <= FIRST_RANGE


def test_json_has_one_entry_per_model(hub: HubTestServer, tmp_path: Path) -> None:
    done = _run(hub.endpoint, tmp_path, QUANTS_REPO, "--gpu", "rtx-3060-12gb", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    files = data["files"]
    assert len(files) == len(QWEN_QUANTS) + 1
    assert sum(f["best"] for f in files) == 1 and data["best"] in {f["file"] for f in files}
    split = next(f for f in files if len(f["parts"]) == 3)
    assert split["quant"] == "Q8_0" and split["mtp_layer"] is True
    plan = split["plan"]
    assert plan["on_gpu"] and plan["fits"] is False and plan["offload"] > 0
    for f in files:  # the first part's first range, a small one of each later part
        assert f["header_bytes_read"] <= FIRST_RANGE + PART_RANGE * (len(f["parts"]) - 1)


def test_download_then_the_plan_points_at_the_local_file(
    hub: HubTestServer, tmp_path: Path, small_dir: Path
) -> None:
    plan_file = tmp_path / "plan.json"
    done = _run(
        hub.endpoint, tmp_path, SMALL_REPO, "--gpu", "rtx-3060-12gb",
        "--download", "tiny-Q8_0.gguf", "--to", str(tmp_path / "my models"),
        "--save", str(plan_file),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    local = tmp_path / "my models" / "tiny-Q8_0.gguf"
    assert local.read_bytes() == (small_dir / "tiny-Q8_0.gguf").read_bytes()
    assert "Verified 1 file(s) against the Hub's checksum" in done.stdout
    assert f"-m '{local}'" in done.stdout or f"-m {local}" in done.stdout
    plan = load_plan(plan_file)
    assert plan.model.path == local and plan.model.card is None
    assert plan.mtp.enabled is None  # MTP stays on auto
    assert "downloading tiny-Q8_0.gguf" in done.stderr


def test_errors_are_one_sentence_with_the_next_step(hub: HubTestServer, tmp_path: Path) -> None:
    done = _run(hub.endpoint, tmp_path, "tester/private-GGUF")
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert "no token was sent" in line and "hf auth login" in line
    done = _run("http://127.0.0.1:9", tmp_path, QUANTS_REPO)
    [line] = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "cannot reach http://127.0.0.1:9" in line
    done = _run(hub.endpoint, tmp_path, SMALL_REPO, "--download", "Q5_K_M")
    assert done.returncode == 2
    assert "names none of the repository's models" in done.stderr.strip().splitlines()[-1]


def test_the_token_of_hf_auth_login_is_used(hub: HubTestServer, tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text(TOKEN)  # where `hf auth login` saves it
    done = _run(hub.endpoint, tmp_path, "tester/private-GGUF", "--gpu", "rtx-3060-12gb")
    assert done.returncode == 0, done.stderr
    assert "tiny-Q8_0.gguf" in done.stdout


@pytest.mark.parametrize("args", [["--model", "x.gguf"], ["--save", "p.json"]])
def test_options_that_do_not_apply_are_refused(
    hub: HubTestServer, tmp_path: Path, args: list[str]
) -> None:
    done = _run(hub.endpoint, tmp_path, SMALL_REPO, *args)
    assert done.returncode == 2 and done.stderr.startswith("mtpstudio: ")
