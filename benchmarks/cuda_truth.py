"""The GPU kit: check the memory model's CUDA rules against a real CUDA build on a lent GPU.

Usage (docs/cuda-truth.md has the exact commands for a lent machine):
  python3 benchmarks/cuda_truth.py prepare            here: the pinned sdist and the wheels
                                                      into .cuda-kit/ (carried to the GPU)
  python3 benchmarks/cuda_truth.py all --out DIR      there: build what is left, then load
                                                      what is left, within --budget seconds
  python3 benchmarks/cuda_truth.py build | run        the two halves of `all`
  python3 benchmarks/cuda_truth.py convert ARCHIVE    here: tests/fixtures/cuda_truth/<tag>/
                                                      and the predicted-vs-logged table
``--cpu`` builds and runs the same path without CUDA (the dry run; ``--table dry``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# devkit/ (this kit) sits in the checkout, not in the wheel. Appended, so an installed mtpstudio
# comes first (the lent machine: the wheel prepare built, in PYTHONPATH; here: the editable
# install); without one, mtpstudio is found in the checkout as well.
sys.path.append(str(REPO))

from devkit.kit_build import SDIST_NAME, SDIST_SHA256, build, sha256_of  # noqa: E402

KIT = REPO / ".cuda-kit"
WORK = REPO / ".cuda-build"
TRAVEL_LIMIT = 64 * 2**20
# What the kit's Python needs beyond the GPU machine's image (Python 3.12 with numpy, pyyaml,
# requests, tqdm, httpx, psutil and nvidia-ml-py already there): the versions tested here.
WHEELS = (
    "gguf",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
    "platformdirs",
)
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
INSTALL_WHEELS = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
    "--target /tmp/site .cuda-kit/wheels/*.whl && export PYTHONPATH=/tmp/site"
)


def say(message: str) -> None:
    print(f"[cuda-truth {time.strftime('%H:%M:%S')}] {message}", flush=True)


def device_command(budget: int) -> str:
    """The one command string for the lent machine (the same for every call)."""
    return (
        f"{INSTALL_WHEELS} && PYTHONUNBUFFERED=1 python3 benchmarks/cuda_truth.py all "
        f"--budget {budget} --out $OUT 2>&1 | tee $OUT/console.txt"
    )


# --- prepare (here) -----------------------------------------------------------------------------


def _pinned_sdist() -> Path:
    """The sdist from the engine cache, else downloaded the way scripts/build_engines.py does."""
    from devkit.kit_build import build_engines_module

    engines = build_engines_module(REPO)
    engine = engines.ENGINES["upstream"]
    folder = Path(engines.cache_root()) / engine.key / "sdist"
    cached = folder / SDIST_NAME
    if cached.exists():
        return cached
    say(f"downloading {engine.package}=={engine.version} (scripts/build_engines.py's way)")
    return Path(
        engines.download_sdist(engines.tools_python(Path(engines.cache_root())), engine, folder)
    )


def _b11549_sdist() -> Path | None:
    """The b11549 sdist scripts/build_engines.py downloaded (None: not built here yet)."""
    from devkit.kit_build import B11549_SDIST_NAME, B11549_SDIST_SHA256, build_engines_module

    engines = build_engines_module(REPO)
    found = Path(engines.cache_root()) / engines.ENGINES["upstream-b11549"].key / "sdist"
    path = found / B11549_SDIST_NAME
    return path if path.exists() and sha256_of(path) == B11549_SDIST_SHA256 else None


def _wheel_versions() -> list[str]:
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in WHEELS]


def _travel_bytes() -> int:
    """What a lent machine receives: tracked and untracked-not-ignored files, and the kit."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    total = sum(
        (REPO / p.decode()).stat().st_size for p in listed if p and (REPO / p.decode()).is_file()
    )
    return total + sum(p.stat().st_size for p in KIT.rglob("*") if p.is_file())


