"""The privileged helper runs on the standard library plus core.atomic and core.quoting, and
renders its templates with jinja2 (and markupsafe, jinja2's one dependency) in one module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import mtpstudio.helper

HELPER_DIR = Path(mtpstudio.helper.__file__).parent
QUOTING = ("checks", "systemd", "env_file", "shell", "desktop_entry")  # one module per syntax
ALLOWED_PROJECT = {
    "mtpstudio.core.atomic",
    "mtpstudio.core.quoting",
    *(f"mtpstudio.core.quoting.{syntax}" for syntax in QUOTING),
}
# what those bring along, and the packages on the way (the templates' package, read by name)
ALLOWED_LOADED = ALLOWED_PROJECT | {
    "mtpstudio",
    "mtpstudio.core",
    "mtpstudio.core.errors",
    "mtpstudio.templates",
}
TEMPLATING = "templating.py"
LIBRARIES = {"jinja2", "markupsafe"}  # jinja2 and what it imports


def imported_modules(source: str) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "mtpstudio.core":
                names += [f"mtpstudio.core.{a.name}" for a in node.names]
            else:
                names.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names.append("<relative import>")
    return names


def bad_imports(source: str, *, templating: bool = False) -> list[str]:
    bad = []
    for name in imported_modules(source):
        top = name.split(".")[0]
        if name.startswith("mtpstudio.helper") or name in ALLOWED_PROJECT or name == "__future__":
            continue
        if templating and top == "jinja2":
            continue
        if top in sys.stdlib_module_names and top != "mtpstudio":
            continue
        bad.append(name)
    return bad


def test_helper_sources_import_only_the_allowed_modules() -> None:
    files = sorted(HELPER_DIR.rglob("*.py"))
    assert len(files) >= 8
    offenders = {
        str(p.name): b
        for p in files
        if (b := bad_imports(p.read_text(), templating=p.name == TEMPLATING))
    }
    assert offenders == {}


def test_running_the_helper_loads_nothing_else() -> None:
    code = (
        "import json, sys\nimport mtpstudio.helper.main\n"
        "from mtpstudio.helper.templating import render_template\n"
        "render_template('units/environment.env.j2', unit_name='x.service', env=[('A', 'b')])\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    project = {
        m for m in loaded if m.startswith("mtpstudio") and not m.startswith("mtpstudio.helper")
    }
    assert project <= ALLOWED_LOADED, project - ALLOWED_LOADED
    third_party = {
        m
        for m in loaded
        if m.split(".")[0] not in sys.stdlib_module_names
        and not m.startswith(("mtpstudio", "_"))
        and m not in {"sitecustomize", "usercustomize"}
    }
    assert {m.split(".")[0] for m in third_party} == LIBRARIES, third_party


def test_the_checker_catches_what_it_must() -> None:
    assert bad_imports("from mtpstudio.core.errors import RenderError") == ["mtpstudio.core.errors"]
    assert bad_imports("from mtpstudio.core import plan") == ["mtpstudio.core.plan"]
    assert bad_imports("import jinja2") == ["jinja2"]  # outside the templating module
    assert bad_imports("import jinja2", templating=True) == []
    assert bad_imports("import requests", templating=True) == ["requests"]
    assert bad_imports("from . import x") == ["<relative import>"]
    assert bad_imports("from mtpstudio.core import quoting\nimport os") == []
