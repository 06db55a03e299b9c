"""namcap-style rules for a PKGBUILD, read by sourcing it in bash (no makepkg needed)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REQUIRED_SCALARS = ("pkgname", "pkgver", "pkgrel", "pkgdesc", "url")
REQUIRED_ARRAYS = ("arch", "license", "depends", "makedepends", "source")
OPTIONAL_ARRAYS = ("optdepends", "checkdepends", "provides", "conflicts", "replaces", "backup")
CHECKSUM_ARRAYS = {"sha256sums": 64, "sha512sums": 128, "b2sums": 128}
KNOWN_ARCHES = {"any", "x86_64", "x86_64_v3", "x86_64_v4", "aarch64", "i686", "armv7h", "pentium4"}
ALL_VARIABLES = (*REQUIRED_SCALARS, *REQUIRED_ARRAYS, *OPTIONAL_ARRAYS, *CHECKSUM_ARRAYS)

PKGNAME = re.compile(r"[a-z0-9@_+][a-z0-9@._+-]*\Z")
PKGVER = re.compile(r"[A-Za-z0-9._+]+\Z")  # no '-', ':', '/' or spaces
PKGREL = re.compile(r"[1-9][0-9]*(\.[1-9][0-9]*)?\Z")
DEPENDENCY = re.compile(r"[a-z0-9@._+-]+([<>=]=?[A-Za-z0-9._:+-]+)?\Z")
OPTDEPEND = re.compile(r"[a-z0-9@._+-]+: \S.*\Z")
PKGDESC_MAX = 80
WRITE_COMMANDS_LAST_ARG = {"cp", "mv", "ln", "rsync"}
WRITE_COMMANDS_ALL_ARGS = {"mkdir", "touch", "tee"}
PKGDIR_PREFIXES = ("$pkgdir", "${pkgdir}")

_DUMP = r"""
set -e
source "$1" >/dev/null
shift
for name in "$@"; do
  if ! declare -p "$name" >/dev/null 2>&1; then printf '%s\tunset\n' "$name"; continue; fi
  case $(declare -p "$name") in
    "declare -a"*) kind=array ;;
    "declare -A"*) kind=assoc ;;
    *) kind=scalar ;;
  esac
  declare -n ref=$name
  printf '%s\t%s' "$name" "$kind"
  if [ "$kind" = array ]; then for v in "${ref[@]}"; do printf '\t%s' "$v"; done
  else printf '\t%s' "$ref"; fi
  printf '\n'
  unset -n ref
done
for f in build package; do
  if declare -F "$f" >/dev/null; then printf '%s()\n' "$f"; declare -f "$f"; printf '%s\n' '}}}'; fi
