"""Benchmark: mtpstudio's header reader vs gguf.GGUFReader on a Qwen3.6-sized vocabulary."""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter
from gguf.constants import GGUFValueType

from mtpstudio.core.model.gguf import LazyStringArray, read_gguf

N_VOCAB = 248_320
N_MERGES = 247_587
ARCH = "qwen35moe"


def _byte_chars() -> list[str]:
    """GPT-2 byte-level alphabet (256 printable characters standing for bytes)."""
    printable = list(range(ord("!"), ord("~") + 1))
    printable += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def make_vocab(seed: int = 0) -> tuple[list[str], list[str]]:
    """Qwen-like tokens (byte-level BPE text, a few very long ones) and merges."""
    rng = random.Random(seed)
    alphabet = _byte_chars()
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,;:"
    tokens = list(alphabet)
    seen = set(tokens)
    while len(tokens) < N_VOCAB - 32:
        n = rng.choice((1, 2, 2, 3, 3, 4, 4, 5, 6, 7, 8, 9, 11, 14))
        word = "".join(rng.choice(letters) for _ in range(n))
        if rng.random() < 0.5:
            word = "Ġ" + word
        elif rng.random() < 0.05:
            word = "".join(rng.choice(alphabet[128:]) for _ in range(n))
        if word not in seen:
            seen.add(word)
            tokens.append(word)
    for i in range(32):  # long whitespace/punctuation runs, as real vocabularies have
        tokens.append("Ġ" * (100 + 8 * i) + str(i))
    merges = []
    for tok in tokens[256 : 256 + N_MERGES]:
        cut = max(1, len(tok) // 2)
        merges.append(f"{tok[:cut]} {tok[cut:] or 'x'}")
    while len(merges) < N_MERGES:
        merges.append(f"{rng.choice(letters)} {rng.choice(letters)}")
    return tokens, merges


def write_model(path: Path) -> None:
    """Writes the benchmark GGUF: full tokenizer metadata plus a few small tensors."""
    tokens, merges = make_vocab()
    w = GGUFWriter(path, ARCH)
    w.add_uint32(f"{ARCH}.block_count", 41)
    w.add_uint32(f"{ARCH}.nextn_predict_layers", 1)
    w.add_uint32(f"{ARCH}.context_length", 262144)
    w.add_uint32(f"{ARCH}.embedding_length", 2048)
    w.add_uint32(f"{ARCH}.attention.head_count", 16)
    w.add_uint32(f"{ARCH}.attention.head_count_kv", 2)
    w.add_uint32(f"{ARCH}.expert_count", 256)
    w.add_uint32(f"{ARCH}.expert_used_count", 8)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_key_value("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY, GGUFValueType.STRING)
    w.add_key_value(
        "tokenizer.ggml.token_type", [1] * len(tokens), GGUFValueType.ARRAY, GGUFValueType.INT32
    )
    w.add_key_value("tokenizer.ggml.merges", merges, GGUFValueType.ARRAY, GGUFValueType.STRING)
    w.add_uint32("tokenizer.ggml.eos_token_id", 248046)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}")
    rng = np.random.default_rng(0)
    for i in range(4):
        w.add_tensor(f"blk.{i}.attn_norm.weight", rng.standard_normal(2048).astype(np.float32))
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20, help="runs of our reader (best of)")
    parser.add_argument("--reader-repeats", type=int, default=2, help="runs of GGUFReader")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qwen36-vocab.gguf"
        t0 = time.perf_counter()
        write_model(path)
        print(f"wrote {path.stat().st_size:,} bytes in {time.perf_counter() - t0:.1f} s")

        g = read_gguf(path)
        tokens = g.metadata["tokenizer.ggml.tokens"]
        merges = g.metadata["tokenizer.ggml.merges"]
        assert isinstance(tokens, LazyStringArray) and isinstance(merges, LazyStringArray)
        assert len(tokens) == N_VOCAB and len(merges) == N_MERGES
        ours = best_of(lambda: read_gguf(path), args.repeats)
        readers: list[GGUFReader] = []
        theirs = best_of(lambda: readers.append(GGUFReader(path)), args.reader_repeats)
        field = readers[-1].fields["tokenizer.ggml.tokens"]
        assert tokens[-1] == field.contents(-1)
        t0 = time.perf_counter()
        decoded = tokens.to_list()
        decode = time.perf_counter() - t0
        assert decoded[1000] == field.contents(1000)

        print(f"header bytes read by mtpstudio: {g.header_size:,} of {g.file_size:,} (file)")
        print(f"mtpstudio read_gguf: {ours * 1000:.1f} ms (best of {args.repeats})")
        print(f"gguf.GGUFReader:     {theirs * 1000:.1f} ms (best of {args.reader_repeats})")
        print(f"speed-up: {theirs / ours:.0f}x")
        print(f"decoding all {len(tokens):,} tokens on request: {decode * 1000:.1f} ms")


if __name__ == "__main__":
    main()
