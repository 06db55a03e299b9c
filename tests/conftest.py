"""Shared fixtures: an isolated XDG environment for every test session, tiny GGUF models and
real llama-server processes (the test bench lives in tests/support/)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:  # `support` is importable whatever pytest's import mode
    sys.path.insert(0, _TESTS_DIR)

from support.servers import (  # noqa: E402
    ENGINE_NAMES,
    EngineMissingError,
    LlamaServer,
    engine_binary,
    start_server,
)
from support.tiny_models import TinyModelCache  # noqa: E402

# Qt runs offscreen in tests: no display is needed, and none is touched when one exists.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# Tests press Ctrl-C (send SIGINT) to the programs they start, as a terminal would. A test run
# started in the background of a shell without job control (`cmd &` in a script, some CI
# runners) inherits SIGINT ignored, and so would every program it starts: Ctrl-C would do
# nothing. Give this process, and so its children, the terminal's default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Where scripts/build_engines.py puts the builds, computed before any test changes XDG vars.
ENGINE_CACHE = Path(
    os.environ.get("MTPSTUDIO_ENGINE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtpstudio" / "engines"
)
# Where scripts/fetch_test_models.py puts the real models, likewise.
MODEL_CACHE = Path(
    os.environ.get("MTPSTUDIO_MODEL_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "mtpstudio"
    / "test-models"
)


@pytest.fixture(scope="session")
def session_xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private XDG cache/config/data root shared by the session (demo cards cached once)."""
    return tmp_path_factory.mktemp("xdg")


@pytest.fixture(autouse=True)
def _isolated_xdg(session_xdg: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        folder = session_xdg / name.lower()
        folder.mkdir(exist_ok=True)
        monkeypatch.setenv(name, str(folder))
    # Engine builds stay in the real user cache, not the isolated one.
    monkeypatch.setenv("MTPSTUDIO_ENGINE_CACHE", str(ENGINE_CACHE))
    yield


# ------------------------------------------------------------------------------------------
# Test bench: tiny GGUF models and real llama-server processes (tests/support/).


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModelCache:
    """``tiny_model(kind, **params) -> Path``: a generated GGUF, made once per session.

    Kinds and parameters: ``support.tiny_models.make_model`` / ``TinyModelParams``.
    """
    return TinyModelCache(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def engine() -> Callable[[str], Path]:
    """``engine("upstream" | "ik") -> Path`` of the cached llama-server build.

    A missing build fails the test: scripts/test builds both before pytest runs.
    """

    def find(name: str, program: str = "llama-server") -> Path:
        try:
            return engine_binary(name, program)
        except EngineMissingError as exc:
            missing = str(exc)
        pytest.fail(missing, pytrace=False)

    return find


@pytest.fixture
def running_server(
    request: pytest.FixtureRequest,
    engine: Callable[[str], Path],
    tmp_path: Path,
) -> Iterator[Callable[..., LlamaServer]]:
    """``running_server(engine, model, args=(), **kw) -> LlamaServer``, healthy and reaped.

    ``engine`` is a build's name ("upstream", "upstream-b11549", "ik") or a binary path;
    ``kw`` goes to ``support.servers.start_server`` (threads=2, ctx_size=512, parallel=1 by default;
    health_timeout, env, port, ...). Every server is stopped after the test, pass or fail; a
    failing test's report carries the tail of each server log.
    """
    servers: list[LlamaServer] = []
    request.node._llama_servers = servers

    def start(
        which: str | Path, model: Path | None, args: Sequence[str] = (), **kwargs: object
    ) -> LlamaServer:
        if isinstance(which, str) and which in ENGINE_NAMES:
            binary, label = engine(which), which
        else:
            binary, label = Path(which), None
        kwargs.setdefault("log_dir", tmp_path / "server-logs")
        server = start_server(binary, model, args, engine=label, **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for server in getattr(item, "_llama_servers", []):
            report.sections.append(
                (f"llama-server log tail ({server.engine}, {server.log_path})", server.log_tail(80))
            )


@pytest.fixture(scope="session")
def gemma() -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF (241 MiB) that scripts/test fetches into the model
    cache (scripts/fetch_test_models.py). A missing file fails the test: scripts/test fetches
    it before pytest runs."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from fetch_test_models import GEMMA, is_ready, model_path

    path = model_path(GEMMA, MODEL_CACHE)
    if not is_ready(GEMMA, path):
        pytest.fail(
            f"Gemma 3 270M is not at {path}. Fetch it with "
            "`.venv/bin/python scripts/fetch_test_models.py` (set MTPSTUDIO_MODEL_CACHE to use "
            "another cache folder).",
            pytrace=False,
        )
    return path