done
"""


@dataclass
class PkgbuildFacts:
    """What bash reads from a PKGBUILD: variables (kind, values) and the function bodies."""

    kinds: dict[str, str] = field(default_factory=dict)
    values: dict[str, list[str]] = field(default_factory=dict)
    functions: dict[str, str] = field(default_factory=dict)

    def scalar(self, name: str) -> str:
        return self.values.get(name, [""])[0] if self.kinds.get(name) == "scalar" else ""


def read_pkgbuild(path: Path) -> PkgbuildFacts:
    """Source ``path`` in bash (after ``bash -n``) and collect its variables and functions."""
    subprocess.run(["bash", "-n", str(path)], check=True, capture_output=True, text=True)
    result = subprocess.run(
        ["bash", "-c", _DUMP, "dump", str(path), *ALL_VARIABLES],
        check=True,
        capture_output=True,
        text=True,
        cwd=path.parent,
    )
    facts = PkgbuildFacts()
    lines = result.stdout.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.endswith("()") and "\t" not in line:
            name, body = line[:-2], []
            index += 1
            while index < len(lines) and lines[index] != "}}}":
                body.append(lines[index])
                index += 1
            facts.functions[name] = "\n".join(body)
        elif "\t" in line:
            name, kind, *values = line.split("\t")
            facts.kinds[name] = kind
            if kind != "unset":
                facts.values[name] = values
        index += 1
    return facts


def _variable_problems(facts: PkgbuildFacts) -> list[str]:
    problems = []
    for name in REQUIRED_SCALARS:
        if facts.kinds.get(name) != "scalar" or not facts.scalar(name):
            problems.append(f"{name} must be set to a non-empty string")
    for name in REQUIRED_ARRAYS:
        if facts.kinds.get(name) != "array":
            problems.append(f"{name} must be an array: {name}=(...)")
    for name in OPTIONAL_ARRAYS:
        if facts.kinds.get(name, "unset") not in ("unset", "array"):
            problems.append(f"{name} must be an array: {name}=(...)")
    if facts.scalar("pkgname") and not PKGNAME.match(facts.scalar("pkgname")):
        problems.append(f"pkgname {facts.scalar('pkgname')!r} has characters pacman refuses")
    if facts.scalar("pkgver") and not PKGVER.match(facts.scalar("pkgver")):
        problems.append(f"pkgver {facts.scalar('pkgver')!r} may not hold '-', ':', '/' or spaces")
    if facts.scalar("pkgrel") and not PKGREL.match(facts.scalar("pkgrel")):
        problems.append(f"pkgrel {facts.scalar('pkgrel')!r} must be a positive number")
    desc = facts.scalar("pkgdesc")
    if len(desc) > PKGDESC_MAX:
        problems.append(f"pkgdesc is longer than {PKGDESC_MAX} characters")
    if desc.lower().startswith(facts.scalar("pkgname").lower() or "\0"):
        problems.append("pkgdesc should not start with the package name")
    for arch in facts.values.get("arch", []):
        if arch not in KNOWN_ARCHES:
            problems.append(f"unknown arch {arch!r}")
    if "any" in facts.values.get("arch", []) and len(facts.values["arch"]) > 1:
        problems.append("arch=('any') cannot be combined with other architectures")
    for name in ("depends", "makedepends", "checkdepends"):
        for dep in facts.values.get(name, []):
            if not DEPENDENCY.match(dep):
                problems.append(f"{name} entry {dep!r} is not a package name")
    for opt in facts.values.get("optdepends", []):
        if not OPTDEPEND.match(opt):
            problems.append(f"optdepends entry {opt!r} must read 'package: reason'")
    return problems


def _checksum_problems(facts: PkgbuildFacts) -> list[str]:
    sources = facts.values.get("source", [])
    present = [name for name in CHECKSUM_ARRAYS if facts.kinds.get(name, "unset") != "unset"]
    if not present:
        return ["no checksums: add sha256sums (or b2sums), SKIP for local sources"]
    problems = []
    for name in present:
        sums = facts.values.get(name, [])
        if facts.kinds[name] != "array":
            problems.append(f"{name} must be an array")
        if len(sums) != len(sources):
            problems.append(f"{name} has {len(sums)} entries for {len(sources)} sources")
        for source, checksum in zip(sources, sums, strict=False):
            location = source.split("::", 1)[-1]
            remote = "://" in location
            vcs = location.split("+", 1)[0] in {"git", "hg", "svn", "bzr", "fossil"}
            if checksum == "SKIP":
                if remote and not vcs:
                    problems.append(f"{name}: a downloaded source ({source}) needs a real checksum")
            elif not re.fullmatch(f"[0-9a-f]{{{CHECKSUM_ARRAYS[name]}}}", checksum):
                problems.append(f"{name}: {checksum!r} is neither SKIP nor a {name[:-4]} digest")
    return problems


def _destinations(words: list[str]) -> list[str]:
    """The paths a simple command writes, for the commands this lint knows."""
    command, args = words[0], words[1:]
    operands = [word for word in args if not word.startswith("-")]
    redirected = [
        words[i + 1] for i, word in enumerate(words[:-1]) if word in (">", ">>", "&>", "2>")
    ]
    redirected += [w.lstrip(">&2") for w in words if re.match(r"(&|2)?>>?\S", w)]
    if command == "install":
        if any(re.match(r"-[A-Za-z]*d", word) for word in args):
            return operands + redirected
        return operands[-1:] + redirected
    if command in WRITE_COMMANDS_LAST_ARG:
        return operands[-1:] + redirected
    if command in WRITE_COMMANDS_ALL_ARGS:
        return operands + redirected
    return redirected


def package_write_problems(body: str) -> list[str]:
    """Lines of package() that write outside $pkgdir, or use root or the network."""
    problems = []
    for raw in body.splitlines():
        line = raw.strip().rstrip(";").strip()
        if not line or line in ("{", "}") or line.startswith(("for ", "do", "done", "local ")):
            continue
        try:
            words = shlex.split(line, posix=True)
        except ValueError:
            problems.append(f"package(): cannot parse {line!r}")
            continue
        if not words:
            continue
        if words[0] in ("sudo", "su", "pkexec", "curl", "wget", "pip", "pip3"):
            problems.append(f"package(): {words[0]} has no place in package(): {line!r}")
            continue
        if words[0].startswith("python") and "installer" in words:
            if not any(w.startswith(("--destdir=$pkgdir", "--destdir=${pkgdir}")) for w in words):
                problems.append(
                    f"package(): python -m installer without --destdir=$pkgdir: {line!r}"
                )
            continue
        for target in _destinations(words):
            if not target.startswith(PKGDIR_PREFIXES):
                problems.append(f"package(): writes outside $pkgdir ({target}): {line!r}")
    return problems


def lint(path: Path) -> list[str]:
    """Every rule's complaints about the PKGBUILD at ``path`` (empty: it passes)."""
    facts = read_pkgbuild(path)
    problems = _variable_problems(facts) + _checksum_problems(facts)
    for function in ("build", "package"):
        if function not in facts.functions:
            problems.append(f"{function}() is missing")
    if "build" in facts.functions and "pkgdir" in facts.functions["build"]:
        problems.append("build() must not touch $pkgdir (that is package()'s job)")
    problems += package_write_problems(facts.functions.get("package", ""))
    return problems
