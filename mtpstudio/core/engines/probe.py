"""Which flags a llama-server build accepts: candidate table and `<flag> <value> --version` probe.

Both engines parse argv in order and exit 0 on reaching ``--version``; an unknown flag (or a
bad value) placed before it makes them exit non-zero (engines.md §1). Every spelling the Plan
may emit is probed, aliases separately, so an adapter can ask ``build.accepts("-ctk")`` for the
exact spelling it is about to write.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from mtpstudio.core.engines.caps import MtpSupport
from mtpstudio.core.runner import Runner

PROBE_TIMEOUT_S = 5.0
MTP_SPEC_TYPE = "draft-mtp"
MTP_SWITCH = "-mtp"

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


class ProbeOutcome(StrEnum):
    """How a probe ended."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TIMEOUT = "timeout"
    FAILED = "failed"  # could not run at all


@dataclass(frozen=True)
class FlagProbe:
    """The answer for one flag (or one ``--spec-type`` value)."""

    flag: str
    outcome: ProbeOutcome
    args: tuple[str, ...] = ()
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.outcome is ProbeOutcome.ACCEPTED


def probe_argv(binary: Path, flag: str, values: Sequence[str]) -> list[str]:
    """``[binary, flag, *values, "--version"]``."""
    return [str(binary), flag, *values, "--version"]


def probe_flag(binary: Path, spec: FlagSpec, runner: Runner, timeout: float) -> FlagProbe:
    """Try each form of ``spec``; accepted on the first exit status 0."""
    last = FlagProbe(spec.flag, ProbeOutcome.REJECTED)
    for values in spec.forms:
        result = runner(probe_argv(binary, spec.flag, values), timeout)
        if result.ok:
            return FlagProbe(spec.flag, ProbeOutcome.ACCEPTED, tuple(values))
        if result.timed_out:
            outcome = ProbeOutcome.TIMEOUT
        elif result.error is not None:
            outcome = ProbeOutcome.FAILED
        else:
            outcome = ProbeOutcome.REJECTED
        last = FlagProbe(spec.flag, outcome, tuple(values), result.reason(timeout))
        if outcome is not ProbeOutcome.REJECTED:
            break  # a hang or a missing binary will not improve with another form
    return last


def spec_type_specs(types: Iterable[str] = SPEC_TYPES) -> list[FlagSpec]:
    """``--spec-type <value>`` probes, one per candidate value."""
    return [FlagSpec("--spec-type", ((t,),), f"speculative type {t}") for t in types]


def default_workers() -> int:
    return max(2, min(8, (os.cpu_count() or 2) * 2))


def probe_flags(
    binary: Path,
    specs: Sequence[FlagSpec],
    runner: Runner,
    timeout: float = PROBE_TIMEOUT_S,
    workers: int | None = None,
) -> list[FlagProbe]:
    """Probe every spec in parallel; results in the order of ``specs``.

    Threading: ``runner`` is called from up to ``workers`` threads at once.
    """
    if not specs:
        return []
    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return list(pool.map(lambda s: probe_flag(binary, s, runner, timeout), specs))


def mtp_support(accepted_flags: Iterable[str], spec_types: Iterable[str]) -> MtpSupport:
    """Upstream: ``draft-mtp`` among --spec-type values; ik: ``-mtp`` accepted (the model's
    architecture decides at load time whether it is honoured)."""
    if MTP_SPEC_TYPE in set(spec_types):
        return MtpSupport.AVAILABLE
    if MTP_SWITCH in set(accepted_flags):
        return MtpSupport.UNKNOWN_UNTIL_LAUNCH
    return MtpSupport.UNAVAILABLE


def table_fingerprint() -> str:
    """Changes whenever the candidate table changes, so cached probe results are redone."""
    text = repr((CANDIDATE_FLAGS, SPEC_TYPES)).encode()
    return hashlib.sha256(text).hexdigest()[:16]
