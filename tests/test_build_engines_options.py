"""scripts/build_engines.py --define: extra cmake definitions, kept apart from the default build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.servers import _load_build_script

build_engines = _load_build_script()
UPSTREAM = build_engines.ENGINES["upstream"]


def _cached(root: Path, extra: list[str] | None = None) -> Path:
    """A finished build of upstream in ``root`` (stamp and binaries), made with ``extra``."""
    home = root / UPSTREAM.key
    (home / "bin").mkdir(parents=True)
    for target in UPSTREAM.targets:
        (home / "bin" / target).write_text("#!/bin/sh\n")
    stamp: dict[str, object] = {"package": UPSTREAM.package, "version": UPSTREAM.version}
    if extra is not None:
        stamp["extra_defines"] = extra
    (home / build_engines.STAMP).write_text(json.dumps(stamp))
    return home


def test_definitions_follow_the_defaults_so_they_win(tmp_path: Path) -> None:
    argv = build_engines.configure_argv(
        tmp_path / "src", tmp_path / "build", tmp_path / "ninja", ("GGML_NATIVE=ON",)
    )
    defines = [a for a in argv if a.startswith("-D") and "MAKE_PROGRAM" not in a]
    assert defines[:-1] == [f"-D{d}" for d in build_engines.DEFAULT_DEFINES]
    assert "-DGGML_NATIVE=OFF" in defines[:-1] and defines[-1] == "-DGGML_NATIVE=ON"
    plain = build_engines.configure_argv(tmp_path, tmp_path, tmp_path / "ninja", ())
    assert plain[-1] == "-DLLAMA_BUILD_SERVER=ON"  # the default build is unchanged


@pytest.mark.parametrize("text", ["GGML_NATIVE", "=ON", "two words=1", "-DGGML_NATIVE=ON"])
def test_a_malformed_definition_is_refused_by_the_parser(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_engines.main(["--print-paths", f"--define={text}"])
    assert exit_info.value.code == 2
    assert "is not a cmake definition NAME=VALUE" in capsys.readouterr().err


def test_a_default_build_is_not_reused_for_other_definitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MTPSTUDIO_ENGINE_CACHE", str(tmp_path))
    home = _cached(tmp_path)
    assert build_engines.main(["upstream", "--define", "GGML_NATIVE=ON"]) == 1
    out = capsys.readouterr().out
    assert f"the build in {home} was made with no extra definitions" in out
    assert "set MTPSTUDIO_ENGINE_CACHE to another folder" in out
    assert build_engines.main(["upstream"]) == 0  # the default build itself is reused
    assert "reusing cached build" in capsys.readouterr().out


def test_a_build_with_definitions_is_reused_only_for_the_same_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MTPSTUDIO_ENGINE_CACHE", str(tmp_path))
    _cached(tmp_path, ["GGML_NATIVE=ON"])
    assert build_engines.main(["upstream", "--define", "GGML_NATIVE=ON"]) == 0
    assert "reusing cached build" in capsys.readouterr().out
    assert build_engines.main(["upstream"]) == 1
    assert "was made with GGML_NATIVE=ON" in capsys.readouterr().out
