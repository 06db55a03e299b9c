"""Every llama-server flag mtpstudio knows, one row each (``ENGINE_FLAGS``).

``Option`` names an engine option independently of its spelling; a row says what the probe asks
a build about and, when both flavours spell it alike, that spelling (``SHARED_SPELLINGS`` is
read off the rows); each engine profile (``engines/profiles/``) spells the rest its own way (the
argv builder emits only those). ``CANDIDATE_FLAGS``, the probe table, is every row's probed
spellings.
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


@dataclass(frozen=True)
class Probe:
    """Spellings the ``--version`` probe asks a build about, with the values to try."""

    spellings: tuple[str, ...]
    forms: tuple[tuple[str, ...], ...]
    purpose: str


@dataclass(frozen=True)
class EngineFlag:
    """One engine flag, its one row: the option it serves (None: a flag detection reports
    that no plan sets), the spellings the probe asks about, and the spelling both flavours
    share (None: each profile in ``engines/profiles/`` spells it its own way)."""

    option: Option | None
    probes: tuple[Probe, ...]
    shared: FlagSpelling | None = None


SWITCH: tuple[tuple[str, ...], ...] = ((),)


def _probe(spellings: Sequence[str], forms: Sequence[Sequence[str]], purpose: str) -> Probe:
    return Probe(tuple(spellings), tuple(tuple(f) for f in forms), purpose)


def _flag(
    option: Option | None,
    spellings: Sequence[str],
    forms: Sequence[Sequence[str]],
    purpose: str,
    *,
    shared: tuple[Sequence[str], str | None] | None = None,
    also: Sequence[Probe] = (),
) -> EngineFlag:
    spelled = None if shared is None else FlagSpelling(tuple(shared[0]), shared[1])
    return EngineFlag(option, (_probe(spellings, forms, purpose), *also), spelled)


ENGINE_FLAGS: tuple[EngineFlag, ...] = (
    _flag(Option.MODEL, ["-m", "--model"], [["model.gguf"]], "model file",
          shared=(["-m", "--model"], "model.gguf")),
    _flag(Option.DRAFT_MODEL, ["-md", "--model-draft", "--spec-draft-model"], [["draft.gguf"]],
          "draft/MTP model"),
    _flag(Option.CTX, ["-c", "--ctx-size"], [["4096"]], "context size",
          shared=(["-c", "--ctx-size"], "4096")),
    _flag(Option.CACHE_K, ["-ctk", "--cache-type-k"], [["q8_0"]], "K/V cache",
          shared=(["-ctk", "--cache-type-k"], "f16")),
    _flag(Option.CACHE_V, ["-ctv", "--cache-type-v"], [["q8_0"]], "K/V cache",
          shared=(["-ctv", "--cache-type-v"], "f16")),
    _flag(Option.DRAFT_CACHE_K, ["-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"],
          [["f16"]], "draft K/V cache"),
    _flag(Option.DRAFT_CACHE_V, ["-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"],
          [["f16"]], "draft K/V cache"),
    _flag(Option.FLASH_ATTN, ["-fa", "--flash-attn"], [["on"], ["1"]], "flash attention",
          shared=(["-fa", "--flash-attn"], "on"),
          also=[_probe(["-no-fa", "--no-flash-attn"], SWITCH, "flash attention off")]),
    _flag(Option.BATCH, ["-b", "--batch-size"], [["2048"]], "logical batch",
          shared=(["-b", "--batch-size"], "2048")),
    _flag(Option.UBATCH, ["-ub", "--ubatch-size"], [["512"]], "physical batch",
          shared=(["-ub", "--ubatch-size"], "512")),
    _flag(Option.PARALLEL, ["-np", "--parallel"], [["1"]], "server slots",
          shared=(["--parallel", "-np"], "1")),
    _flag(Option.THREADS, ["-t", "--threads", "-tb", "--threads-batch"], [["4"]], "CPU threads",
          shared=(["-t", "--threads"], "4")),
    _flag(Option.GPU_LAYERS, ["-ngl", "--gpu-layers", "--n-gpu-layers"], [["99"]], "GPU layers",
          shared=(["-ngl", "--n-gpu-layers", "--gpu-layers"], "999")),
    _flag(Option.DRAFT_GPU_LAYERS, ["-ngld", "--gpu-layers-draft", "--spec-draft-ngl"], [["99"]],
          "draft GPU layers"),
    _flag(Option.N_CPU_MOE, ["-ncmoe", "--n-cpu-moe"], [["4"]],
          "experts of the first N layers on CPU", shared=(["--n-cpu-moe", "-ncmoe"], "1")),
    _flag(Option.CPU_MOE, ["-cmoe", "--cpu-moe"], SWITCH, "all experts on CPU",
          shared=(["--cpu-moe", "-cmoe"], None)),
    _flag(Option.OVERRIDE_TENSOR, ["-ot", "--override-tensor"], [["x=CPU"]],
          "tensor placement override", shared=(["-ot", "--override-tensor"], "x=CPU")),
    _flag(Option.FIT, ["-fit", "--fit"], [["on"], []], "engine's own fit"),
    _flag(Option.FIT_TARGET, ["-fitt", "--fit-target"], [["1024"]],
          "fit margin per device (upstream)"),
    _flag(None, ["-fitc", "--fit-ctx"], [["4096"]], "fit's smallest context (upstream)"),
    _flag(Option.FIT_MARGIN, ["--fit-margin"], [["1024"]], "fit margin (ik)"),
    _flag(Option.LOAD_MODE, ["-lm", "--load-mode"], [["mmap"]], "load mode (upstream)"),
    _flag(Option.MLOCK, ["--mlock"], SWITCH, "lock weights in RAM"),
    _flag(Option.NO_MMAP, ["--no-mmap"], SWITCH, "read weights instead of mapping"),
    _flag(Option.NO_OP_OFFLOAD, ["--no-op-offload"], SWITCH,
          "keep RAM experts' work on the CPU (upstream)"),
    _flag(Option.MOE_CACHE_MIB, ["--moe-cache-mib"], [["0"]],
          "GPU cache of the RAM experts (upstream b11549)"),
    _flag(Option.SPEC_TYPE, ["--spec-type"], [["none"]], "speculative decoding type"),
    _flag(Option.DRAFT_MAX, ["--spec-draft-n-max"], [["3"]], "draft depth (upstream)",
          also=[_probe(["--draft-max", "--draft", "--draft-n"], [["3"]], "draft depth (ik)")]),
    _flag(Option.DRAFT_MIN, ["--spec-draft-n-min"], [["0"]], "fewest drafted tokens (upstream)",
          also=[_probe(["--draft-min", "--draft-n-min"], [["0"]], "fewest drafted tokens (ik)")]),
    _flag(Option.DRAFT_P_MIN, ["--spec-draft-p-min", "--draft-p-min"], [["0.75"]], "draft p-min"),
    _flag(Option.MTP, ["-mtp", "--multi-token-prediction"], SWITCH, "MTP on (ik)",
          also=[_probe(["-no-mtp", "--no-multi-token-prediction"], SWITCH, "MTP off (ik)")]),
    _flag(Option.HOST, ["--host"], [["127.0.0.1"]], "listen address",
          shared=(["--host"], "127.0.0.1")),
    _flag(Option.PORT, ["--port"], [["8080"]], "listen port", shared=(["--port"], "8080")),
    _flag(Option.API_KEY, ["--api-key"], [["probe-key"]], "API key",
          shared=(["--api-key"], "probe")),
    _flag(Option.API_KEY_FILE, ["--api-key-file"], [["/dev/null"]], "API key file",
          shared=(["--api-key-file"], "/dev/null")),
    _flag(None, ["-a", "--alias"], [["probe"]], "model alias"),
    _flag(Option.VERBOSITY, ["-lv", "--log-verbosity", "--verbosity"], [["4"]], "log verbosity",
          also=[_probe(["-v", "--verbose"], SWITCH, "log everything")]),
    _flag(None, ["--metrics"], SWITCH, "Prometheus /metrics"),
    _flag(None, ["-kvu", "--kv-unified"], SWITCH, "unified KV cache (upstream)"),
    _flag(None, ["--jinja"], SWITCH, "chat template engine"),
    _flag(None, ["-nkvo", "--no-kv-offload"], SWITCH, "KV cache on the CPU"),
    _flag(None, ["--no-warmup"], SWITCH, "skip warm-up"),
    _flag(None, ["-cram", "--cache-ram"], [["0"]], "host prompt cache"),
    _flag(Option.DEVICE, ["-dev", "--device"], [["none"]], "device list",
          shared=(["-dev", "--device"], "none")),
    _flag(Option.SPLIT_MODE, ["-sm", "--split-mode"], [["layer"]], "multi-GPU split",
          shared=(["-sm", "--split-mode"], "layer")),
    _flag(None, ["-mg", "--main-gpu"], [["0"]], "main GPU"),
    _flag(Option.TENSOR_SPLIT, ["-ts", "--tensor-split"], [["1"]], "multi-GPU proportions",
          shared=(["-ts", "--tensor-split"], "1")),
    # not probed with --version: upstream's parser connects to the server at once (and
    # aborts when none answers); a build has it when its RPC backend is in the file
    EngineFlag(Option.RPC, (), FlagSpelling(("--rpc",), None)),
)  # fmt: skip
"""Every llama-server flag mtpstudio knows, one row each: a new flag is one row here, its
spelling in a profile when the flavours differ, and its step in the argv builder."""

CANDIDATE_FLAGS: tuple[FlagSpec, ...] = tuple(
    FlagSpec(spelling, probe.forms, probe.purpose)
    for flag in ENGINE_FLAGS
    for probe in flag.probes
    for spelling in probe.spellings
)
"""The probe table: every spelling of every row, with the values to try."""

SHARED_SPELLINGS: Mapping[Option, FlagSpelling] = MappingProxyType(
    {f.option: f.shared for f in ENGINE_FLAGS if f.option is not None and f.shared is not None}
)
"""The flags both engines spell alike (server, context, cache, batching, offload, devices)."""

RPC_FLAG = "--rpc"
"""Counted as accepted when the build's file holds the RPC backend (``detect.engines``), never
probed: upstream connects to the named server while parsing it, and ik accepts it even in a
build without RPC, where it does nothing."""
FILE_PROBED_FLAGS = frozenset({RPC_FLAG})
"""Flags detection takes from what the build's file holds instead of the ``--version`` probe."""
