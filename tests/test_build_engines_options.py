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
    stamp: dict[str, object] = {
        "package": UPSTREAM.package,
        "version": UPSTREAM.version,
        "engine_defines": list(UPSTREAM.defines),
    }
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


def test_one_build_serves_upstream_and_its_rpc_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """upstream is built with its RPC backend, so upstream-rpc names the same build: asked for
    both, the script builds (here: reuses) one."""
    assert build_engines.ENGINES["upstream-rpc"] is UPSTREAM
    assert "GGML_RPC=ON" in UPSTREAM.defines and "ggml-rpc-server" in UPSTREAM.targets
    monkeypatch.setenv("MTPSTUDIO_ENGINE_CACHE", str(tmp_path))
    _cached(tmp_path)
    assert build_engines.main(["upstream", "upstream-rpc"]) == 0
    assert capsys.readouterr().out.count("reusing cached build") == 1


def test_a_build_made_with_other_engine_definitions_is_not_reused(tmp_path: Path) -> None:
    """A cached build whose stamp names other definitions of the engine's own (an older
    script's, without RPC) is built again, not reused as it is."""
    home = _cached(tmp_path)
    stamp = home / build_engines.STAMP
    data = json.loads(stamp.read_text())
    assert build_engines.cached_defines(stamp, "engine_defines") == list(UPSTREAM.defines)
    data.pop("engine_defines")
    stamp.write_text(json.dumps(data))
    assert build_engines.cached_defines(stamp, "engine_defines") != list(UPSTREAM.defines)


IK = build_engines.ENGINES["ik"]


def test_a_missing_source_archive_says_where_to_put_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MTPSTUDIO_ENGINE_SOURCES", str(tmp_path))
    with pytest.raises(build_engines.SourceArchiveError) as caught:
        build_engines.local_archive(IK)
    said = str(caught.value)
    assert f"{IK.archive} is not in {tmp_path}" in said and "MTPSTUDIO_ENGINE_SOURCES" in said


def test_a_source_archive_that_is_not_the_pinned_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert IK.archive is not None
    (tmp_path / IK.archive).write_bytes(b"not the ik tree\n")
    monkeypatch.setenv("MTPSTUDIO_ENGINE_SOURCES", str(tmp_path))
    monkeypatch.setenv("MTPSTUDIO_ENGINE_CACHE", str(tmp_path / "cache"))
    assert build_engines.main(["ik"]) == 1
    out = capsys.readouterr().out
    assert f"not the pinned {IK.sha256}" in out
    assert not (tmp_path / "cache" / "_tools").exists()  # refused before anything is set up
    assert not (tmp_path / "cache" / IK.key / "bin").exists()


def test_the_pinned_ik_archive_beside_the_checkout_is_the_pinned_one() -> None:
    """The shared folder CI and developers have holds the archive the pin names."""
    assert build_engines.local_archive(IK).name == IK.archive
