"""Turn a GGUF header (a catalogue card) into a loadable zero-weight GGUF, as a sparse file.

The header and tensor table are copied byte for byte; the tensor data is a hole made by
``truncate``, so the file has the real model's size and layout but takes a few MB on disk, and
every weight reads as zero. Loaded with mmap (the engines' default) nothing but the pages the
engine touches is ever read.

CLI, from the repository root: ``python -m devkit.zero_gguf CARD_OR_GGUF OUT``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mtpstudio.core.catalog.models import model_card_path, model_cards
from mtpstudio.core.errors import CatalogError, GgufError, MtpStudioError
from mtpstudio.core.model.gguf import read_gguf


def data_size(header: Path) -> tuple[int, int]:
    """(start of the tensor data, bytes of tensor data) of the single-file GGUF ``header``.

    The data size is the end of the last tensor rounded up to the file's alignment.
    """
    g = read_gguf(header)
    if len(g.paths) != 1:
        raise GgufError(
            f"{header} is a split model; a zero-weight copy needs a single file",
            hint="Merge the parts with llama-gguf-split --merge first.",
        )
    end = max((t.offset + t.n_bytes for t in g.tensors), default=0)
    align = max(1, g.alignment)
    return g.data_offset, -(-end // align) * align


def write_zero_gguf(header: Path, out: Path) -> Path:
    """Write ``out``: ``header``'s bytes up to the tensor data, then a hole of the data's size.

    Written to a temporary name beside ``out`` and renamed, so a reader never sees half a file.
    """
    start, size = data_size(header)
    with open(header, "rb") as src:
        head = src.read(start)
    if len(head) != start:
        raise GgufError(f"{header} ends before its tensor data starts at byte {start}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with open(tmp, "wb") as dst:
            dst.write(head)
            dst.truncate(start + size)  # a hole: no blocks on disk, reads as zeros
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def header_for(card_or_path: str) -> Path:
    """The GGUF header of catalogue card ``card_or_path``, or that path when it is a file."""
    path = Path(card_or_path)
    if path.is_file():
        return path
    return model_card_path(card_or_path)


def zero_gguf_for_card(card_id: str, out: Path) -> Path:
    """A zero-weight GGUF of catalogue card ``card_id`` at ``out``."""
    return write_zero_gguf(model_card_path(card_id), out)


def disk_bytes(path: Path) -> int:
    """Bytes the file really occupies on disk (allocated blocks, not its apparent size)."""
    return os.stat(path).st_blocks * 512


def main(argv: list[str] | None = None) -> int:
    cards = ", ".join(c.card_id for c in model_cards())
    parser = argparse.ArgumentParser(
        prog="python -m devkit.zero_gguf",
        description="Write a zero-weight, sparse GGUF from a catalogue card or a GGUF header.",
    )
    parser.add_argument("card", help=f"a catalogue card ({cards}) or a GGUF header file")
    parser.add_argument("out", type=Path, help="the GGUF file to write")
    args = parser.parse_args(argv)
    try:
        out = write_zero_gguf(header_for(args.card), args.out)
    except CatalogError as exc:
        print(f"error: {exc}" + (f" {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 2
    except MtpStudioError as exc:
        print(f"error: {exc}" + (f" {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    size = out.stat().st_size
    print(f"{out}: {size / 2**30:.2f} GiB apparent, {disk_bytes(out) / 2**20:.1f} MiB on disk")
    return 0


if __name__ == "__main__":
    sys.exit(main())
