"""`mtpstudio bench` parses with options on bench itself and with its history/show subcommands."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtpstudio.cli import bench
from mtpstudio.cli.main import build_parser, main
from mtpstudio.core.bench.ab import PRESETS
from mtpstudio.core.bench.choices import PRESET_NAMES


def test_both_forms_parse() -> None:
    parser = build_parser()
    run = parser.parse_args(["bench", "--url", "http://127.0.0.1:8080", "--engine-flavour", "ik",
                             "--json", "out.json", "--repeat", "3"])  # fmt: skip
    assert run.func is bench.run_bench_command
    assert (run.url, run.engine_flavour, run.json, run.repeat) == (
        "http://127.0.0.1:8080", "ik", Path("out.json"), 3)  # fmt: skip
    assert run.n_predict == 192  # the published setup
    plan = parser.parse_args(["bench", "--plan", "a.json", "--vs", "b.json", "--concurrency", "4",
                              "--gate"])  # fmt: skip
    assert (plan.plan, plan.vs, plan.concurrency, plan.gate) == (
        Path("a.json"), Path("b.json"), 4, True)  # fmt: skip
    history = parser.parse_args(["bench", "history", "--json"])
    assert history.func is bench.run_history_command and history.json is True
    show = parser.parse_args(["bench", "show", "12", "--format", "csv"])
    assert show.func is bench.run_show_command and (show.id, show.format) == (12, "csv")


def test_url_and_plan_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--url", "http://x:1", "--plan", "p.json"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench"], "say what to benchmark"),
        (["bench", "--url", "127.0.0.1:8080"], "is not a server URL"),
        (["bench", "--plan", "missing.json"], "does not exist"),
        (["bench", "--url", "http://127.0.0.1:9", "--repeat", "0"], "at least 1"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], message: str, capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_plan_whose_engine_cannot_run_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    from mtpstudio.core.plan.io import plan_with, save_plan
    from mtpstudio.core.plan.schema import Plan

    binary = tmp_path / "llama-server"
    binary.write_text("not a program")
    save_plan(plan_with(Plan(), {"engine.binary": str(binary)}), tmp_path / "p.json")
    assert main(["bench", "--plan", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"the engine binary {binary} is not an executable file" in err[0]


def test_empty_history(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert main(["bench", "history"]) == 0
    assert "no benchmark runs yet" in capsys.readouterr().out
    assert main(["bench", "show", "3"]) == 2
    assert "no benchmark run 3" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--ctx-floor", "10"], "--ctx-floor must be at least 256"),
        (["--minutes", "0"], "--minutes must be more than 0"),
        (["--kv-types", "q9_9"], "'q9_9' is not a cache type"),
        (["--n-predict", "0"], "--n-predict"),
    ],
)
def test_tune_bad_options_are_one_line(
    extra: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mtpstudio.core.plan.io import plan_with, save_plan
    from mtpstudio.core.plan.schema import Plan

    save_plan(plan_with(Plan(), {"model.path": str(tmp_path / "m.gguf"), "model.card": None}),
              tmp_path / "p.json")  # fmt: skip
    assert main(["tune", "--plan", str(tmp_path / "p.json"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mtpstudio: ") and said in err and "\n" not in err


def test_the_parser_offers_exactly_the_presets_the_benchmark_runs() -> None:
    """The names `bench --preset` offers (light, for the parser) are the presets bench.ab runs."""
    assert set(PRESET_NAMES) == set(PRESETS)
    parser = build_parser("bench")
    for name in PRESETS:
        assert parser.parse_args(["bench", "--plan", "p.json", "--preset", name]).preset == name