def prepare(args: argparse.Namespace) -> int:
    KIT.mkdir(exist_ok=True)
    target = KIT / SDIST_NAME
    if not target.exists() or sha256_of(target) != SDIST_SHA256:
        source = _pinned_sdist()
        shutil.copyfile(source, target)
    digest = sha256_of(target)
    if digest != SDIST_SHA256:
        say(f"{target} has sha256 {digest}, not the pinned {SDIST_SHA256}: delete it and retry")
        return 1
    say(f"sdist: {target} ({target.stat().st_size / 2**20:.1f} MiB, sha256 matches)")
    b11549 = _b11549_sdist()
    if b11549 is not None:  # for the moe-cache table (--sdist .cuda-kit/<it>)
        shutil.copyfile(b11549, KIT / b11549.name)
        say(f"sdist: {KIT / b11549.name} (upstream b11549, for --table moe-cache)")
    wheels = KIT / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
    argv += ["--no-deps", "--only-binary=:all:", "--python-version", DEVICE_PYTHON]
    argv += ["--implementation", "cp", "-d", str(wheels)]
    for platform_tag in DEVICE_PLATFORMS:
        argv += ["--platform", platform_tag]
    argv += _wheel_versions()
    say("$ " + " ".join(argv[3:]))
    subprocess.run(argv, check=True)
    # mtpstudio itself, as a wheel: its catalogue data and templates come with it
    own = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check"]
    own += ["--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)]
    subprocess.run(own, check=True)
    for wheel in sorted(wheels.glob("*.whl")):
        say(f"wheel: {wheel.name}")
    travel = _travel_bytes()
    say(f"a lent machine will receive {travel / 2**20:.1f} MiB (limit {TRAVEL_LIMIT / 2**20:.0f})")
    if travel > TRAVEL_LIMIT:
        say("that is over the limit: remove untracked files from the checkout first")
        return 1
    say("device command (run it up to three times back to back, carry: ['.cuda-kit']):")
    print(device_command(args.budget))
    return 0


# --- build / run / all (on the GPU machine) -----------------------------------------------------


def _sdist() -> Path:
    sdist = KIT / SDIST_NAME
    if not sdist.exists():
        raise SystemExit(f"{sdist} is missing: run `prepare` here and carry .cuda-kit")
    return sdist


def _work(args: argparse.Namespace) -> Path:
    return Path(args.work) if args.work else WORK


def _out(args: argparse.Namespace) -> Path:
    out = Path(args.out or os.environ.get("OUT") or _work(args) / "out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _build(args: argparse.Namespace, budget: float) -> bool:
    state = build(
        REPO,
        args.sdist or _sdist(),
        _work(args),
        cuda=not args.cpu,
        budget_s=budget,
        jobs=args.jobs,
        log=_out(args) / "build.log",
        say=say,
    )
    return state.done


def _run(args: argparse.Namespace, budget: float) -> bool:
    from devkit.kit_build import BuildPaths, build_kind
    from devkit.kit_runs import run_table

    sdist = args.sdist or KIT / SDIST_NAME
    kind = build_kind(sdist, cuda=not args.cpu)  # cuda-b11549 for the b11549 sdist
    binary = Path(args.binary) if args.binary else BuildPaths(_work(args) / kind).binary
    if not binary.exists():
        say(f"no {binary}: build first")
        return False
    os.environ.setdefault("XDG_CACHE_HOME", str(_work(args) / "xdg-cache"))
    return run_table(
        REPO,
        binary,
        _work(args) / kind / "run",
        _out(args),
        backend=kind,
        table_name=args.table or ("dry" if args.cpu else "full"),
        budget_s=budget,
        reserve_s=args.reserve,
        say=say,
    )


def build_cmd(args: argparse.Namespace) -> int:
    done = _build(args, args.budget)
    print("BUILD DONE" if done else "BUILD NOT DONE: run again", flush=True)
    return 0 if done else 3


def run_cmd(args: argparse.Namespace) -> int:
    complete = _run(args, args.budget)
    print("ALL DONE" if complete else "LOADS LEFT: run again", flush=True)
    return 0 if complete else 3


def all_cmd(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if not args.binary and not _build(args, args.budget):
        print("BUILD NOT DONE: run the same command again", flush=True)
        return 3
    left = args.budget - (time.monotonic() - started)
    complete = _run(args, left)
    print("ALL DONE" if complete else "LOADS LEFT: run the same command again", flush=True)
    return 0 if complete else 3


# --- convert (here) ---------------------------------------------------------------------------


def convert_cmd(args: argparse.Namespace) -> int:
    from devkit.cuda_compare import all_within_targets, write_fixture

    folder, comparison = write_fixture(Path(args.archive), Path(args.fixtures))
    for line in comparison.table_lines():
        print(line)
    print(f"fixtures: {folder}")
    return 0 if all_within_targets(comparison) and not comparison.failed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: the sdist and wheels into .cuda-kit/")
    p.add_argument("--budget", type=int, default=570, help="seconds per device command")
    p.set_defaults(func=prepare)
    for name, func in (("build", build_cmd), ("run", run_cmd), ("all", all_cmd)):
        p = sub.add_parser(name, help=f"on the GPU machine: {name}")
        p.add_argument("--budget", type=float, default=570.0, help="seconds this call may take")
        p.add_argument("--out", help="where the archive and logs go (default $OUT)")
        p.add_argument("--cpu", action="store_true", help="no CUDA: the dry run")
        p.add_argument(
            "--table",
            choices=("full", "short", "growth", "moe-cache", "dry"),
            help="which loads (moe-cache: with --sdist .cuda-kit/xllamacpp-2026.10.11549.tar.gz)",
        )
        p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
        p.add_argument("--sdist", type=Path, help="the pinned sdist (default .cuda-kit/)")
        p.add_argument("--binary", help="use this llama-server instead of building one")
        p.add_argument("--reserve", type=float, default=75.0, help="seconds kept for one load")
        p.add_argument("--work", help="the build and run folder (default .cuda-build/)")
        p.set_defaults(func=func)
    p = sub.add_parser("convert", help="here: archive -> tests/fixtures/cuda_truth/ + table")
    p.add_argument("archive")
    p.add_argument("--fixtures", default=str(REPO / "tests" / "fixtures" / "cuda_truth"))
    p.set_defaults(func=convert_cmd)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
