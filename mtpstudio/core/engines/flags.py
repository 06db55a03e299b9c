"""Every llama-server flag mtpstudio knows: options, the spellings both engines share, probe table.

``Option`` names an engine option independently of its spelling; each engine profile
(``engines/profiles/``) says how its flavour spells it (the argv builder emits only those), with
``SHARED_SPELLINGS`` for the flags every flavour spells alike; ``CANDIDATE_FLAGS`` is the probe
table: every profile's spelling plus the flags detection reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

# Every --spec-type value either engine knows (upstream common/speculative.cpp, ik common.cpp).
SPEC_TYPES: tuple[str, ...] = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)


@dataclass(frozen=True)
class FlagSpec:
    """One flag spelling and the argument lists to try after it.

    ``forms`` are tried in order and the first that exits 0 wins: ``()`` is a switch;
    ``("on",), ()`` covers upstream's ``--fit on`` and ik's bare ``--fit``. Values must be valid
    because the engines run the value handlers before reaching ``--version``.
    """

    flag: str
    forms: tuple[tuple[str, ...], ...]
    purpose: str


def _flags(
    spellings: Sequence[str], forms: Sequence[Sequence[str]], purpose: str
) -> list[FlagSpec]:
    frozen = tuple(tuple(f) for f in forms)
    return [FlagSpec(s, frozen, purpose) for s in spellings]


SWITCH: tuple[tuple[str, ...], ...] = ((),)

CANDIDATE_FLAGS: tuple[FlagSpec, ...] = tuple(
    [
        *_flags(["-m", "--model"], [["model.gguf"]], "model file"),
        *_flags(
            ["-md", "--model-draft", "--spec-draft-model"], [["draft.gguf"]], "draft/MTP model"
        ),
        *_flags(["-c", "--ctx-size"], [["4096"]], "context size"),
        *_flags(["-ctk", "--cache-type-k", "-ctv", "--cache-type-v"], [["q8_0"]], "K/V cache"),
        *_flags(
            [
                "-ctkd",
                "--cache-type-k-draft",
                "--spec-draft-type-k",
                "-ctvd",
                "--cache-type-v-draft",
                "--spec-draft-type-v",
            ],
            [["f16"]],
            "draft K/V cache",
        ),
        *_flags(["-fa", "--flash-attn"], [["on"], ["1"]], "flash attention"),
        *_flags(["-no-fa", "--no-flash-attn"], SWITCH, "flash attention off"),
        *_flags(["-b", "--batch-size"], [["2048"]], "logical batch"),
        *_flags(["-ub", "--ubatch-size"], [["512"]], "physical batch"),
        *_flags(["-np", "--parallel"], [["1"]], "server slots"),
        *_flags(["-t", "--threads", "-tb", "--threads-batch"], [["4"]], "CPU threads"),
        *_flags(["-ngl", "--gpu-layers", "--n-gpu-layers"], [["99"]], "GPU layers"),
        *_flags(["-ngld", "--gpu-layers-draft", "--spec-draft-ngl"], [["99"]], "draft GPU layers"),
        *_flags(["-ncmoe", "--n-cpu-moe"], [["4"]], "experts of the first N layers on CPU"),
        *_flags(["-cmoe", "--cpu-moe"], SWITCH, "all experts on CPU"),
        *_flags(["-ot", "--override-tensor"], [["x=CPU"]], "tensor placement override"),
        *_flags(["-fit", "--fit"], [["on"], []], "engine's own fit"),
        *_flags(["-fitt", "--fit-target"], [["1024"]], "fit margin per device (upstream)"),
        *_flags(["-fitc", "--fit-ctx"], [["4096"]], "fit's smallest context (upstream)"),
        *_flags(["--fit-margin"], [["1024"]], "fit margin (ik)"),
        *_flags(["-lm", "--load-mode"], [["mmap"]], "load mode (upstream)"),
        *_flags(["--mlock"], SWITCH, "lock weights in RAM"),
        *_flags(["--no-mmap"], SWITCH, "read weights instead of mapping"),
        *_flags(["--no-op-offload"], SWITCH, "keep RAM experts' work on the CPU (upstream)"),
        *_flags(["--moe-cache-mib"], [["0"]], "GPU cache of the RAM experts (upstream b11549)"),
        *_flags(["--spec-type"], [["none"]], "speculative decoding type"),
        *_flags(["--spec-draft-n-max"], [["3"]], "draft depth (upstream)"),
        *_flags(["--spec-draft-n-min"], [["0"]], "fewest drafted tokens (upstream)"),
        *_flags(["--spec-draft-p-min", "--draft-p-min"], [["0.75"]], "draft p-min"),
        *_flags(["--draft-max", "--draft", "--draft-n"], [["3"]], "draft depth (ik)"),
        *_flags(["--draft-min", "--draft-n-min"], [["0"]], "fewest drafted tokens (ik)"),
        *_flags(["-mtp", "--multi-token-prediction"], SWITCH, "MTP on (ik)"),
        *_flags(["-no-mtp", "--no-multi-token-prediction"], SWITCH, "MTP off (ik)"),
        *_flags(["--host"], [["127.0.0.1"]], "listen address"),
        *_flags(["--port"], [["8080"]], "listen port"),
        *_flags(["--api-key"], [["probe-key"]], "API key"),
        *_flags(["--api-key-file"], [["/dev/null"]], "API key file"),
        *_flags(["-a", "--alias"], [["probe"]], "model alias"),
        *_flags(["-lv", "--log-verbosity", "--verbosity"], [["4"]], "log verbosity"),
        *_flags(["-v", "--verbose"], SWITCH, "log everything"),
        *_flags(["--metrics"], SWITCH, "Prometheus /metrics"),
        *_flags(["-kvu", "--kv-unified"], SWITCH, "unified KV cache (upstream)"),
        *_flags(["--jinja"], SWITCH, "chat template engine"),
        *_flags(["-nkvo", "--no-kv-offload"], SWITCH, "KV cache on the CPU"),
        *_flags(["--no-warmup"], SWITCH, "skip warm-up"),
        *_flags(["-cram", "--cache-ram"], [["0"]], "host prompt cache"),
        *_flags(["-dev", "--device"], [["none"]], "device list"),
        *_flags(["-sm", "--split-mode"], [["layer"]], "multi-GPU split"),
        *_flags(["-mg", "--main-gpu"], [["0"]], "main GPU"),
        *_flags(["-ts", "--tensor-split"], [["1"]], "multi-GPU proportions"),
    ]
)


class Option(StrEnum):
    """An engine option, independent of how a build spells it."""

    MODEL = "model"
    HOST = "host"
    PORT = "port"
    API_KEY = "api-key"
    API_KEY_FILE = "api-key-file"
    CTX = "ctx"
    CACHE_K = "cache-type-k"
    CACHE_V = "cache-type-v"
    FLASH_ATTN = "flash-attn"
    BATCH = "batch"
    UBATCH = "ubatch"
    PARALLEL = "parallel"
    THREADS = "threads"
    GPU_LAYERS = "gpu-layers"
    N_CPU_MOE = "n-cpu-moe"
    CPU_MOE = "cpu-moe"
    OVERRIDE_TENSOR = "override-tensor"
    FIT = "fit"
    FIT_TARGET = "fit-target"
    FIT_MARGIN = "fit-margin"
    LOAD_MODE = "load-mode"
    MLOCK = "mlock"
    NO_MMAP = "no-mmap"
    SPEC_TYPE = "spec-type"
    MTP = "mtp"
    DRAFT_MAX = "draft-max"
    DRAFT_MIN = "draft-min"
    DRAFT_P_MIN = "draft-p-min"
    DRAFT_CACHE_K = "draft-cache-type-k"
    DRAFT_CACHE_V = "draft-cache-type-v"
    VERBOSITY = "verbosity"
    NO_OP_OFFLOAD = "no-op-offload"
    MOE_CACHE_MIB = "moe-cache-mib"
    DRAFT_MODEL = "draft-model"
    DRAFT_GPU_LAYERS = "draft-gpu-layers"
    RPC = "rpc"
    DEVICE = "device"
    SPLIT_MODE = "split-mode"
    TENSOR_SPLIT = "tensor-split"


@dataclass(frozen=True)
class FlagSpelling:
    """How one flavour spells an option.

    ``spellings`` are in order of preference: the first is what current builds use, later
    ones are older or alternative names the adapter falls back to when the probe rejected
    the earlier ones. ``probe_value`` is a value the parser accepts, for the
    ``<flag> <value> --version`` probe (None: the flag is a switch).
    """

    spellings: tuple[str, ...]
    probe_value: str | None


SHARED_SPELLINGS: Mapping[Option, FlagSpelling] = MappingProxyType(
    {
        Option.MODEL: FlagSpelling(("-m", "--model"), "model.gguf"),
        Option.HOST: FlagSpelling(("--host",), "127.0.0.1"),
        Option.PORT: FlagSpelling(("--port",), "8080"),
        Option.API_KEY: FlagSpelling(("--api-key",), "probe"),
        Option.API_KEY_FILE: FlagSpelling(("--api-key-file",), "/dev/null"),
        Option.CTX: FlagSpelling(("-c", "--ctx-size"), "4096"),
        Option.CACHE_K: FlagSpelling(("-ctk", "--cache-type-k"), "f16"),
        Option.CACHE_V: FlagSpelling(("-ctv", "--cache-type-v"), "f16"),
        Option.FLASH_ATTN: FlagSpelling(("-fa", "--flash-attn"), "on"),
        Option.BATCH: FlagSpelling(("-b", "--batch-size"), "2048"),
        Option.UBATCH: FlagSpelling(("-ub", "--ubatch-size"), "512"),
        Option.PARALLEL: FlagSpelling(("--parallel", "-np"), "1"),
        Option.THREADS: FlagSpelling(("-t", "--threads"), "4"),
        Option.GPU_LAYERS: FlagSpelling(("-ngl", "--n-gpu-layers", "--gpu-layers"), "999"),
        Option.N_CPU_MOE: FlagSpelling(("--n-cpu-moe", "-ncmoe"), "1"),
        Option.CPU_MOE: FlagSpelling(("--cpu-moe", "-cmoe"), None),
        Option.OVERRIDE_TENSOR: FlagSpelling(("-ot", "--override-tensor"), "x=CPU"),
        Option.DEVICE: FlagSpelling(("-dev", "--device"), "none"),
        Option.SPLIT_MODE: FlagSpelling(("-sm", "--split-mode"), "layer"),
        Option.TENSOR_SPLIT: FlagSpelling(("-ts", "--tensor-split"), "1"),
        # not probed with --version: upstream's parser connects to the server at once (and
        # aborts when none answers); a build has it when its RPC backend is in the file
        Option.RPC: FlagSpelling(("--rpc",), None),
    }
)
"""The flags both engines spell alike (server, context, cache, batching, offload, devices)."""

RPC_FLAG = "--rpc"
"""Counted as accepted when the build's file holds the RPC backend (``detect.engines``), never
probed: upstream connects to the named server while parsing it, and ik accepts it even in a
build without RPC, where it does nothing."""
FILE_PROBED_FLAGS = frozenset({RPC_FLAG})
"""Flags detection takes from what the build's file holds instead of the ``--version`` probe."""
