"""The full-size accuracy run: zero-weight Qwen3.6 cards loaded by a real llama-server."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from devkit.budget_check import LoadConfig, SegmentRow, rows_for
from devkit.load_probe import load_log
from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.model.gguf import read_model_info

CARD_35B = "qwen3.6-35b-a3b-iq4_xs"
CARD_27B = "qwen3.6-27b-iq4_xs"
_NO_WARMUP = ("--no-warmup", "-t", "2")


def _c(name: str, ctx: int, **kw: object) -> LoadConfig:
    return LoadConfig(name, ctx, extra=_NO_WARMUP, **kw)  # type: ignore[arg-type]


# RAM: the K/V cache is really allocated (and cleared), so the 27B's 128k runs use q8_0.
FULLSIZE: dict[str, tuple[LoadConfig, ...]] = {
    CARD_35B: (
        _c("off 4k f16", 4096),
        _c("off 8k f16", 8192),
        _c("off 32k q8_0", 32768, ctk="q8_0", ctv="q8_0"),
        _c("off 128k f16", 131072),
        _c("off 4k fa off", 4096, fa="off"),
        _c("off 32k n-cpu-moe 20", 32768, ctk="q8_0", ctv="q8_0", moe="n_cpu_moe", n_cpu_moe=20),
        _c("on dmax1 4k f16", 4096, mtp=1),
        _c("on dmax1 12k f16", 12288, mtp=1),
        _c(
            "on dmax2 16k q8_0/q8_0",
            16384,
            ctk="q8_0",
            ctv="q8_0",
            mtp=2,
            draft_ctk="q8_0",
            draft_ctv="q8_0",
        ),
        _c("on dmax3 32k f16", 32768, mtp=3),
        _c("on dmax3 32k cpu-moe", 32768, ctk="q8_0", ctv="q8_0", mtp=3, moe="all_cpu"),
        _c(
            "on dmax3 128k q8_0/q8_0",
            131072,
            ctk="q8_0",
            ctv="q8_0",
            mtp=3,
            draft_ctk="q8_0",
            draft_ctv="q8_0",
        ),
        # small ubatches: the first delta-net block's kept states decide the trunk buffer
        _c("on dmax1 4k ub64", 4096, mtp=1, ubatch=64),
        _c("on dmax3 8k ub128", 8192, mtp=3, ubatch=128),
        _c("on dmax3 16k ub256 q8_0", 16384, ctk="q8_0", ctv="q8_0", mtp=3, ubatch=256),
    ),
    CARD_27B: (
        _c("off 4k f16", 4096),
        _c("off 32k q8_0", 32768, ctk="q8_0", ctv="q8_0"),
        _c("off 64k f16", 65536),
        _c("on dmax1 8k f16", 8192, mtp=1),
        _c("on dmax3 32k q8_0", 32768, ctk="q8_0", ctv="q8_0", mtp=3),
        _c(
            "on dmax2 128k q8_0/q8_0",
            131072,
            ctk="q8_0",
            ctv="q8_0",
            mtp=2,
            draft_ctk="q8_0",
            draft_ctv="q8_0",
        ),
        _c("on dmax3 4k ub128", 4096, mtp=3, ubatch=128),
    ),
}

# CI: MTP on and off on the 35B card; the draft buffer where it steps up (12k) and with a
# quantized draft cache (its Hadamard rotations), the trunk with a quantized cache at 32k.
CI_SUBSET: dict[str, tuple[LoadConfig, ...]] = {
    CARD_35B: (
        _c("on dmax3 4k f16", 4096, mtp=3),
        _c("off 32k q8_0", 32768, ctk="q8_0", ctv="q8_0"),
        _c("on dmax1 12k f16", 12288, mtp=1),
        _c(
            "on dmax2 16k q8_0/q8_0",
            16384,
            ctk="q8_0",
            ctv="q8_0",
            mtp=2,
            draft_ctk="q8_0",
            draft_ctv="q8_0",
        ),
    ),
}


@dataclass(frozen=True)
class LoadFailure:
    """A configuration whose server did not load; ``log_path`` says why."""

    model: str
    config: str
    log_path: Path


def run_fullsize(
    binary: Path,
    workdir: Path,
    configs: dict[str, tuple[LoadConfig, ...]],
    *,
    progress: Callable[[str], None] | None = None,
    write: Callable[[str, Path], Path] = zero_gguf_for_card,
) -> tuple[list[SegmentRow], list[LoadFailure]]:
    """Write each model's zero-weight GGUF into ``workdir``, load every config, compare.

    ``write(name, path)`` makes the model (default: a catalogue card of that id). The GGUF is
    deleted after its runs (it is sparse, but its page cache is not).
    """
    rows: list[SegmentRow] = []
    failures: list[LoadFailure] = []
    for card, card_configs in configs.items():
        model = write(card, workdir / f"{card}-zero.gguf")
        try:
            info = read_model_info(model)
            for i, config in enumerate(card_configs):
                log_path = workdir / "logs" / f"{card}-{i:02d}.log"
                text, loaded = load_log(binary, model, config.server_args(), log_path)
                if not loaded:
                    failures.append(LoadFailure(card, config.name, log_path))
                    continue
                got = rows_for(card, config, info, text)
                rows += got
                if progress:
                    misses = [r.segment for r in got if not r.ok]
                    progress(f"{card} / {config.name}: {misses or 'ok'}")
        finally:
            model.unlink(missing_ok=True)
    return rows, failures


def all_ok(rows: Iterable[SegmentRow]) -> bool:
    """Every segment within its target."""
    return all(r.ok for r in rows)
