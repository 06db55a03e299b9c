"""The core package never imports Qt or the UI package (design.md §3, style rule 1)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import mtpstudio.core

CORE_DIR = Path(mtpstudio.core.__file__).parent
FORBIDDEN = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "mtpstudio.ui")


def core_module_names() -> list[str]:
    return [m.name for m in pkgutil.walk_packages([str(CORE_DIR)], prefix="mtpstudio.core.")]


def test_importing_every_core_module_loads_no_qt() -> None:
    names = ["mtpstudio.core", *core_module_names()]
    assert len(names) > 5, names  # the walk really found the modules
    code = (
        "import importlib, json, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    bad = [m for m in loaded if m.startswith(FORBIDDEN)]
    assert bad == []


def forbidden_imports(source: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(FORBIDDEN)]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith(FORBIDDEN)
        ):
            found.append(node.module)
    return found


def test_no_core_source_file_mentions_a_qt_import() -> None:
    offenders = {
        str(p.relative_to(CORE_DIR)): hits
        for p in CORE_DIR.rglob("*.py")
        if (hits := forbidden_imports(p.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_the_checker_catches_a_qt_import() -> None:
    # The scanner above must be able to fail: feed it what it must reject.
    assert forbidden_imports("from PySide6.QtCore import QObject") == ["PySide6.QtCore"]
    assert forbidden_imports("import mtpstudio.ui.app") == ["mtpstudio.ui.app"]
    assert forbidden_imports("def f():\n    import PySide6\n") == ["PySide6"]
    assert forbidden_imports("from . import ui") == []


USECASE_TESTS_DIR = Path(__file__).parent / "usecases"
QT_FIXTURES = frozenset({"qtbot", "qapp", "qtmodeltester", "qtlog"})


def qt_fixtures_asked(source: str) -> list[str]:
    """The pytest-qt fixtures a test file's functions take as arguments."""
    return sorted(
        arg.arg
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in node.args.args + node.args.kwonlyargs
        if arg.arg in QT_FIXTURES
    )


def test_the_use_case_tests_need_no_qt() -> None:
    # tests/usecases holds the decisions the window shows, tested as the CLI would call them
    sources = sorted(USECASE_TESTS_DIR.rglob("*.py"))
    assert any(p.name.startswith("test_") for p in sources)  # the folder was found
    offenders = {
        str(p.relative_to(USECASE_TESTS_DIR)): hits
        for p in sources
        if (
            hits := forbidden_imports(text := p.read_text(encoding="utf-8"))
            + qt_fixtures_asked(text)
        )
    }
    assert offenders == {}


def test_the_qt_fixture_checker_catches_a_qtbot_argument() -> None:
    assert qt_fixtures_asked("def test_x(qtbot, tmp_path):\n    pass\n") == ["qtbot"]
    assert qt_fixtures_asked("def test_x(tmp_path):\n    qtbot = 1\n") == []
