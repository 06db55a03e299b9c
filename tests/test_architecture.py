"""The house's rooms, checked from the source: who may import whom, no circles, a true README."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import mtpstudio

PACKAGE_DIR = Path(mtpstudio.__file__).parent
REPO = PACKAGE_DIR.parent

# What the UI may import from the core. The memory model (core.memory.*) and the engine
# adapters (core.engines.*) are reached only through core.planning, which re-exports the plain
# data types it returns (Budget, LaunchSpec, EngineBuild, FitSuggestion …).
UI_MAY_IMPORT = frozenset(
    {
        "mtpstudio.core.plan",
        "mtpstudio.core.errors",
        "mtpstudio.core.atomic",
        "mtpstudio.core.paths",
        "mtpstudio.core.units",
        "mtpstudio.core.cancel",  # the task manager's cancel flag
        "mtpstudio.core.planning",
        "mtpstudio.core.reports",
        "mtpstudio.core.engines.capabilities",  # badges and reasons, phrased for people
        "mtpstudio.core.detect.models",
        "mtpstudio.core.detect.report",
        "mtpstudio.core.detect.processes",
        # the Desktop VRAM and Service pages: the same core calls as `mtpstudio apply/render`
        "mtpstudio.core.desktop.install",
        "mtpstudio.core.desktop.reclaim",
        "mtpstudio.core.service.render",
        "mtpstudio.core.runner",
        "mtpstudio.core.server.systemd",
        "mtpstudio.core.service.service_files",
        "mtpstudio.core.desktop.session_apply",
        "mtpstudio.core.desktop.session_check",
    }
)
UI_MAY_IMPORT_PREFIXES = (
    "mtpstudio.core.model.",  # gguf facts, model source, catalogue
    "mtpstudio.core.server.",  # the GUI wraps the same launch spec in a QProcess (design §3)
    "mtpstudio.core.bench.",  # the Launch page runs the benchmark and reads its history
    "mtpstudio.core.hub.",  # the Model page's Hugging Face dialog: table and download
)

# The helper runs as root through pkexec: the standard library and these two modules only.
HELPER_MAY_IMPORT = frozenset({"mtpstudio.core.atomic", "mtpstudio.core.quoting"})


# -- the import scanner ------------------------------------------------------------------------


def module_name(path: Path, root: Path, package: str) -> str:
    """``root/a/b.py`` -> ``package.a.b``; ``root/a/__init__.py`` -> ``package.a``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def source_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root`` (which is the package's own folder)."""
    return {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}


def imported_names(source: str, module: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """Absolute names of what ``module`` imports anywhere in its source (late imports too).

    ``from a.b import c`` counts as ``a.b`` when that is a known module and ``a.b.c`` is not,
    else as ``a.b.c``; relative imports are resolved against ``module``.
    """
    known_set = set(known)
    base_parts = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base_parts[: len(base_parts) - (node.level - 1)]
                target = ".".join([*parent, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if candidate in known_set or target not in known_set:
                    found.add(candidate)
                else:
                    found.add(target)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (package parents left out)."""
    modules = source_modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        names = imported_names(
            path.read_text(encoding="utf-8"), name, path.name == "__init__.py", modules
        )
        graph[name] = {n for n in names if n in modules and n != name}
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:  # type: ignore[attr-defined]
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def ui_violations(graph: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """UI modules -> the core modules they import that the UI may not."""
    bad: dict[str, list[str]] = {}
    for module, targets in graph.items():
        if not module.startswith("mtpstudio.ui"):
            continue
        hits = sorted(
            t
            for t in targets
            if t.startswith("mtpstudio.core.")
            and t not in UI_MAY_IMPORT
            and not t.startswith(UI_MAY_IMPORT_PREFIXES)
        )
        if hits:
            bad[module] = hits
    return bad


def helper_violations(source: str, module: str, known: Iterable[str]) -> list[str]:
    """What a helper module imports beyond the stdlib, the helper and its two core modules."""
    names = imported_names(source, module, False, known)
    return sorted(
        n
        for n in names
        if n.split(".")[0] not in sys.stdlib_module_names
        and n not in HELPER_MAY_IMPORT
        and not (n == "mtpstudio.helper" or n.startswith("mtpstudio.helper."))
    )


# -- the rules -----------------------------------------------------------------------------------


def test_the_ui_reaches_the_memory_model_and_the_adapters_only_through_planning() -> None:
    graph = import_graph(PACKAGE_DIR, "mtpstudio")
    ui_modules = [m for m in graph if m.startswith("mtpstudio.ui.")]
    assert len(ui_modules) > 10, ui_modules  # the walk really found the UI
    assert any("mtpstudio.core.planning" in graph[m] for m in ui_modules)
    assert ui_violations(graph) == {}


def test_the_ui_checker_catches_a_direct_import_of_the_memory_model() -> None:
    graph = {
        "mtpstudio.ui.pages.x": {
            "mtpstudio.core.memory.budget",
            "mtpstudio.core.planning",
            "mtpstudio.core.model.info",
        },
        "mtpstudio.ui.y": {
            "mtpstudio.core.engines.registry",
            "mtpstudio.core.engines.capabilities",
        },
        "mtpstudio.cli.plan": {"mtpstudio.core.memory.budget"},  # the CLI is not the UI
    }
    assert ui_violations(graph) == {
        "mtpstudio.ui.pages.x": ["mtpstudio.core.memory.budget"],
        "mtpstudio.ui.y": ["mtpstudio.core.engines.registry"],
    }


def test_the_helper_imports_only_the_stdlib_atomic_and_quoting() -> None:
    helper_dir = PACKAGE_DIR / "helper"
    modules = source_modules(PACKAGE_DIR, "mtpstudio")
    files = sorted(helper_dir.rglob("*.py"))
    assert helper_dir / "__init__.py" in files  # the rule really looks at the helper
    offenders = {
        str(p.relative_to(REPO)): hits
        for p in files
        if (
            hits := helper_violations(
                p.read_text(encoding="utf-8"), module_name(p, PACKAGE_DIR, "mtpstudio"), modules
            )
        )
    }
    assert offenders == {}


def test_what_the_helper_may_import_needs_only_the_stdlib_itself() -> None:
    # atomic and quoting run as root inside the helper: everything they pull in, transitively,
    # must be the standard library or these core modules.
    graph = import_graph(PACKAGE_DIR, "mtpstudio")
    modules = source_modules(PACKAGE_DIR, "mtpstudio")
    seen: set[str] = set()
    todo = list(HELPER_MAY_IMPORT)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    assert seen <= {*HELPER_MAY_IMPORT, "mtpstudio.core.errors"}, seen
    for name in seen:
        source = modules[name].read_text(encoding="utf-8")
        outside = {
            n
            for n in imported_names(source, name, False, modules)
            if n.split(".")[0] not in sys.stdlib_module_names
        }
        assert outside <= seen, (name, outside - seen)


def test_the_helper_checker_catches_forbidden_imports() -> None:
    known = {"mtpstudio.core.atomic", "mtpstudio.core.quoting", "mtpstudio.core.plan"}
    module = "mtpstudio.helper.main"

    def check(source: str) -> list[str]:
        return helper_violations(source, module, known)

    assert check("import os, json\nfrom pathlib import Path\n") == []
    assert check("from mtpstudio.core.atomic import write_text_atomic") == []
    assert check("from mtpstudio.core import quoting") == []
    assert check("from . import actions\nfrom .actions import run") == []
    assert check("import requests") == ["requests"]
    assert check("from mtpstudio.core.plan import Plan") == ["mtpstudio.core.plan"]
    assert check("from mtpstudio.core import plan") == ["mtpstudio.core.plan"]
    assert check("from .. import ui") == ["mtpstudio.ui"]
    assert check("def f():\n    import pydantic\n") == ["pydantic"]


def test_no_import_cycles_among_mtpstudio_modules() -> None:
    graph = import_graph(PACKAGE_DIR, "mtpstudio")
    assert len(graph) > 50, len(graph)  # the walk really found the package
    assert cycles(graph) == []


def test_the_cycle_finder_catches_a_synthetic_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("import pkg.sub.c\n")
    (pkg / "sub" / "c.py").write_text("def late():\n    from ..a import thing\n")
    (pkg / "d.py").write_text("from pkg.a import thing\n")  # into the cycle, not part of it
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.sub.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    (pkg / "sub" / "c.py").write_text("X = 1\n")  # break it
    assert cycles(import_graph(pkg, "pkg")) == []


# -- the README ----------------------------------------------------------------------------------


def layout_paths(readme: str) -> list[str]:
    """Every path named in a table row of the README's Layout section (backticked, with a /)."""
    match = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if match is None:
        return []
    rows = [line for line in match.group(1).splitlines() if line.startswith("|")]
    tokens = [t for row in rows for t in re.findall(r"`([^`]+)`", row)]
    return [t for t in tokens if "/" in t or t.endswith(".py")]


def missing_layout_paths(readme: str, root: Path) -> list[str]:
    return [p for p in layout_paths(readme) if not (root / p).exists()]


def test_every_path_the_readme_layout_names_exists() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    paths = layout_paths(readme)
    assert len(paths) > 10, paths  # the section was found and names the tree
    assert missing_layout_paths(readme, REPO) == []


def test_the_layout_checker_reports_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "mod.py").write_text("")
    readme = (
        "# x\n\n## Layout\n\n| path | what |\n|---|---|\n"
        "| `real/` | `real/mod.py`, `real/gone.py` |\n| `packaging/` | gone |\n\n"
        "## Next\n\n| `other/` | not in the Layout section |\n"
    )
    assert layout_paths(readme) == ["real/", "real/mod.py", "real/gone.py", "packaging/"]
    assert missing_layout_paths(readme, tmp_path) == ["real/gone.py", "packaging/"]
