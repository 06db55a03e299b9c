"""Files are checked before they are read (issue 25 items 2 and 5): a model given as a plan, a
huge or odd plan path, a JSON given as a model, and GGUFs that are header only or unfinished:
said so by ``plan``, refused by ``launch``, ``apply unit``, ``export-unit`` and ``render``."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import run_cli

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.catalog.models import model_card_path
from mtpstudio.core.errors import GgufError, ServerError
from mtpstudio.core.model.file_state import FileState, file_state, require_whole_model
from mtpstudio.core.model.gguf import read_model_info
from mtpstudio.core.server.preflight import check_model

CARD = "qwen3.6-35b-a3b-iq4_xs"
GIB = 1024**3
ADDRESS_SPACE = 2 * GIB  # far less than the model: reading it whole fails


@pytest.fixture
def whole(tmp_path: Path) -> Path:
    """The full-size zero-weight 35B (sparse, 17.9 GiB apparent)."""
    return zero_gguf_for_card(CARD, tmp_path / "models" / "Qwen3.6-35B-A3B-IQ4_XS.gguf")


@pytest.fixture
def unfinished(tmp_path: Path) -> Path:
    """The same file as a download that stopped at 9 GiB."""
    path = zero_gguf_for_card(CARD, tmp_path / "downloads" / "Qwen3.6-35B-A3B-IQ4_XS.gguf")
    os.truncate(path, 9 * GIB)
    return path


@pytest.fixture
def header_only(tmp_path: Path) -> Path:
    """A header-only planning file, as the catalogue writes them."""
    path = tmp_path / "planning" / "Qwen3.6-35B-A3B-IQ4_XS.gguf"
    path.parent.mkdir()
    path.write_bytes(model_card_path(CARD).read_bytes())
    return path


def _limited(*args: str) -> subprocess.CompletedProcess[str]:
    """``mtpstudio ARGS`` with at most ADDRESS_SPACE of address space."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run(
        [sys.executable, "-m", "mtpstudio", *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


def _one_sentence(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr  # one line, no traceback
    assert lines[0].startswith("mtpstudio: ")
    return lines[0]


# -- a path given as a plan ----------------------------------------------------------------------


def test_a_model_given_as_the_plan_is_named_not_read(whole: Path) -> None:
    result = _limited("plan", "--plan", str(whole))
    assert result.returncode == 2, result.stderr
    line = _one_sentence(result.stderr)
    assert f"{whole} is a GGUF model (17.9 GiB), not a plan file" in line  # not "too large"
    assert f"--model {whole}" in line


def test_a_huge_file_given_as_the_plan_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "notes.txt"
    with open(big, "wb") as f:
        f.truncate(3 * GIB)  # sparse: as big as it looks, nothing on disk
    result = _limited("plan", "--plan", str(big))
    assert result.returncode == 2
    assert "is larger than 1024 KiB" in _one_sentence(result.stderr)


def test_a_folder_or_a_fifo_given_as_the_plan(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo):
        result = run_cli("plan", "--plan", str(path))  # a FIFO opened for reading would block
        assert result.returncode == 2
        assert "is not a regular file" in _one_sentence(result.stderr)


def test_a_plan_given_as_the_model_says_so(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    assert run_cli("plan", "--demo", "--save", str(plan)).returncode == 0
    result = run_cli("plan", "--model", str(plan))
    assert result.returncode == 2
    assert "It is JSON, perhaps a plan file: give plan files with --plan" in _one_sentence(
        result.stderr
    )


# -- whole, header only, unfinished --------------------------------------------------------------


def test_file_state_of_whole_header_only_and_unfinished(
    whole: Path, header_only: Path, unfinished: Path
) -> None:
    assert file_state(read_model_info(whole)) is FileState.WHOLE
    assert file_state(read_model_info(header_only)) is FileState.HEADER_ONLY
    info = read_model_info(unfinished)
    assert file_state(info) is FileState.INCOMPLETE
    assert info.full_file_size == whole.stat().st_size
    with pytest.raises(GgufError, match=r"is incomplete \(9\.00 of 17\.86 GiB\)"):
        require_whole_model(info, unfinished)


def test_plan_says_an_unfinished_download_is_incomplete(unfinished: Path) -> None:
    result = run_cli("plan", "--model", str(unfinished), "--gpu", "rtx-4070-super", "--check")
    assert result.returncode == 3, result.stderr  # it fits, but it will not load
    assert "  file          incomplete: 9.00 of 17.86 GiB" in result.stdout
    assert f"Not loadable: The model file {unfinished} is incomplete" in result.stdout
    data = json.loads(run_cli("plan", "--model", str(unfinished), "--json").stdout)
    assert data["model"]["file"]["state"] == "incomplete"
    assert data["model"]["file"]["bytes"] == 9 * GIB
    assert data["unloadable_files"]


def test_plan_says_a_header_only_file_is_for_planning(header_only: Path) -> None:
    result = run_cli("plan", "--model", str(header_only), "--gpu", "rtx-4070-super")
    assert result.returncode == 0, result.stderr
    assert "header only: the GGUF header without its 17.86 GiB of tensor data, a file made " in (
        result.stdout
    )


def test_plan_says_nothing_about_a_whole_file(whole: Path) -> None:
    result = run_cli("plan", "--model", str(whole), "--gpu", "rtx-4070-super", "--check")
    assert result.returncode == 0, result.stderr
    assert "  file  " not in result.stdout and "Not loadable" not in result.stdout


def test_launch_refuses_an_unfinished_or_header_only_model(
    unfinished: Path, header_only: Path
) -> None:
    for path, words in ((unfinished, "is incomplete"), (header_only, "made for planning")):
        with pytest.raises(ServerError, match=words) as refused:
            check_model(path)  # what launch checks before it starts anything
        assert "the engine cannot load it" in str(refused.value)


def test_launch_cli_refuses_an_unfinished_model_in_one_sentence(
    unfinished: Path, tmp_path: Path
) -> None:
    from support.servers import engine_binary

    plan = tmp_path / "plan.json"
    made = run_cli("plan", "--model", str(unfinished), "--gpu", "cpu",
                   "--engine", str(engine_binary("upstream")), "--save", str(plan))  # fmt: skip
    assert made.returncode == 0, made.stderr
    result = run_cli("launch", "--plan", str(plan))
    assert result.returncode != 0
    line = _one_sentence(result.stderr)
    assert f"the model file {unfinished} is incomplete (9.00 of 17.86 GiB)" in line
    assert "Finish the download" in line


@pytest.mark.parametrize(
    "command",
    [
        ("apply", "unit", "--user", "--dry-run"),
        ("export-unit", "-o", "{out}/unit.service"),
        ("render", "--out", "{out}/files"),
    ],
    ids=["apply-unit", "export-unit", "render"],
)
def test_units_are_refused_for_files_the_engine_cannot_load(
    command: tuple[str, ...], unfinished: Path, header_only: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for path, words in ((unfinished, "is incomplete"), (header_only, "made for planning")):
        plan = tmp_path / f"{path.parent.name}.json"
        assert run_cli("plan", "--model", str(path), "--save", str(plan)).returncode == 0
        args = [a.format(out=out) for a in command] + ["--plan", str(plan)]
        result = run_cli(*args)
        assert result.returncode == 2, result.stdout
        assert words in _one_sentence(result.stderr)
    assert list(out.iterdir()) == []  # nothing written
