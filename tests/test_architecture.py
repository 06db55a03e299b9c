"""The house's rooms, checked from the source: who may import whom, no circles, a true README."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import mtpstudio
from mtpstudio.core.plan.choices import EngineFlavour

PACKAGE_DIR = Path(mtpstudio.__file__).parent
REPO = PACKAGE_DIR.parent

# The helper runs as root through pkexec: the standard library, core.atomic and the quoting
# of each syntax only.
HELPER_MAY_IMPORT = frozenset(
    {
        "mtpstudio.core.atomic",
        "mtpstudio.core.quoting",
        "mtpstudio.core.quoting.checks",
        "mtpstudio.core.quoting.systemd",
        "mtpstudio.core.quoting.env_file",
        "mtpstudio.core.quoting.shell",
        "mtpstudio.core.quoting.desktop_entry",
    }
)
HELPER_TEMPLATING = "mtpstudio.helper.templating"
HELPER_LIBRARIES = frozenset({"jinja2"})
"""The one library the helper renders its templates with, imported by its templating module
only (its set-up copies jinja2 and markupsafe's Python sources root-owned with the helper)."""


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


def helper_violations(source: str, module: str, known: Iterable[str]) -> list[str]:
    """What a helper module imports beyond the stdlib, the helper and its two core modules."""
    names = imported_names(source, module, False, known)
    return sorted(
        n
        for n in names
        if n.split(".")[0] not in sys.stdlib_module_names
        and n not in HELPER_MAY_IMPORT
        and not (n == "mtpstudio.helper" or n.startswith("mtpstudio.helper."))
        and not (module == HELPER_TEMPLATING and n.split(".")[0] in HELPER_LIBRARIES)
    )


def split_imports(source: str) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The import statements that run when the module loads, and those inside functions
    (late imports); ``if TYPE_CHECKING:`` blocks never run and are left out."""
    top: list[ast.stmt] = []
    late: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, True)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            elif isinstance(child, ast.Import | ast.ImportFrom):
                (late if in_function else top).append(child)
            else:
                visit(child, in_function)

    visit(ast.parse(source), False)
    return top, late


def room(module: str) -> str:
    """The room a module belongs to: ``mtpstudio.core.engines`` for anything below it,
    ``mtpstudio.core.units`` for a module directly in core, ``mtpstudio.ui`` for the UI."""
    parts = module.split(".")
    if parts[1:2] == ["core"] and len(parts) >= 3:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def split_graphs(root: Path, package: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module -> modules imported at load time (parent packages included), and -> late."""
    modules = source_modules(root, package)
    top: dict[str, set[str]] = {}
    late: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        top_nodes, late_nodes = split_imports(path.read_text(encoding="utf-8"))
        for nodes, graph in ((top_nodes, top), (late_nodes, late)):
            text = "\n".join(ast.unparse(n) for n in nodes)
            found = imported_names(text, name, is_package, modules)
            graph[name] = {n for n in found if n in modules and n != name}
    for name in top:
        parts = name.split(".")
        top[name] |= {".".join(parts[:i]) for i in range(1, len(parts))} & set(modules)
    return top, late


def room_graph(top: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import at load time (a module's parent packages,
    which every import of it runs, are not arrows between rooms)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in top.items():
        edges = rooms.setdefault(room(module), set())
        outside = (t for t in targets if room(t) != room(module))
        edges |= {room(t) for t in outside if not module.startswith(t + ".")}
    return rooms


def reachable(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def cycle_dodging_late_imports(root: Path, package: str) -> list[tuple[str, str]]:
    """Late imports that keep two rooms from importing each other at load time: ``M`` imports
    ``X`` inside a function while ``X``'s room already reaches ``M``'s (a two-way arrow)."""
    top, late = split_graphs(root, package)
    rooms = room_graph(top)
    return sorted(
        (module, target)
        for module, targets in late.items()
        for target in targets
        if (room(target) == room(module) and module in reachable(top, target))
        or (room(target) != room(module) and room(module) in reachable(rooms, room(target)))
    )


FLAVOUR_MEMBERS = frozenset(f.name for f in EngineFlavour)
# Where a flavour may be named outside its profile: as a default, never to branch on.
FLAVOUR_NAMED_ALLOWED = {
    ("mtpstudio/core/plan/settings.py", "UPSTREAM"): "the Plan's default engine (its entry)",
    ("mtpstudio/cli/bench.py", "UPSTREAM"): "the default engine behind `bench --url`",
    ("mtpstudio/core/bench/target.py", "UPSTREAM"): "BenchTarget's default flavour",
}


def flavour_branches(source: str) -> list[tuple[int, str]]:
    """Where a module names a flavour (``EngineFlavour.IK``) or compares with its value
    (``== "ik"``, a dict keyed by ``"upstream"``): (line, what)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "EngineFlavour"
            and node.attr in FLAVOUR_MEMBERS
        ):
            found.append((node.lineno, node.attr))
        values = {m.lower() for m in FLAVOUR_MEMBERS}
        operands: list[ast.expr | None] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            operands = list(node.keys)
        for operand in operands:
            if isinstance(operand, ast.Constant) and operand.value in values:
                found.append((node.lineno, repr(operand.value)))
    return sorted(found)


# -- the rules -----------------------------------------------------------------------------------


# The faces (the CLI and the GUI) take from the core its types, enumerations and constants, each
# from the module that defines it, and its verbs from the use cases (core/usecases), defined
# there. Functions still taken from elsewhere (or re-exported by a use-case module) are listed
# in tests/fixtures/architecture/face_functions_elsewhere.txt: the list only shrinks.
FACES = ("mtpstudio.cli", "mtpstudio.ui")
USECASES = "mtpstudio.core.usecases"
FUNCTIONS_ELSEWHERE = REPO / "tests" / "fixtures" / "architecture" / "face_functions_elsewhere.txt"


def _top_level(path: Path) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """A module's own top-level names (name -> ``type``, ``function`` or ``constant``) and
    what it imports by name (name -> (module, name there))."""
    own: dict[str, str] = {}
    imported: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            own[node.name] = "type"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            own[node.name] = "function"
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own.update({t.id: "constant" for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.update({a.asname or a.name: (node.module, a.name) for a in node.names})
    return own, imported


def name_home(module: str, name: str, modules: Mapping[str, Path]) -> tuple[str, str]:
    """(the module that defines ``name`` as ``module`` offers it, what it is there:
    ``type``, ``function``, ``constant``, ``module`` or ``unknown``), following re-exports."""
    for _ in range(20):
        if f"{module}.{name}" in modules:
            return f"{module}.{name}", "module"
        if module not in modules:
            return module, "unknown"
        own, imported = _top_level(modules[module])
        if name in own:
            return module, own[name]
        if name not in imported or not imported[name][0].startswith("mtpstudio"):
            return module, "unknown"
        module, name = imported[name]
    return module, "unknown"


def face_name_violations(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """What each face imports from the core against the rule: ``types`` a type or constant
    not from its home, ``functions`` a function (``home.name``) not defined in the use cases
    it is imported from, ``others`` anything else by name (a module, a value of no kind)."""
    found: dict[str, set[str]] = {"types": set(), "functions": set(), "others": set()}
    for module, path in modules.items():
        if not module.startswith(FACES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if not node.module.startswith("mtpstudio.core"):
                continue
            for alias in node.names:
                home, kind = name_home(node.module, alias.name, modules)
                what = f"{home.removeprefix('mtpstudio.core.')}.{alias.name}"
                if kind in ("type", "constant"):
                    if home != node.module:
                        found["types"].add(f"{module}: {what} through {node.module}")
                elif kind == "function":
                    if not (home == node.module and home.startswith(USECASES)):
                        found["functions"].add(what)
                else:
                    found["others"].add(f"{module}: {what} ({kind})")
    return found


def test_the_faces_take_types_from_home_and_verbs_from_the_use_cases() -> None:
    modules = source_modules(PACKAGE_DIR, "mtpstudio")
    assert sum(m.startswith(FACES) for m in modules) > 30  # the walk really found both faces
    found = face_name_violations(modules)
    assert found["types"] == set(), "import a type or constant from the module defining it"
    listed = set(FUNCTIONS_ELSEWHERE.read_text(encoding="utf-8").split())
    new = sorted(found["functions"] - listed)
    assert new == [], f"a face calls the core's functions through the use cases: {new}"
    mended = sorted(listed - found["functions"])
    assert mended == [], f"strike these from {FUNCTIONS_ELSEWHERE.name}: {mended}"
    assert found["others"] <= {"mtpstudio.ui.server_process: server.procfs.procfs (module)"}


def test_the_face_rule_sees_a_re_exported_type_and_a_function_from_elsewhere(
    tmp_path: Path,
) -> None:
    root = tmp_path / "mtpstudio"
    for folder in ("core/usecases", "core/memory", "cli"):
        (root / folder).mkdir(parents=True)
    for init in ("", "core", "core/usecases", "core/memory", "cli"):
        (root / init / "__init__.py").write_text("")
    (root / "core/memory/budget.py").write_text("class Budget: ...\ndef compute(): ...\n")
    (root / "core/usecases/door.py").write_text(
        "from mtpstudio.core.memory.budget import Budget, compute\ndef plan(): ...\n"
    )
    (root / "cli/plan.py").write_text(
        "from mtpstudio.core.usecases.door import Budget, compute, plan\n"
        "from mtpstudio.core.memory.budget import Budget as Home\n"
    )
    found = face_name_violations(source_modules(root, "mtpstudio"))
    assert found["types"] == {
        "mtpstudio.cli.plan: memory.budget.Budget through mtpstudio.core.usecases.door"
    }
    assert found["functions"] == {"memory.budget.compute"}  # plan is a verb of the door


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
    assert check("import jinja2") == ["jinja2"]  # only the templating module renders
    assert helper_violations("import jinja2", HELPER_TEMPLATING, known) == []
    assert helper_violations("import requests", HELPER_TEMPLATING, known) == ["requests"]
    assert check("from mtpstudio.core.plan import Plan") == ["mtpstudio.core.plan"]
    assert check("from mtpstudio.core import plan") == ["mtpstudio.core.plan"]
    assert check("from .. import ui") == ["mtpstudio.ui"]
    assert check("def f():\n    import pydantic\n") == ["pydantic"]


def kit_imports(source: str, module: str, known: Iterable[str]) -> list[str]:
    """What a module of the package imports from the development kit (``devkit``)."""
    names = imported_names(source, module, False, known)
    return sorted(n for n in names if n.split(".")[0] == "devkit")


def test_the_package_never_imports_the_development_kit() -> None:
    # devkit/ is not in the wheel: an import of it from mtpstudio would fail for every user.
    modules = source_modules(PACKAGE_DIR, "mtpstudio")
    assert len(modules) > 50  # the walk really found the package
    offenders = {
        name: hits
        for name, path in modules.items()
        if (hits := kit_imports(path.read_text(encoding="utf-8"), name, modules))
    }
    assert offenders == {}
    assert not (PACKAGE_DIR / "testing").exists()  # the kit's old place inside the package


def test_the_kit_import_checker_finds_every_form() -> None:
    known = {"mtpstudio.core.plan"}

    def check(source: str) -> list[str]:
        return kit_imports(source, "mtpstudio.cli.plan", known)

    assert check("from mtpstudio.core.plan import Plan\nimport json") == []
    assert check("import devkitchen") == []
    assert check("import devkit") == ["devkit"]
    assert check("from devkit.zero_gguf import zero_gguf_for_card") == [
        "devkit.zero_gguf.zero_gguf_for_card"
    ]
    assert check("from devkit import hub_server") == ["devkit.hub_server"]
    assert check("def f():\n    import devkit.kit_runs as runs\n") == ["devkit.kit_runs"]


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


# -- engines as data, late imports -------------------------------------------------------------


def test_no_flavour_branch_exists_outside_the_engine_profiles() -> None:
    profiles = PACKAGE_DIR / "core" / "engines" / "profiles"
    named: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.is_relative_to(profiles):
            continue
        for line, what in flavour_branches(path.read_text(encoding="utf-8")):
            named.setdefault((str(path.relative_to(REPO)), what.strip("'")), []).append(line)
    assert len(list(profiles.glob("*.py"))) >= 3  # the profiles really live there
    outside = {k: v for k, v in named.items() if k not in FLAVOUR_NAMED_ALLOWED}
    assert outside == {}, "decide by the engine profile (engines/profiles/), not by flavour"
    assert set(named) == set(FLAVOUR_NAMED_ALLOWED)  # each allowance is still needed


def test_the_flavour_checker_finds_branches_on_a_flavour() -> None:
    source = (
        "from mtpstudio.core.plan import EngineFlavour\n"
        "def f(flavour, plan):\n"
        "    if flavour is EngineFlavour.IK:\n"
        "        return 1\n"
        "    if plan.engine.flavour.value == 'upstream':\n"
        "        return 2\n"
        "    table = {'ik': '/v1/completions'}\n"
        "    return flavour.value, 'ik is fine in a message'\n"
    )
    assert flavour_branches(source) == [(3, "IK"), (5, "'upstream'"), (7, "'ik'")]


# Late imports that keep a two-way arrow between rooms from failing at load time. Allowed:
# none. (The server once imported the planner late, and the memory model the engines.)
CYCLE_DODGES_ALLOWED: dict[tuple[str, str], str] = {}


def test_no_late_import_dodges_a_cycle() -> None:
    dodges = cycle_dodging_late_imports(PACKAGE_DIR, "mtpstudio")
    assert {d: CYCLE_DODGES_ALLOWED.get(d, "") for d in dodges} == CYCLE_DODGES_ALLOWED


def test_no_two_rooms_import_each_other() -> None:
    top, _ = split_graphs(PACKAGE_DIR, "mtpstudio")
    rooms = room_graph(top)
    assert len(rooms) > 15, sorted(rooms)  # core's rooms, the UI, the CLI, the helper
    both_ways = sorted(
        (a, b) for a, targets in rooms.items() for b in targets if a in reachable(rooms, b)
    )
    assert both_ways == []


def test_the_late_import_checker_catches_a_dodged_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for sub in ("core", "core/server", "core/planner", "core/bench"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "server" / "launch.py").write_text(
        "import os\ndef predict():\n    from pkg.core.planner.plan import evaluate\n"
    )
    (pkg / "core" / "planner" / "plan.py").write_text("from pkg.core.server import reconcile\n")
    (pkg / "core" / "server" / "reconcile.py").write_text("X = 1\n")
    (pkg / "core" / "bench" / "target.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.core.server.launch import predict\n"
        "def lean():\n    import json\n    from pkg.core.planner import plan\n"
    )
    dodges = cycle_dodging_late_imports(pkg, "pkg")
    # server -> planner late while planner -> server at load time: a dodged two-way arrow;
    # bench -> planner late is only lean (planner never reaches bench), TYPE_CHECKING never runs
    assert dodges == [("pkg.core.server.launch", "pkg.core.planner.plan")]
    top, late = split_graphs(pkg, "pkg")
    assert "pkg.core.server.launch" not in top["pkg.core.bench.target"]
    assert late["pkg.core.bench.target"] == {"pkg.core.planner.plan"}
    assert room_graph(top)["pkg.core.planner"] == {"pkg.core.server"}
    (pkg / "core" / "planner" / "plan.py").write_text("X = 2\n")  # the arrow is one-way now
    assert cycle_dodging_late_imports(pkg, "pkg") == []


# -- the tests -----------------------------------------------------------------------------------

TESTS_DIR = REPO / "tests"


# The test files at the top of tests/ check the project as a whole: its rooms, the README, the
# packaging, the scripts, the test bench, the Qt platform the app starts on and the JSON files
# every room reads back. Every other test sits in the folder of the room it tests
# (tests/memory for core/memory, tests/cli for cli, …).
TOP_LEVEL_TESTS = frozenset(
    {
        "test_architecture.py",
        "test_core_is_qt_free.py",
        "test_readme.py",
        "test_packaging.py",
        "test_scripts_test.py",
        "test_build_engines_extract.py",
        "test_build_engines_options.py",
        "test_waiting.py",
        "test_qt_platform.py",
        "test_state_files.py",
    }
)


def test_only_project_wide_tests_sit_at_the_top_of_tests() -> None:
    assert {path.name for path in TESTS_DIR.glob("test_*.py")} == TOP_LEVEL_TESTS


def imported_test_modules(source: str) -> list[tuple[int, str]]:
    """Every import of a test module (``test_*``), at load time or late, plain or relative:
    (line, what is imported). What tests share lives in tests/support/ or a conftest.py."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if any(part.startswith("test_") for part in (node.module or "").split(".")):
                names = [base]
            else:  # `from . import test_x` names the module in the import list
                sep = "" if base.endswith(".") else "."
                names = [f"{base}{sep}{alias.name}" for alias in node.names]
        else:
            continue
        found += [
            (node.lineno, name)
            for name in names
            if any(part.startswith("test_") for part in name.split("."))
        ]
    return sorted(found)


def test_no_test_module_imports_another() -> None:
    sources = sorted(TESTS_DIR.rglob("*.py"))
    assert len(sources) > 100  # the tests were found
    imports = {
        str(path.relative_to(REPO)): imported_test_modules(path.read_text(encoding="utf-8"))
        for path in sources
    }
    assert {path: found for path, found in imports.items() if found} == {}


def test_the_test_import_checker_finds_every_form() -> None:
    source = (
        "import pytest\n"
        "from support.cli import run_cli\n"
        "from .conftest import go_to\n"
        "from test_cli import run_cli\n"
        "from .test_xcb_gui import xvfb_display\n"
        "import integration.test_budget_accuracy\n"
        "from . import test_wizard, journey\n"
        "def late():\n"
        "    from integration.test_budget_accuracy import HYBRID\n"
    )
    assert imported_test_modules(source) == [
        (4, "test_cli"),
        (5, ".test_xcb_gui"),
        (6, "integration.test_budget_accuracy"),
        (7, ".test_wizard"),
        (9, "integration.test_budget_accuracy"),
    ]


# -- pages paint -------------------------------------------------------------------------------

PAGE_CLASS_LINES = 300
"""A page class paints what the use cases decide: it stays under this many lines."""
PAGES_STILL_LARGE = {
    "BudgetPage": 418,
    "DesktopPage": 520,
    "HardwarePage": 574,
    "HubModelsDialog": 406,
    "LaunchPage": 575,
    "ServicePage": 548,
}
"""Pages whose decisions have not moved out yet, at most their size now (they only shrink)."""


def page_class_lines(folder: Path) -> dict[str, int]:
    """Each class of the modules in ``folder`` -> its length in lines."""
    sizes: dict[str, int] = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes[node.name] = node.end_lineno - node.lineno + 1
    return sizes


def test_a_page_class_stays_under_its_size() -> None:
    sizes = page_class_lines(PACKAGE_DIR / "ui" / "pages")
    assert sizes["EnginePage"] < PAGE_CLASS_LINES  # the Engine page paints (issue 46)
    over = {name: n for name, n in sizes.items() if n >= PAGE_CLASS_LINES}
    assert set(over) == set(PAGES_STILL_LARGE)  # a new large page fails; a mended one is struck
    assert {n: s for n, s in over.items() if s > PAGES_STILL_LARGE[n]} == {}


def test_the_page_size_check_sees_a_long_class(tmp_path: Path) -> None:
    (tmp_path / "page.py").write_text("class Big:\n" + "    x = 1\n" * 400)
    assert page_class_lines(tmp_path) == {"Big": 401}
